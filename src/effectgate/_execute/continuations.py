"""The continuation service: retry or compensate an original, only with proof.

A continuation (docs/continuations.md) is a new operation in the reserved ``cont:`` namespace,
linked to its original by the store in a transaction that fences its sequence number and the
digest of its predecessor's last observation, then journalled through ``Gate.submit`` under
policy at no lower tier than the original, and dispatched through the same pre-dispatch pipeline
as every other row. Its proposer and authoriser may not be the original's proposer or any
process that dispatched the original, and those may not approve or dispatch it either. The
original row is never changed. A continuation's result is an observation of its own row, never
an acceptance of the original.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from effectgate._core.continuation import (
    ContinuationKind,
    ContinuationLink,
    ContinuationProof,
    Ground,
    Observed,
    check_admission,
    continuation_id,
    observation_digest,
)
from effectgate._core.effects import is_continuation_id
from effectgate._core.states import State
from effectgate._execute.adapter import DEFAULT_CALL_TIMEOUT, check_call_timeout
from effectgate._execute.predispatch import ADMITTING, Admission
from effectgate.errors import ContinuationRefused, EffectgateError, OperationNotFound
from effectgate.store._continuations import observed
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX, Operation
from effectgate.store.roles import Store

if TYPE_CHECKING:
    from effectgate._execute._gate_protocol import ContinuationGate

__all__ = ["Chain", "ContinuationService", "continuation_may_dispatch", "original_workers"]

log = logging.getLogger("effectgate.continuations")


@dataclass(frozen=True, slots=True)
class Chain:
    """An original and its continuations as observed now: what ``ops show`` lists and what
    the next continuation must name (``next_seq``, ``predecessor_digest``)."""

    original: Operation
    links: tuple[tuple[ContinuationLink, Operation | None], ...]

    @property
    def next_seq(self) -> int:
        return len(self.links) + 1

    @property
    def predecessor_digest(self) -> str | None:
        """None while the latest continuation is not journalled (observe it again)."""
        last = self.links[-1][1] if self.links else self.original
        return None if last is None else observation_digest(observed(last))

    def to_dict(self) -> dict[str, object]:
        return {
            "original": self.original.operation_id,
            "next_seq": self.next_seq,
            "predecessor_digest": self.predecessor_digest,
            "continuations": [
                {
                    **link.to_dict(),
                    "state": row.state.value if row is not None else None,
                    "venue_id": row.venue_id if row is not None else None,
                    "dispatch_id": row.dispatch_id if row is not None else None,
                }
                for link, row in self.links
            ],
        }


def original_workers(store: Store, scope: str, original_id: str) -> frozenset[str]:
    """The original's proposer and every process that dispatched it, from its audit trail."""
    found: set[str] = set()
    for entry in store.audit_entries(scope=scope, operation_id=original_id, limit=10_000):
        detail = entry.detail
        if not isinstance(detail, Mapping):
            continue
        for key in ("principal", "dispatcher"):
            value = detail.get(key)
            if isinstance(value, str) and value:
                found.add(value)
    return frozenset(found)


class ContinuationService:
    """Retries and compensations through one gate (the Python API behind the CLI and HTTP)."""

    def __init__(
        self, gate: ContinuationGate, *, probe_timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> None:
        self.gate = gate
        self.store = gate.store
        #: Seconds the admission probe (provider idempotency) may take; at most the ceiling.
        self.probe_timeout = check_call_timeout(probe_timeout, "probe_timeout")

    def chain(self, original_id: str, *, scope: str = "default") -> Chain:
        original = self.store.get(scope, original_id)
        if original is None:
            raise OperationNotFound(f"no operation {original_id!r} in scope {scope!r}")
        links = tuple(
            (link, self.store.get(scope, link.operation_id))
            for link in self.store.continuations(scope, original_id)
        )
        return Chain(original, links)

    def retry(
        self,
        original_id: str,
        *,
        proof: ContinuationProof,
        by: str,
        seq: int,
        predecessor: str,
        scope: str = "default",
    ) -> Operation:
        """A new attempt of the original's exact intent, under its own id and authorisation."""
        return self._continue(
            ContinuationKind.RETRY, original_id, None, proof, by, seq, predecessor, scope
        )

    def compensate(
        self,
        original_id: str,
        intent: Mapping[str, object],
        *,
        proof: ContinuationProof,
        by: str,
        seq: int,
        predecessor: str,
        scope: str = "default",
    ) -> Operation:
        """The class's declared compensation (``intent`` of that class) of an applied effect."""
        return self._continue(
            ContinuationKind.COMPENSATE, original_id, intent, proof, by, seq, predecessor, scope
        )

    def _continue(
        self,
        kind: ContinuationKind,
        original_id: str,
        intent: Mapping[str, object] | None,
        proof: ContinuationProof,
        by: str,
        seq: int,
        predecessor: str,
        scope: str,
    ) -> Operation:
        now = self.gate.clock()
        try:
            return self._admit(kind, original_id, intent, proof, by, seq, predecessor, scope, now)
        except ContinuationRefused as exc:
            # A refusal changes nothing but the audit log.
            self.store.append_audit(
                "continuation_refused",
                {"kind": kind.value, "seq": seq, "by": by, "error": exc.to_dict()},
                now=now,
                scope=scope,
                operation_id=original_id if isinstance(original_id, str) else None,
            )
            raise

    def _admit(
        self,
        kind: ContinuationKind,
        original_id: str,
        intent: Mapping[str, object] | None,
        proof: ContinuationProof,
        by: str,
        seq: int,
        predecessor: str,
        scope: str,
        now: float,
    ) -> Operation:
        if (
            not isinstance(by, str)
            or not IDENTITY_PATTERN.fullmatch(by)
            or by.startswith(SYSTEM_PREFIX)
        ):
            raise ContinuationRefused(
                f"by {by!r} is not a principal's name", reason="bad_principal"
            )
        if not isinstance(proof, ContinuationProof):
            raise ContinuationRefused(
                "a continuation needs a ContinuationProof", reason="bad_proof"
            )
        if is_continuation_id(original_id):
            raise ContinuationRefused(
                "continue the original, not a continuation of it", reason="not_an_original"
            )
        chain = self.chain(original_id, scope=scope)
        original = chain.original
        ac = self.gate.registry.get(original.action)
        workers = original_workers(self.store, scope, original_id)
        if by in workers:
            raise ContinuationRefused(
                f"{by!r} worked on the original (proposed or dispatched it): it may neither "
                "authorise nor dispatch its continuation",
                reason="original_worker",
            )
        # An earlier link under this very sequence: a lost acknowledgement. Observe, and
        # journal the SAME admitted continuation (idempotent by its id); never admit anew.
        for link, row in chain.links:
            if link.seq == seq and link.kind is kind and link.predecessor_digest == predecessor:
                return row if row is not None else self._journal(link, intent, workers, by)
        check_admission(
            kind,
            original=_obs(original),
            chain=[(link, _obs(row) if row else None) for link, row in chain.links],
            venue=ac.venue,
            retries_declared=ac.retries,
            compensation=ac.compensation,
            proof=proof,
            seq=seq,
            predecessor_digest=predecessor,
            now=now,
        )
        if proof.ground is Ground.PROVIDER_IDEMPOTENCY:
            self._probe_absent(chain, ac.adapter, scope)
        action = ac.name if kind is ContinuationKind.RETRY else str(ac.compensation)
        if kind is ContinuationKind.COMPENSATE and intent is None:
            raise ContinuationRefused(
                f"a compensation needs the {action} intent", reason="missing_intent"
            )
        link = self.store.link_continuation(
            ContinuationLink(
                scope=scope,
                original_id=original_id,
                seq=seq,
                kind=kind,
                operation_id=continuation_id(original_id, seq),
                action=action,
                predecessor_digest=predecessor,
                proof=proof,
                authorised_by=by,
                created_at=now,
            ),
            now=now,
        )
        return self._journal(link, intent, workers, by)

    def _journal(
        self,
        link: ContinuationLink,
        intent: Mapping[str, object] | None,
        workers: frozenset[str],
        by: str,
    ) -> Operation:
        original = self.store.get(link.scope, link.original_id)
        if original is None:  # unreachable: the link holds it
            raise OperationNotFound(f"no operation {link.original_id!r}")
        body = dict(original.intent) if link.kind is ContinuationKind.RETRY else dict(intent or {})
        body["action"] = link.action
        token = ADMITTING.set(
            Admission(link.operation_id, original.tier or "validate", tuple(sorted(workers | {by})))
        )
        try:
            row = self.gate.submit(
                link.action, link.operation_id, body, scope=link.scope, principal=by
            )
        finally:
            ADMITTING.reset(token)
        if row.state is State.VALIDATED and self.gate.process_id in workers:
            row = replace(
                row,
                detail="admitted, not dispatched: this process dispatched the original; "
                "dispatch it from another process (Gate.dispatch, effectgate continue)",
            )
        return row

    def _probe_absent(self, chain: Chain, adapter_name: str, scope: str) -> None:
        """Provider idempotency is confirmed by a probe: the venue holds no record under the
        predecessor's key."""
        last = chain.links[-1][1] if chain.links else chain.original
        if last is None:  # unreachable: check_admission refused an unjournalled predecessor
            raise ContinuationRefused(
                "the predecessor is not journalled", reason="stale_predecessor"
            )
        adapter = self.gate.adapters[adapter_name]
        try:
            found = adapter.probe(last.op_key, timeout=self.probe_timeout)
        except EffectgateError as exc:
            raise ContinuationRefused(
                f"the probe that confirms provider idempotency failed ({exc.code})",
                reason="probe_failed",
            ) from None
        except Exception as exc:
            raise ContinuationRefused(
                f"the probe that confirms provider idempotency failed ({type(exc).__name__}; "
                f"timeout {self.probe_timeout:g}s)",
                reason="probe_failed",
            ) from None
        if found:
            raise ContinuationRefused(
                f"the venue holds {len(found)} record(s) under {last.op_key}: it applied; "
                "observe it rather than retry",
                reason="predecessor_applied",
            )


def _obs(row: Operation) -> Observed:
    return observed(row)


def continuation_may_dispatch(gate: ContinuationGate, row: Operation, dispatcher: str) -> bool:
    """Neither the original's proposer nor any process that dispatched it dispatches its
    continuation (docs/continuations.md). Another dispatcher may."""
    link = gate.store.continuation_of(row.scope, row.operation_id)
    if link is None:
        return True
    if dispatcher in original_workers(gate.store, row.scope, link.original_id):
        log.warning(
            "%s not dispatched by %s: it worked on the original %s",
            row.op_key,
            dispatcher,
            link.original_id,
        )
        return False
    return True
