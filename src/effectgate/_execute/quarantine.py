"""The operators' quarantine queue and its one resolution service.

:class:`QuarantineService` is what every front door (CLI ``effectgate quarantine``, the operator
HTTP API) and every later feature that settles a row by evidence calls: operators settling
uncertain rows (:meth:`QuarantineService.take_over`, then :meth:`QuarantineService.resolve`),
venues with no read view (the reconciler quarantines their uncertain rows past the horizon).
A resolution carries one proof type, :class:`~effectgate._core.resolution.Proof`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from effectgate._core.controls import ApprovalRules
from effectgate._core.resolution import Resolution
from effectgate._core.speculation import SpeculationRecord
from effectgate._core.states import NON_TERMINAL, State
from effectgate._evidence.audit import ChainEntry
from effectgate.errors import OperationNotFound, ResolutionRefused
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX, Operation
from effectgate.store.roles import Store

__all__ = ["QuarantineService", "QuarantineView"]

_TRAIL_LIMIT = 10_000
#: Audit kinds of the speculative phase; every other entry of the row is the ledger's phase.
SPECULATIVE_KINDS = frozenset(
    {"speculation", "speculation_stalled", "key_mapping_declared", "proposal_arrived"}
)


@dataclass(frozen=True, slots=True)
class QuarantineView:
    """Everything an operator needs beside one quarantined row: both keys, both records (the
    ledger row and its speculations), and the audit entries of both phases side by side."""

    row: Operation
    quarantined_from: State | None
    dispatched: bool
    ledger_key: str
    sandbox_keys: list[str | None]
    declared_mapping: str | None
    arrivals: int
    speculations: list[SpeculationRecord]
    speculative_audit: list[ChainEntry] = field(default_factory=list)
    ledger_audit: list[ChainEntry] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        def entry(e: ChainEntry) -> dict[str, object]:
            return {"seq": e.seq, "at": e.at, "kind": e.kind, "detail": e.detail}

        return {
            "row": self.row.to_dict(),
            "quarantined_from": self.quarantined_from.value if self.quarantined_from else None,
            "dispatched": self.dispatched,
            "ledger_key": self.ledger_key,
            "sandbox_keys": list(self.sandbox_keys),
            "declared_mapping": self.declared_mapping,
            "attempts": self.arrivals,
            "speculations": [s.to_dict() for s in self.speculations],
            "audit": {
                "speculative": [entry(e) for e in self.speculative_audit],
                "ledger": [entry(e) for e in self.ledger_audit],
            },
        }


class QuarantineService:
    """The queue: list, show, resolve; and an operator taking over an uncertain row."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        approval_ttl: float = ApprovalRules().ttl,
    ) -> None:
        self.store = store
        self.clock = clock
        #: A row released back to ``awaiting_approval`` gets a new round this long.
        self.approval_ttl = approval_ttl

    def list(self, scope: str | None = None, *, limit: int = 1000) -> list[Operation]:
        """Quarantined rows, the longest-waiting first."""
        return self.store.list_quarantined(scope, limit=limit)

    def summary(self) -> tuple[int, float]:
        """``(rows in the queue, seconds the oldest has waited)`` (0 when empty)."""
        count, oldest = self.store.quarantine_summary()
        return count, 0.0 if oldest is None else max(0.0, self.clock() - oldest)

    def show(self, scope: str, operation_id: str) -> QuarantineView:
        """One row with both keys, both records and both phases' audit entries."""
        row = self.store.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        trail = self.store.audit_entries(scope=scope, operation_id=operation_id, limit=_TRAIL_LIMIT)
        specs = self.store.speculations(scope, operation_id)
        arrivals, mapping = self.store.speculation_state(scope, operation_id)
        return QuarantineView(
            row=row,
            quarantined_from=(
                self.store.quarantined_from(scope, operation_id)
                if row.state is State.QUARANTINED
                else None
            ),
            dispatched=row.submitted_at is not None,
            ledger_key=row.op_key,
            sandbox_keys=[s.sandbox_key for s in specs],
            declared_mapping=mapping,
            arrivals=arrivals,
            speculations=specs,
            speculative_audit=[e for e in trail if e.kind in SPECULATIVE_KINDS],
            ledger_audit=[e for e in trail if e.kind not in SPECULATIVE_KINDS],
        )

    def resolve(self, scope: str, operation_id: str, resolution: Resolution) -> Operation:
        """Settle a quarantined row by an operator's resolution (invariant 10): applied or
        failed with evidence, or released back (never dispatched rows only; one released to
        ``awaiting_approval`` gets a new approval round of :attr:`approval_ttl`)."""
        return self.store.resolve_quarantine(
            scope, operation_id, resolution, now=self.clock(), approval_ttl=self.approval_ttl
        )

    def take_over(self, scope: str, operation_id: str, *, by: str, reason: str) -> Operation:
        """An operator takes a non-terminal row into the queue (e.g. an uncertain
        ``submitted`` row nobody can settle by reading the venue)."""
        if not IDENTITY_PATTERN.fullmatch(by) or by.startswith(SYSTEM_PREFIX):
            raise ResolutionRefused(f"{by!r} is not an operator's name")
        if not isinstance(reason, str) or not reason.strip():
            raise ResolutionRefused("taking a row over needs a reason")
        row = self.store.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        if row.state not in NON_TERMINAL or row.state is State.QUARANTINED:
            raise ResolutionRefused(f"a {row.state.value!r} row cannot be taken into the queue")
        return self.store.quarantine(
            scope,
            operation_id,
            row.state,
            kind="operator-take-over",
            reason=reason,
            record={"by": by, "reason": reason},
            by=by,
            now=self.clock(),
        )
