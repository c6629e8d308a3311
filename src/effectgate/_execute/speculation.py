"""Speculative pre-execution on the gate's path (seed 000): when to dry-run, and what the
commit does with the verdict.

Speculation runs at proposal (so policy's record and the approvers see the verdict) and again
just before dispatch whenever the verdict would not outlive the retry horizon by then. A
re-speculation uses the same key (the operation key: one key authority) and first consults the
ledger (condition 4). The commit applies :func:`~effectgate._core.speculation.decide_commit`:
``ALLOW`` and fresh commits; ``DENY`` rejects the row with the sandbox's reason; a timeout or an
expiring verdict is speculated again within the class's bound, past which the caller gets
:class:`~effectgate.errors.SpeculationStalled` and an alert fires; an identity or key mismatch
quarantines the row with its full dual-key record and raises
:class:`~effectgate.errors.KeyNamespaceDivergence`. Every log line about a speculative commit
names both keys.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from effectgate._core.controls import Alert
from effectgate._core.intent import ActionClass
from effectgate._core.speculation import (
    CommitStep,
    Speculation,
    SpeculationMode,
    SpeculationRecord,
    SpeculationVerdict,
    check_horizon,
    decide_commit,
)
from effectgate._core.states import State
from effectgate._execute.adapter import DryRun, OutboundRequest, speculator
from effectgate._execute.alerts import raise_alert
from effectgate.errors import (
    ConfigError,
    EffectgateError,
    KeyNamespaceDivergence,
    SpeculationStalled,
    StaleState,
)
from effectgate.store.base import Operation

if TYPE_CHECKING:
    from collections.abc import Mapping

    from effectgate._execute._gate_protocol import SpeculationGate
    from effectgate._execute.adapter import Adapter

__all__ = [
    "DIVERGENCE_ALERT",
    "STALL_ALERT",
    "active_speculation",
    "before_dispatch",
    "check_speculation",
    "speculate",
]

log = logging.getLogger("effectgate.speculation")

#: Alert kinds: a key-namespace divergence quarantined a row; no committable verdict in bound.
DIVERGENCE_ALERT = "key-namespace-divergence"
STALL_ALERT = "speculation-stalled"


def check_speculation(
    classes: Mapping[str, ActionClass], adapters: Mapping[str, Adapter], horizon: float
) -> None:
    """At configuration load: a class that requires speculation has an adapter that can, and
    every speculating class's verdict lifetime exceeds the retry horizon (condition 3)."""
    for name, ac in sorted(classes.items()):
        spec = ac.speculation
        if spec is None or not spec.active:
            continue
        check_horizon(name, spec, horizon)
        if spec.mode is SpeculationMode.REQUIRED and speculator(adapters[ac.adapter]) is None:
            raise ConfigError(
                f"{name}: speculation is required but adapter {ac.adapter!r} cannot speculate"
            )


def active_speculation(gate: SpeculationGate, ac: ActionClass) -> Speculation | None:
    """The class's speculation when it runs for this gate (optional: only if the adapter can)."""
    spec = ac.speculation
    if spec is None or not spec.active:
        return None
    if speculator(gate.adapters[ac.adapter]) is None:
        if spec.mode is SpeculationMode.REQUIRED:  # refused at load; a swapped adapter
            raise ConfigError(f"{ac.name}: speculation is required but the adapter cannot")
        return None
    return spec


def horizon_of(gate: SpeculationGate) -> float:
    """The retry horizon: from the last speculation to the end of the dispatch."""
    return gate.dispatch_timeout + gate.in_flight_grace


def speculate(
    gate: SpeculationGate, row: Operation, attempt: int
) -> tuple[SpeculationRecord, Operation]:
    """One dry run of ``row`` under its operation key, recorded with both keys. A ``DENY`` of a
    ``validated`` row rejects it in the same transaction. Returns the record and the row."""
    adapter = speculator(gate.adapters[gate.registry.get(row.action).adapter])
    if adapter is None:
        raise ConfigError(f"{row.action}: the adapter cannot speculate")
    started = gate.clock()
    request = OutboundRequest(operation_key=row.op_key, action=row.action, effect=row.effect)
    try:
        dry = adapter.speculate(request, attempt=attempt, timeout=gate.dispatch_timeout)
    except Exception as exc:  # no verdict is a timeout: speculate again within the bound
        text = str(exc) if isinstance(exc, EffectgateError) else type(exc).__name__
        dry = DryRun("RETRYABLE_TIMEOUT", f"no verdict: {text[:300]}", None, 0.0)
    record = SpeculationRecord(
        scope=row.scope,
        operation_id=row.operation_id,
        operation_key=row.op_key,
        fingerprint=row.fingerprint,
        sandbox_key=dry.sandbox_key,
        verdict=SpeculationVerdict(dry.verdict),
        reason=dry.reason[:500],
        expires_at=started + max(0.0, dry.expires_in),
        attempt=attempt,
        subject=dry.subject,
        evidence=dict(dry.evidence),
    )
    deny = record.verdict is SpeculationVerdict.DENY and row.state is State.VALIDATED
    stored, moved = gate.store.record_speculation(record, now=gate.clock(), reject=deny)
    log.info(
        "speculation %d of %s: %s (%s); ledger key %s, sandbox key %s, attempt %d",
        stored.seq,
        row.op_key,
        stored.verdict.value,
        stored.reason,
        row.op_key,
        stored.sandbox_key,
        attempt,
    )
    return stored, moved if moved is not None else row


def before_dispatch(
    gate: SpeculationGate, row: Operation, spec: Speculation
) -> tuple[Operation | None, dict[str, object] | None]:
    """The commit check of a ``validated`` row.

    ``(None, commit)`` to dispatch it now, ``commit`` being the dual-key record the dispatch's
    audit entry carries (both keys, the mapping, the strategy, the speculation it commits, the
    attempt); ``(row, None)`` for the row as the check left it (rejected, or no longer
    validated). Raises :class:`KeyNamespaceDivergence` (row quarantined) or
    :class:`SpeculationStalled` (row still validated, with detail)."""
    store = gate.store
    arrivals, mapping = store.speculation_state(row.scope, row.operation_id)
    attempt = max(arrivals, 1)
    horizon = horizon_of(gate)
    deadline = gate.clock() + spec.max_wait
    record = store.latest_speculation(row.scope, row.operation_id)
    tries = 0
    while True:
        now = gate.clock()
        decision = decide_commit(
            record,
            operation_key=row.op_key,
            fingerprint=row.fingerprint,
            spec=spec,
            mapping=mapping,
            now=now,
            horizon=horizon,
        )
        if decision.step is CommitStep.COMMIT:
            if decision.declare is not None:
                mapping = store.declare_key_mapping(
                    row.scope, row.operation_id, row.op_key, decision.declare, now=now
                )
                if mapping != decision.declare:  # another process declared another key first
                    _diverge(gate, row, record, attempt, mapping, "declared mapping changed")
            log.info(
                "speculative commit of %s: ledger key %s, sandbox key %s, attempt %d (%s)",
                row.op_key,
                row.op_key,
                record.sandbox_key if record else None,
                attempt,
                decision.reason,
            )
            return None, {
                "speculation": {
                    "ledger_key": row.op_key,
                    "sandbox_key": record.sandbox_key if record else None,
                    "declared_mapping": mapping,
                    "strategy": spec.strategy.value,
                    "seq": record.seq if record else None,
                    "verdict_expires_at": record.expires_at if record else None,
                    "attempt": attempt,
                    "check": decision.reason,
                }
            }
        if decision.step is CommitStep.REJECT:
            log.warning(
                "speculative commit of %s refused: %s; ledger key %s, sandbox key %s",
                row.op_key,
                decision.reason,
                row.op_key,
                record.sandbox_key if record else None,
            )
            rejected = store.transition(
                row.scope,
                row.operation_id,
                State.VALIDATED,
                State.REJECTED,
                now=now,
                detail=decision.reason,
                audit={
                    "by": "speculation",
                    "ledger_key": row.op_key,
                    "sandbox_key": record.sandbox_key if record else None,
                    "seq": record.seq if record else None,
                },
            )
            return rejected, None
        if decision.step is CommitStep.QUARANTINE:
            _diverge(gate, row, record, attempt, mapping, decision.reason)
        # Re-speculate, within the bound of tries and time.
        if tries >= spec.max_tries or now >= deadline:
            _stall(gate, row, record, attempt, tries, decision.reason)
        # Condition 4: consult the ledger before speculating again under the same key.
        current = store.get(row.scope, row.operation_id)
        if current is None or current.state is not State.VALIDATED:
            return (current if current is not None else row), None
        row = current
        tries += 1
        record, row = speculate(gate, row, attempt)
        if row.state is not State.VALIDATED:
            return row, None


def _diverge(
    gate: SpeculationGate,
    row: Operation,
    record: SpeculationRecord | None,
    attempt: int,
    mapping: str | None,
    reason: str,
) -> None:
    sandbox_key = record.sandbox_key if record else None
    now = gate.clock()
    spec = gate.registry.get(row.action).speculation
    strategy = spec.strategy.value if spec else None
    full: dict[str, object] = {
        "operation_id": row.operation_id,
        "ledger_key": row.op_key,
        "sandbox_key": sandbox_key,
        "declared_mapping": mapping,
        "strategy": strategy,
        "attempt": attempt,
        "fingerprint": row.fingerprint,
        "reason": reason,
        "speculations": [r.to_dict() for r in gate.store.speculations(row.scope, row.operation_id)],
    }
    message = (
        f"key namespace divergence for {row.op_key}: ledger key {row.op_key}, sandbox key "
        f"{sandbox_key}, attempt {attempt}: {reason}; quarantined, not retried"
    )
    try:
        gate.store.quarantine(
            row.scope,
            row.operation_id,
            State.VALIDATED,
            kind=DIVERGENCE_ALERT,
            reason=reason,
            record=full,
            by="system:speculation",
            now=now,
        )
    except StaleState:
        # Another process moved the row first; whatever it did stands. Still an error here:
        # this commit is refused, never guessed.
        log.error("%s (the row had already moved)", message)
    else:
        log.error(message)
    _alert(gate, DIVERGENCE_ALERT, row, message, full, now)
    raise KeyNamespaceDivergence(
        message,
        operation_id=row.operation_id,
        ledger_key=row.op_key,
        sandbox_key=sandbox_key,
        attempt=attempt,
    )


def _stall(
    gate: SpeculationGate,
    row: Operation,
    record: SpeculationRecord | None,
    attempt: int,
    tries: int,
    reason: str,
) -> None:
    now = gate.clock()
    spec = gate.registry.get(row.action).speculation
    bound = f"{spec.max_tries} tries or {spec.max_wait:g}s" if spec else "its bound"
    detail = (
        f"no committable speculation verdict within {bound} ({tries} re-speculation(s)): {reason}"
    )
    gate.store.mark_speculation_stalled(row.scope, row.operation_id, detail, now=now)
    facts = {
        "ledger_key": row.op_key,
        "sandbox_key": record.sandbox_key if record else None,
        "attempt": attempt,
        "reason": reason,
    }
    _alert(gate, STALL_ALERT, row, f"{row.op_key}: {detail}", facts, now)
    raise SpeculationStalled(
        f"{row.op_key}: {detail}; it stays validated and is not sent",
        operation_id=row.operation_id,
        attempt=attempt,
    )


def _alert(
    gate: SpeculationGate,
    kind: str,
    row: Operation,
    message: str,
    detail: Mapping[str, object],
    now: float,
) -> None:
    alert = Alert(kind, f"{row.op_key}@{now!r}", row.action, message, dict(detail), now)
    try:
        raise_alert(gate.store, gate.alerts, alert)
    except EffectgateError as exc:  # the error to the caller is the surface; never mask it
        log.error("alert %s for %s not recorded: %s", kind, row.op_key, exc.code)
