"""Control checks that run inside a store's transaction, written once for every dialect.

A store exposes its open transaction as a :class:`~effectgate.store._tx.SharedTx` and calls
:func:`journal_new` or :func:`dispatch_row` from the transaction that journals a new row or
moves one to ``submitted``; what the controls decided comes back as a value (a
:class:`~effectgate._core.controls.Verdict` in a :class:`~effectgate.store.base.Journal`).
Because the reads and writes share that transaction (and the store serialises it per class:
``BEGIN IMMEDIATE`` in SQLite, a class advisory lock in PostgreSQL), two executors cannot
both spend the last unit of an envelope, and a switch flipped by another process is seen by the
very next dispatch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from effectgate._core.controls import (
    REVERSAL_CONDITIONS,
    VALUE_SCALE,
    AuthorityStep,
    ClassControls,
    DispatchGuard,
    Envelope,
    Verdict,
    VerdictKind,
    parse_axis_value,
    to_micros,
)
from effectgate._core.intent import Tier
from effectgate._core.states import State, check_transition
from effectgate.errors import (
    ApprovalFingerprintMismatch,
    ControlError,
    NotAwaitingApproval,
    OperationNotFound,
    SelfApproval,
    StaleState,
)
from effectgate.store._sql import INSERT_REQUEST, MARK_HELD
from effectgate.store._tx import SharedTx
from effectgate.store.base import (
    Journal,
    NewOperation,
    Operation,
    RawJSON,
    credential_marker,
    dumps,
    moved,
    transition_event,
)

__all__ = [
    "SEND",
    "apply_step",
    "approval_request_args",
    "check_approval",
    "dispatch_row",
    "dispatch_verdict",
    "guard_new_row",
    "journal_new",
    "mark_held",
    "move_locked",
    "observe_proposal",
    "path_audit",
    "shadow_request",
    "trip_breaker",
]

SEND = Verdict(VerdictKind.SEND)
#: Signals and dispatch records older than this (or the class's largest window) are pruned.
MIN_RETENTION = 86400.0


def observe_proposal(
    tx: SharedTx, guard: DispatchGuard, *, op_key: str, fingerprint: str, rejected: bool, now: float
) -> tuple[ClassControls, tuple[str, ...]]:
    """Record a new proposal's signal and trip the class's breaker if a threshold is crossed.

    Returns the class's controls as they now stand and the signals tripped (``"name: why"``).
    """
    ctl = tx.controls(guard.action)
    cfg = guard.breaker
    # Targets are remembered only while the new-target signal is on: that keeps a lookup off
    # the hot path of classes that do not watch for it.
    if cfg is None:
        # No breaker watches this class: nothing to record (a breaker configured later starts
        # with an empty window, which can only make it trip later, never wrongly).
        return ctl, ()
    new_target = (
        cfg.max_new_targets is not None
        and guard.target is not None
        and not tx.seen_target(guard.action, guard.target, now)
    )
    tx.record_signal(
        guard.action,
        now,
        op_key,
        fingerprint,
        None if rejected else guard.value_micros,
        rejected,
        new_target,
    )
    if ctl.breaker_open:
        return ctl, ()
    stats = tx.signal_stats(guard.action, now - cfg.window, fingerprint)
    tripped: list[tuple[str, str]] = []
    if (
        cfg.max_rejection_rate is not None
        and stats.decided >= cfg.min_samples
        and stats.rejected > cfg.max_rejection_rate * stats.decided
    ):
        tripped.append(
            (
                "rejection_rate",
                f"rejection rate {stats.rejected}/{stats.decided} "
                f"over {cfg.max_rejection_rate:.0%} in {cfg.window:g}s",
            )
        )
    if cfg.max_value is not None and stats.value_micros > to_micros(cfg.max_value):
        shown = Decimal(stats.value_micros) / VALUE_SCALE
        tripped.append(
            ("value_rate", f"value {shown.normalize()} over {cfg.max_value} in {cfg.window:g}s")
        )
    if cfg.max_repeats is not None and stats.same_fingerprint > cfg.max_repeats:
        tripped.append(
            (
                "repeats",
                f"fingerprint {fingerprint[:12]} under "
                f"{stats.same_fingerprint} operation ids in {cfg.window:g}s",
            )
        )
    if cfg.max_new_targets is not None and stats.new_targets > cfg.max_new_targets:
        tripped.append(
            (
                "new_targets",
                f"{stats.new_targets} never-seen targets in "
                f"{cfg.window:g}s (latest {guard.target!r})",
            )
        )
    tx.prune(guard.action, now - max(cfg.window, MIN_RETENTION))
    if tripped:
        ctl = trip_breaker(tx, ctl, tripped, now=now, op_key=op_key)
    return ctl, tuple(f"{name}: {why}" for name, why in tripped)


def trip_breaker(
    tx: SharedTx,
    ctl: ClassControls,
    signals: list[tuple[str, str]],
    *,
    now: float,
    op_key: str | None = None,
) -> ClassControls:
    """Open the breaker, reverse the staged steps conditioned on it, record an alert."""
    reason = "; ".join(f"{name}: {why}" for name, why in signals)
    names = {name for name, _ in signals}
    envelope = ctl.envelope
    reversed_ids: list[int] = []
    # Newest first, so stacked expansions unwind back to where they started.
    for step in sorted(tx.active_steps(ctl.action), key=lambda s: s.id, reverse=True):
        cond = step.reverse_on
        if cond == "breaker_trip" or (
            cond.startswith("breaker_trip:") and cond.split(":", 1)[1] in names
        ):
            current = envelope.axis(step.axis)
            envelope = envelope.with_axis(step.axis, step.old)
            envelope = Envelope.from_json(envelope.to_json(), version=envelope.version + 1)
            tx.deactivate_step(step.id)
            rid = tx.insert_step(
                AuthorityStep(
                    id=0,
                    action=ctl.action,
                    axis=step.axis,
                    old=current,
                    new=step.old,
                    evidence={"breaker": reason},
                    reverse_on="manual",
                    operator="system:breaker",
                    at=now,
                    kind="reversal",
                    reverses=step.id,
                    active=False,
                )
            )
            reversed_ids.append(step.id)
            tx.audit(
                "authority_reversed",
                {
                    "action": ctl.action,
                    "axis": step.axis,
                    "old": current,
                    "new": step.old,
                    "reverses": step.id,
                    "step": rid,
                    "condition": cond,
                },
                now,
            )
    ctl = ClassControls(
        action=ctl.action,
        killed=ctl.killed,
        kill_reason=ctl.kill_reason,
        breaker_open=True,
        breaker_reason=reason,
        shadow=ctl.shadow,
        envelope=envelope,
        updated_by="system:breaker",
        updated_at=now,
    )
    tx.save_controls(ctl, at=now)
    tx.audit(
        "breaker_tripped",
        {
            "action": ctl.action,
            "signals": sorted(names),
            "reason": reason,
            "trigger": op_key,
            "reversed_steps": reversed_ids,
        },
        now,
    )
    tx.record_alert(
        "breaker-tripped",
        f"{ctl.action}@{now!r}",
        ctl.action,
        f"breaker for {ctl.action} tripped: {reason}",
        {"signals": sorted(names), "reversed_steps": reversed_ids},
        now,
    )
    # Logged at ERROR and delivered by the gate once this transaction has committed.
    return ctl


def dispatch_verdict(
    tx: SharedTx, ctl: ClassControls, guard: DispatchGuard | None, *, now: float, op_key: str
) -> Verdict:
    """Send, shadow (record instead of sending), or hold with the reason why.

    Called in the transaction that would write ``submitted``; a send is charged to the
    envelope's exposure and rate windows in that same transaction.
    """
    if ctl.shadow:
        return Verdict(VerdictKind.SHADOW)
    if ctl.killed:
        return _hold(
            f"kill switch on {ctl.action}" + (f" ({ctl.kill_reason})" if ctl.kill_reason else "")
        )
    if ctl.breaker_open:
        return _hold(f"breaker open on {ctl.action} ({ctl.breaker_reason})")
    env = ctl.envelope
    value = guard.value if guard is not None else None
    micros = guard.value_micros if guard is not None else None
    if guard is not None:
        breach = env.per_action_breach(guard.value, guard.target)
        if breach:
            return _hold(breach)
    if env.rate_limit is not None and env.rate_interval is not None:
        count, _ = tx.dispatch_usage(ctl.action, now - env.rate_interval)
        if count + 1 > env.rate_limit:
            return _hold(
                f"rate {env.rate_limit} per {env.rate_interval:g}s reached ({count} dispatched)",
                retry_after=env.rate_interval,
            )
    if env.exposure_limit is not None and env.exposure_window is not None:
        if micros is None:
            # An exposure window that cannot be charged is not a limit (deny by default).
            return _hold("the value cannot be measured, so the exposure window cannot be charged")
        _, used = tx.dispatch_usage(ctl.action, now - env.exposure_window)
        if used + micros > to_micros(env.exposure_limit):
            shown = (Decimal(used) / VALUE_SCALE).normalize()
            return _hold(
                f"exposure {shown} + {value} would exceed "
                f"{env.exposure_limit} per {env.exposure_window:g}s",
                retry_after=env.exposure_window,
            )
    tx.record_dispatch(ctl.action, now, op_key, micros)
    return SEND


def _hold(why: str, *, retry_after: float | None = None) -> Verdict:
    # ``held:`` marks the row's detail: count_held/list_held and the operator find rows by it.
    return Verdict(VerdictKind.HOLD, f"held: {why}", retry_after)


def mark_held(tx: SharedTx, scope: str, operation_id: str, verdict: Verdict, now: float) -> None:
    """Record a hold on its row: why, and when the standing dispatcher may retry it.

    A window that time frees (rate, exposure) is retried once it may have room; any other
    hold waits for an operator's release (the class's next release generation).
    """
    retry = None if verdict.retry_after is None else now + verdict.retry_after
    tx.write(MARK_HELD, (verdict.reason, now, retry, now, scope, operation_id))


def apply_step(
    tx: SharedTx,
    action: str,
    axis: str,
    new: object,
    *,
    evidence: Mapping[str, object],
    reverse_on: str,
    operator: str,
    now: float,
) -> AuthorityStep:
    """Change one envelope axis as a recorded step (operator action, audited)."""
    clean = parse_axis_value(axis, new)
    if reverse_on not in REVERSAL_CONDITIONS:
        raise ControlError(
            f"unknown reversal condition {reverse_on!r}; one of: {', '.join(REVERSAL_CONDITIONS)}",
            field="reverse_on",
        )
    if not isinstance(evidence, Mapping) or not evidence:
        raise ControlError("a step must name the evidence that justified it", field="evidence")
    ctl = tx.controls(action)
    old = ctl.envelope.axis(axis)
    envelope = ctl.envelope.with_axis(axis, clean)
    envelope = Envelope.from_json(envelope.to_json(), version=ctl.envelope.version + 1)
    step = AuthorityStep(
        id=0,
        action=action,
        axis=axis,
        old=old,
        new=clean,
        evidence=dict(evidence),
        reverse_on=reverse_on,
        operator=operator,
        at=now,
        kind="step",
        active=reverse_on != "manual",
    )
    step_id = tx.insert_step(step)
    tx.save_controls(
        ClassControls(
            action=action,
            killed=ctl.killed,
            kill_reason=ctl.kill_reason,
            breaker_open=ctl.breaker_open,
            breaker_reason=ctl.breaker_reason,
            shadow=ctl.shadow,
            envelope=envelope,
            updated_by=operator,
            updated_at=now,
        ),
        at=now,
    )
    tx.release_holds(action)  # a wider envelope may have room for a held row
    tx.audit(
        "authority_step",
        {
            "action": action,
            "axis": axis,
            "old": old,
            "new": clean,
            "evidence": dict(evidence),
            "reverse_on": reverse_on,
            "operator": operator,
            "step": step_id,
            "envelope_version": envelope.version,
            **credential_marker(operator),
        },
        now,
    )
    return replace(step, id=step_id)


def shadow_request(op_key: str, action: str, effect: Mapping[str, object]) -> dict[str, object]:
    """The outbound request a shadowed row would have sent (what an adapter would receive)."""
    return {"operation_key": op_key, "action": action, "effect": dict(effect)}


def guard_new_row(
    tx: SharedTx, new: NewOperation, path: list[State], guard: DispatchGuard | None, *, now: float
) -> tuple[NewOperation, list[State], Verdict | None, tuple[str, ...]]:
    """Apply the controls to a row being journalled: the path it really takes, the dispatch
    verdict (None when the path does not end in ``submitted``) and the breaker signals tripped.

    The envelope's per-action axes can turn an allowed proposal into ``rejected`` (the reason
    names the axis); the breaker observes every proposal; and a path ending in ``submitted``
    meets the shadow flag, kill switch, breaker and windows, in this transaction.
    """
    ctl: ClassControls | None = None
    tripped: tuple[str, ...] = ()
    if guard is not None:
        if path[-1] is not State.REJECTED:
            env = tx.controls(new.action).envelope
            breach = env.per_action_breach(guard.value, guard.target)
            if breach:
                new = replace(
                    new,
                    reason=f"envelope: {breach}",
                    policy_version=f"{new.policy_version}+envelope-{env.version}",
                )
                path = [State.PROPOSED, State.REJECTED]
        ctl, tripped = observe_proposal(
            tx,
            guard,
            op_key=new.op_key,
            fingerprint=new.fingerprint,
            rejected=path[-1] is State.REJECTED,
            now=now,
        )
    verdict: Verdict | None = None
    if path[-1] is State.SUBMITTED:
        verdict = dispatch_verdict(
            tx, ctl or tx.controls(new.action), guard, now=now, op_key=new.op_key
        )
        if verdict.kind is VerdictKind.SHADOW:
            path = [*path[:-1], State.SHADOWED]
            _record_shadow(tx, new, guard, shadow_request(new.op_key, new.action, new.effect), now)
        elif verdict.held:
            path = path[:-1]
    elif path[-1] in _WOULD_NOT_ACT and (ctl or tx.controls(new.action)).shadow:
        # In shadow mode a refused or unapproved proposal is the agent not acting: the
        # report compares it with the incumbent too.
        _record_shadow(tx, new, guard, None, now, outcome=path[-1].value)
    return new, path, verdict, tripped


#: Where a proposal stops when the agent would not have acted (shadow comparisons).
_WOULD_NOT_ACT = (State.REJECTED, State.AWAITING_APPROVAL)


def _record_shadow(
    tx: SharedTx,
    new: NewOperation,
    guard: DispatchGuard | None,
    request: Mapping[str, object] | None,
    now: float,
    *,
    outcome: str = State.SHADOWED.value,
) -> None:
    tx.record_shadow(
        new.scope,
        new.operation_id,
        new.action,
        (guard.correlation_id if guard else None) or new.operation_id,
        request,
        new.fingerprint,
        now,
        outcome=outcome,
        intent=new.intent,
    )


def journal_new(
    tx: SharedTx,
    new: NewOperation,
    path: list[State],
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
) -> Journal:
    """Journal a row no one journalled before, in ``tx``: controls, audit entries, approval
    request, the row itself."""
    new, steps, verdict, tripped = guard_new_row(tx, new, path, guard, now=now)
    held = verdict.reason if verdict is not None and verdict.held else None
    final = steps[-1]
    intent = dumps(new.intent)
    # The entries first: a dialect may record the last one's (seq, hash) in the row.
    for kind, detail in path_audit(new, steps, audit, held, intent_text=intent):
        tx.audit(kind, detail, now, new.scope, new.operation_id)
    if final is State.AWAITING_APPROVAL:
        tx.write(INSERT_REQUEST, approval_request_args(new, guard, now))
    tx.insert_row(new, final, held, now, intent)
    if verdict is not None and verdict.held:
        mark_held(tx, new.scope, new.operation_id, verdict, now)
    return Journal(new.journalled(final, now, held), True, verdict, tripped)


def dispatch_row(
    tx: SharedTx,
    row: Operation | None,
    scope: str,
    operation_id: str,
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
) -> Journal:
    """``validated -> submitted`` of a row ``tx`` holds, after the controls' verdict: sent,
    shadowed instead, or left ``validated`` with the hold's reason."""
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    if row.state is not State.VALIDATED:
        raise StaleState(f"operation {operation_id!r} is {row.state.value!r}, not 'validated'")
    verdict = dispatch_verdict(tx, tx.controls(row.action), guard, now=now, op_key=row.op_key)
    if verdict.held:
        mark_held(tx, scope, operation_id, verdict, now)
        tx.audit("dispatch_held", {"reason": verdict.reason}, now, scope, operation_id)
        return Journal(replace(row, detail=verdict.reason, updated_at=now), False, verdict)
    target = State.SUBMITTED
    submitted_at: float | None = now
    if verdict.kind is VerdictKind.SHADOW:
        target, submitted_at = State.SHADOWED, None
        request = shadow_request(row.op_key, row.action, row.effect)
        tx.record_shadow(
            scope,
            operation_id,
            row.action,
            (guard.correlation_id if guard else None) or operation_id,
            request,
            row.fingerprint,
            row.created_at,  # when the agent proposed it: the report's time windows
            outcome=State.SHADOWED.value,
            intent=row.intent,
        )
        audit = {**(audit or {}), "request": request}
    tx.audit(
        "transition",
        transition_event(State.VALIDATED, target, audit=audit),
        now,
        scope,
        operation_id,
    )
    changed = tx.cas(
        scope, operation_id, State.VALIDATED, target, now=now, submitted_at=submitted_at
    )
    if changed is None:  # unreachable: the transaction holds the row
        raise StaleState(f"operation {operation_id!r} changed under its lock")
    return Journal(moved(row, target, now, changed), False, verdict)


def move_locked(
    tx: SharedTx,
    row: Operation,
    target: State,
    now: float,
    detail: str | None,
    audit: Mapping[str, object],
) -> Operation:
    """Compare-and-set ``row.state -> target`` on a row ``tx`` holds, with its audit entry."""
    check_transition(row.state, target)
    tx.audit(
        "transition",
        transition_event(row.state, target, detail=detail, audit=audit),
        now,
        row.scope,
        row.operation_id,
    )
    changed = tx.cas(row.scope, row.operation_id, row.state, target, now=now, detail=detail)
    if changed is None:
        raise StaleState(f"operation {row.operation_id!r} moved concurrently")
    return moved(row, target, now, changed)


def approval_request_args(
    new: NewOperation, guard: DispatchGuard | None, now: float
) -> tuple[Any, ...]:
    """The approval request of a row journalled as ``awaiting_approval`` (INSERT_REQUEST)."""
    required = (
        1 if new.tier == Tier.APPROVE.value else max(2, guard.approvals_required if guard else 2)
    )
    ttl = guard.approval_ttl if guard else 86400.0
    return (
        new.scope,
        new.operation_id,
        new.fingerprint,
        required,
        now + ttl,
        dumps(list(guard.proposers) if guard else []),
        # Without a gate's guard nobody asked for it to be sent: its caller dispatches it.
        guard.dispatch_on_approval if guard else False,
    )


def path_audit(
    new: NewOperation,
    path: list[State],
    audit: Mapping[str, object] | None,
    held: str | None,
    *,
    intent_text: str | None = None,
) -> list[tuple[str, dict[str, object]]]:
    """The audit entries of a newly journalled row: ONE entry for the whole path, then any hold.

    The path a new row walks (``proposed -> validated -> submitted``, ``proposed -> rejected``,
    ...) is journalled by one transaction at one instant, so one chained entry carries all of
    it: ``path`` lists every state in order, ``state`` is where the row ended, and the entry
    holds the intent snapshot, the provenance and the decision. (One entry instead of one per
    step: a third of the audit writes and hashes on the hot path, the same facts.)
    ``intent_text``: the snapshot as already encoded for the row, embedded rather than encoded
    again.
    """
    final = path[-1]
    detail: dict[str, object] = {
        "state": final.value,
        "path": [s.value for s in path],
        "intent": new.intent if intent_text is None else RawJSON(intent_text),
        "fingerprint": new.fingerprint,
        "action": new.action,
    }
    if audit:
        detail.update(audit)
    if any(step not in (State.PROPOSED, State.SUBMITTED) for step in path):
        detail.update(tier=new.tier, reason=new.reason, policy_version=new.policy_version)
    if final is State.SHADOWED:
        detail["request"] = shadow_request(new.op_key, new.action, new.effect)
    out: list[tuple[str, dict[str, object]]] = [("transition", detail)]
    if held is not None:
        out.append(("dispatch_held", {"reason": held}))
    return out


def check_approval(
    row: Operation | None,
    request: Sequence[Any] | None,
    *,
    scope: str,
    operation_id: str,
    approver: str,
    fingerprint: str,
) -> tuple[Operation, int, float]:
    """The rules an answer must pass before it is recorded: ``(row, required, expires_at)``.

    ``request`` is the stored approval request row (fingerprint, required, expires_at,
    proposers as JSON), or None when the row has none (one approver, no expiry). Raises
    :class:`OperationNotFound` or :class:`ApprovalError`; both dialects call it inside the
    transaction that records the answer.
    """
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    if row.state is not State.AWAITING_APPROVAL:
        raise NotAwaitingApproval(
            f"operation {operation_id!r} is {row.state.value!r}, not awaiting approval"
        )
    required, expires_at = (int(request[1]), float(request[2])) if request else (1, float("inf"))
    proposers = set(json.loads(request[3])) if request else set()
    if fingerprint != row.fingerprint:
        raise ApprovalFingerprintMismatch(
            f"the approval names payload {fingerprint[:12]} but operation "
            f"{operation_id!r} carries {row.fingerprint[:12]}: an approval releases "
            "only the exact payload it was given"
        )
    if approver in proposers:
        raise SelfApproval(
            f"{approver!r} proposed operation {operation_id!r} and cannot approve it"
        )
    return row, required, expires_at
