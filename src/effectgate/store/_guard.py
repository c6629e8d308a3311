"""Control checks that run inside a store's transaction, written once for every dialect.

A store exposes its open transaction as a :class:`~effectgate.store._tx.SharedTx` and calls
:func:`~effectgate.store._journal.journal_new` or
:func:`~effectgate.store._journal.dispatch_row` from the transaction that journals a new row or
moves one to ``submitted``; what the controls decided comes back as a value (a
:class:`~effectgate._core.controls.Verdict` in a :class:`~effectgate.store.base.Journal`).
Because the reads and writes share that transaction (and the store serialises it per class:
``BEGIN IMMEDIATE`` in SQLite, a class advisory lock in PostgreSQL), two executors cannot
both spend the last unit of an envelope, and a switch flipped by another process is seen by the
very next dispatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal

from effectgate._core.authority_evidence import narrowest, parse_claim, reversal_for, widens
from effectgate._core.breaker_signals import WindowCounts, trips
from effectgate._core.controls import (
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
from effectgate.errors import ControlError, StepEvidenceRefused
from effectgate.store._sql import MARK_HELD
from effectgate.store._tx import SharedTx
from effectgate.store.base import credential_marker

__all__ = [
    "SEND",
    "apply_step",
    "dispatch_verdict",
    "mark_held",
    "observe_proposal",
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
    fresh: list[str] = []
    if cfg.max_new_targets is not None:
        watched = guard.watched
        if watched is None:  # a guard built without watched fields: the target, as before
            watched = () if guard.target is None else ((guard.action, "", guard.target),)
        if watched:
            new = tx.unseen_targets([(lane, v) for lane, _, v in watched], now)
            fresh = [f"{f} {v!r}" if f else repr(v) for lane, f, v in watched if (lane, v) in new]
    # The repeat signal counts by the class's repeat key when it has one (near-identical
    # effects), else by the exact fingerprint; both are sha256 hex and never equal.
    repeat = guard.repeat_key or fingerprint
    tx.record_signal(
        guard.action,
        now,
        op_key,
        repeat,
        None if rejected else guard.value_micros,
        rejected,
        bool(fresh),
    )
    if ctl.breaker_open:
        return ctl, ()
    stats = tx.signal_stats(guard.action, now - cfg.window, repeat)
    counts = WindowCounts(
        stats.decided, stats.rejected, stats.value_micros, stats.same_fingerprint, stats.new_targets
    )
    tripped = trips(cfg, counts, repeat=repeat, keyed=bool(guard.repeat_key), fresh=fresh)
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
            # Back to where the step found the axis, but never wider than it is now: a
            # tightening made since stays (a trip must not loosen anything).
            back = narrowest(step.axis, current, step.old)
            envelope = envelope.with_axis(step.axis, back)
            envelope = Envelope.from_json(envelope.to_json(), version=envelope.version + 1)
            tx.deactivate_step(step.id)
            rid = tx.insert_step(
                AuthorityStep(
                    id=0,
                    action=ctl.action,
                    axis=step.axis,
                    old=current,
                    new=back,
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
                    "new": back,
                    "reverses": step.id,
                    "step": rid,
                    "condition": cond,
                },
                now,
            )
    ctl = replace(
        ctl,
        breaker_open=True,
        breaker_reason=reason,
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
    reverse_on: str | None,
    operator: str,
    now: float,
) -> AuthorityStep:
    """Change one envelope axis as a recorded step (operator action, audited).

    A step that widens the axis needs evidence the boundary verified (``verified_at``, set by
    ``effectgate._execute.step_evidence``) and an automatic reversal condition; a step that
    tightens it needs a non-empty note and is never reversed automatically."""
    clean = parse_axis_value(axis, new)
    if not isinstance(evidence, Mapping) or not evidence:
        raise ControlError("a step must name the evidence that justified it", field="evidence")
    ctl = tx.controls(action)
    old = ctl.envelope.axis(axis)
    widening = widens(axis, old, clean)
    cond = reversal_for(widening, reverse_on)
    if widening:
        parse_claim(axis, evidence, now=now)
        if not isinstance(evidence.get("verified_at"), int | float):
            raise StepEvidenceRefused(
                "evidence the boundary has not recomputed (Operator.step verifies it)",
                field="evidence.verified_at",
            )
    envelope = ctl.envelope.with_axis(axis, clean)
    envelope = Envelope.from_json(envelope.to_json(), version=ctl.envelope.version + 1)
    step = AuthorityStep(
        id=0,
        action=action,
        axis=axis,
        old=old,
        new=clean,
        evidence=dict(evidence),
        reverse_on=cond,
        operator=operator,
        at=now,
        kind="step",
        active=widening,
    )
    step_id = tx.insert_step(step)
    tx.save_controls(replace(ctl, envelope=envelope, updated_by=operator, updated_at=now), at=now)
    tx.release_holds(action)  # a wider envelope may have room for a held row
    tx.audit(
        "authority_step",
        {
            "action": action,
            "axis": axis,
            "old": old,
            "new": clean,
            "evidence": dict(evidence),
            "reverse_on": cond,
            "widens": widening,
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
