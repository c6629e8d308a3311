"""Control checks that run inside a store's transaction, written once for every dialect.

A store exposes its open transaction as a :class:`ControlTx` (a handful of SQL primitives) and
calls :func:`observe_proposal` and :func:`dispatch_verdict` from the transaction that journals a
new row or moves one to ``submitted``. Because the reads and writes share that transaction (and
the store serialises it per class: ``BEGIN IMMEDIATE`` in SQLite, a locked control row in
PostgreSQL), two executors cannot both spend the last unit of an envelope, and a switch
flipped by another process is seen by the very next dispatch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Protocol

from effectgate.core.controls import (
    REVERSAL_CONDITIONS,
    VALUE_SCALE,
    AuthorityStep,
    ClassControls,
    DispatchGuard,
    Envelope,
    parse_axis_value,
    to_micros,
)
from effectgate.core.states import State
from effectgate.errors import (
    ApprovalFingerprintMismatch,
    ControlError,
    NotAwaitingApproval,
    OperationNotFound,
    SelfApproval,
)
from effectgate.store.base import NewOperation, Operation, RawJSON

__all__ = [
    "CONTROL_COLUMNS",
    "SHADOW",
    "STEP_COLUMNS",
    "ControlChanges",
    "ControlTx",
    "SignalStats",
    "apply_step",
    "check_approval",
    "controls_from_row",
    "dispatch_verdict",
    "guard_new_row",
    "observe_proposal",
    "path_audit",
    "shadow_request",
    "step_from_row",
    "trip_breaker",
]

SHADOW = "shadow"
#: Signals and dispatch records older than this (or the class's largest window) are pruned.
MIN_RETENTION = 86400.0


@dataclass(frozen=True, slots=True)
class SignalStats:
    decided: int
    rejected: int
    value_micros: int
    same_fingerprint: int
    new_targets: int


class ControlTx(Protocol):
    """SQL primitives over one open transaction (see ``_SQLiteControls`` for the reference)."""

    def controls(self, action: str) -> ClassControls:
        """The class's control row, locked for the rest of the transaction where the dialect
        needs it (PostgreSQL: ``FOR UPDATE``); defaults if the class was never touched."""

    def save_controls(self, ctl: ClassControls, *, at: float) -> None: ...

    def seen_target(self, action: str, target: str, at: float) -> bool:
        """Whether ``target`` was seen before for ``action``; remembers it either way."""

    def record_signal(self, action: str, at: float, op_key: str, fingerprint: str,
                      value_micros: int | None, rejected: bool, new_target: bool) -> None: ...

    def signal_stats(self, action: str, since: float, fingerprint: str) -> SignalStats: ...

    def dispatch_usage(self, action: str, since: float) -> tuple[int, int]:
        """``(count, value_micros)`` dispatched since ``since``."""

    def record_dispatch(self, action: str, at: float, op_key: str,
                        value_micros: int | None) -> None: ...

    def prune(self, action: str, before: float) -> None: ...

    def active_steps(self, action: str) -> list[AuthorityStep]: ...

    def insert_step(self, step: AuthorityStep) -> int: ...

    def deactivate_step(self, step_id: int) -> None: ...

    def record_shadow(self, scope: str, operation_id: str, action: str, correlation_id: str,
                      request: Mapping[str, object], fingerprint: str, at: float) -> None: ...

    def audit(self, kind: str, detail: Mapping[str, object], at: float,
              scope: str | None = None, operation_id: str | None = None) -> None: ...

    def record_alert(self, kind: str, subject: str, action: str | None, message: str,
                     detail: Mapping[str, object], at: float) -> bool: ...


def observe_proposal(tx: ControlTx, guard: DispatchGuard, *, op_key: str, fingerprint: str,
                     rejected: bool, now: float) -> ClassControls:
    """Record a new proposal's signal and trip the class's breaker if a threshold is crossed."""
    ctl = tx.controls(guard.action)
    cfg = guard.breaker
    # Targets are remembered only while the new-target signal is on: that keeps a lookup off
    # the hot path of classes that do not watch for it.
    if cfg is None:
        # No breaker watches this class: nothing to record (a breaker configured later starts
        # with an empty window, which can only make it trip later, never wrongly).
        return ctl
    new_target = (cfg.max_new_targets is not None and guard.target is not None
                  and not tx.seen_target(guard.action, guard.target, now))
    tx.record_signal(guard.action, now, op_key, fingerprint,
                     None if rejected else guard.value_micros, rejected, new_target)
    if ctl.breaker_open:
        return ctl
    stats = tx.signal_stats(guard.action, now - cfg.window, fingerprint)
    tripped: list[tuple[str, str]] = []
    if cfg.max_rejection_rate is not None and stats.decided >= cfg.min_samples \
            and stats.rejected > cfg.max_rejection_rate * stats.decided:
        tripped.append(("rejection_rate", f"rejection rate {stats.rejected}/{stats.decided} "
                        f"over {cfg.max_rejection_rate:.0%} in {cfg.window:g}s"))
    if cfg.max_value is not None and stats.value_micros > to_micros(cfg.max_value):
        shown = Decimal(stats.value_micros) / VALUE_SCALE
        tripped.append(("value_rate", f"value {shown.normalize()} over {cfg.max_value} in "
                        f"{cfg.window:g}s"))
    if cfg.max_repeats is not None and stats.same_fingerprint > cfg.max_repeats:
        tripped.append(("repeats", f"fingerprint {fingerprint[:12]} under "
                        f"{stats.same_fingerprint} operation ids in {cfg.window:g}s"))
    if cfg.max_new_targets is not None and stats.new_targets > cfg.max_new_targets:
        tripped.append(("new_targets", f"{stats.new_targets} never-seen targets in "
                        f"{cfg.window:g}s (latest {guard.target!r})"))
    tx.prune(guard.action, now - max(cfg.window, MIN_RETENTION))
    if tripped:
        ctl = trip_breaker(tx, ctl, tripped, now=now, op_key=op_key)
        guard.report.tripped.extend(f"{name}: {why}" for name, why in tripped)
    return ctl


def trip_breaker(tx: ControlTx, ctl: ClassControls, signals: list[tuple[str, str]], *,
                 now: float, op_key: str | None = None) -> ClassControls:
    """Open the breaker, reverse the staged steps conditioned on it, record an alert."""
    reason = "; ".join(f"{name}: {why}" for name, why in signals)
    names = {name for name, _ in signals}
    envelope = ctl.envelope
    reversed_ids: list[int] = []
    # Newest first, so stacked expansions unwind back to where they started.
    for step in sorted(tx.active_steps(ctl.action), key=lambda s: s.id, reverse=True):
        cond = step.reverse_on
        if cond == "breaker_trip" or (cond.startswith("breaker_trip:")
                                      and cond.split(":", 1)[1] in names):
            current = envelope.axis(step.axis)
            envelope = envelope.with_axis(step.axis, step.old)
            envelope = Envelope.from_json(envelope.to_json(), version=envelope.version + 1)
            tx.deactivate_step(step.id)
            rid = tx.insert_step(AuthorityStep(
                id=0, action=ctl.action, axis=step.axis, old=current, new=step.old,
                evidence={"breaker": reason}, reverse_on="manual", operator="system:breaker",
                at=now, kind="reversal", reverses=step.id, active=False))
            reversed_ids.append(step.id)
            tx.audit("authority_reversed", {"action": ctl.action, "axis": step.axis,
                                            "old": current, "new": step.old,
                                            "reverses": step.id, "step": rid,
                                            "condition": cond}, now)
    ctl = ClassControls(action=ctl.action, killed=ctl.killed, kill_reason=ctl.kill_reason,
                        breaker_open=True, breaker_reason=reason, shadow=ctl.shadow,
                        envelope=envelope, updated_by="system:breaker", updated_at=now)
    tx.save_controls(ctl, at=now)
    tx.audit("breaker_tripped", {"action": ctl.action, "signals": sorted(names),
                                 "reason": reason, "trigger": op_key,
                                 "reversed_steps": reversed_ids}, now)
    tx.record_alert("breaker-tripped", f"{ctl.action}@{now!r}", ctl.action,
                    f"breaker for {ctl.action} tripped: {reason}",
                    {"signals": sorted(names), "reversed_steps": reversed_ids}, now)
    # Logged at ERROR and delivered by the gate once this transaction has committed.
    return ctl


def dispatch_verdict(tx: ControlTx, ctl: ClassControls, guard: DispatchGuard | None, *,
                     now: float, op_key: str) -> str | None:
    """``None`` to send, :data:`SHADOW` to record instead, or why the row is held.

    Called in the transaction that would write ``submitted``; a send is charged to the
    envelope's exposure and rate windows in that same transaction.
    """
    if ctl.shadow:
        return SHADOW
    if ctl.killed:
        return f"held: kill switch on {ctl.action}" + (f" ({ctl.kill_reason})"
                                                       if ctl.kill_reason else "")
    if ctl.breaker_open:
        return f"held: breaker open on {ctl.action} ({ctl.breaker_reason})"
    env = ctl.envelope
    value = guard.value if guard is not None else None
    micros = guard.value_micros if guard is not None else None
    if guard is not None:
        breach = env.per_action_breach(guard.value, guard.target)
        if breach:
            return f"held: {breach}"
    if env.rate_limit is not None and env.rate_interval is not None:
        count, _ = tx.dispatch_usage(ctl.action, now - env.rate_interval)
        if count + 1 > env.rate_limit:
            return (f"held: rate {env.rate_limit} per {env.rate_interval:g}s reached "
                    f"({count} dispatched)")
    if env.exposure_limit is not None and env.exposure_window is not None:
        if micros is None:
            # An exposure window that cannot be charged is not a limit (deny by default).
            return "held: the value cannot be measured, so the exposure window cannot be charged"
        _, used = tx.dispatch_usage(ctl.action, now - env.exposure_window)
        if used + micros > to_micros(env.exposure_limit):
            shown = (Decimal(used) / VALUE_SCALE).normalize()
            return (f"held: exposure {shown} + {value} would exceed "
                    f"{env.exposure_limit} per {env.exposure_window:g}s")
    tx.record_dispatch(ctl.action, now, op_key, micros)
    return None


def apply_step(tx: ControlTx, action: str, axis: str, new: object, *,
               evidence: Mapping[str, object], reverse_on: str, operator: str,
               now: float) -> AuthorityStep:
    """Change one envelope axis as a recorded step (operator action, audited)."""
    clean = parse_axis_value(axis, new)
    if reverse_on not in REVERSAL_CONDITIONS:
        raise ControlError(f"unknown reversal condition {reverse_on!r}; one of: "
                           f"{', '.join(REVERSAL_CONDITIONS)}", field="reverse_on")
    if not isinstance(evidence, Mapping) or not evidence:
        raise ControlError("a step must name the evidence that justified it",
                           field="evidence")
    ctl = tx.controls(action)
    old = ctl.envelope.axis(axis)
    envelope = ctl.envelope.with_axis(axis, clean)
    envelope = Envelope.from_json(envelope.to_json(), version=ctl.envelope.version + 1)
    step = AuthorityStep(id=0, action=action, axis=axis, old=old, new=clean,
                         evidence=dict(evidence), reverse_on=reverse_on, operator=operator,
                         at=now, kind="step", active=reverse_on != "manual")
    step_id = tx.insert_step(step)
    tx.save_controls(ClassControls(
        action=action, killed=ctl.killed, kill_reason=ctl.kill_reason,
        breaker_open=ctl.breaker_open, breaker_reason=ctl.breaker_reason, shadow=ctl.shadow,
        envelope=envelope, updated_by=operator, updated_at=now), at=now)
    tx.audit("authority_step", {"action": action, "axis": axis, "old": old, "new": clean,
                                "evidence": dict(evidence), "reverse_on": reverse_on,
                                "operator": operator, "step": step_id,
                                "envelope_version": envelope.version}, now)
    return replace(step, id=step_id)


def shadow_request(op_key: str, action: str, effect: Mapping[str, object]) -> dict[str, object]:
    """The outbound request a shadowed row would have sent (what an adapter would receive)."""
    return {"operation_key": op_key, "action": action, "effect": dict(effect)}


def guard_new_row(tx: ControlTx, new: NewOperation, path: list[State],
                  guard: DispatchGuard | None, *, now: float,
                  ) -> tuple[NewOperation, list[State], str | None]:
    """Apply the controls to a row being journalled: the path it really takes, and a hold.

    The envelope's per-action axes can turn an allowed proposal into ``rejected`` (the reason
    names the axis); the breaker observes every proposal; and a path ending in ``submitted``
    meets the shadow flag, kill switch, breaker and windows, in this transaction.
    """
    held: str | None = None
    ctl: ClassControls | None = None
    if guard is not None:
        if path[-1] is not State.REJECTED:
            env = tx.controls(new.action).envelope
            breach = env.per_action_breach(guard.value, guard.target)
            if breach:
                new = replace(new, reason=f"envelope: {breach}",
                              policy_version=f"{new.policy_version}+envelope-{env.version}")
                path = [State.PROPOSED, State.REJECTED]
                guard.report.envelope_rejection = breach
        ctl = observe_proposal(tx, guard, op_key=new.op_key, fingerprint=new.fingerprint,
                               rejected=path[-1] is State.REJECTED, now=now)
    if path[-1] is State.SUBMITTED:
        verdict = dispatch_verdict(tx, ctl or tx.controls(new.action), guard, now=now,
                                   op_key=new.op_key)
        if verdict == SHADOW:
            path = [*path[:-1], State.SHADOWED]
            tx.record_shadow(new.scope, new.operation_id, new.action,
                             (guard.correlation_id if guard else None) or new.operation_id,
                             shadow_request(new.op_key, new.action, new.effect),
                             new.fingerprint, now)
            if guard is not None:
                guard.report.shadowed = True
        elif verdict is not None:
            path, held = path[:-1], verdict
            if guard is not None:
                guard.report.held_by = verdict
    return new, path, held


def path_audit(new: NewOperation, path: list[State], audit: Mapping[str, object] | None,
               held: str | None, *, intent_text: str | None = None,
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
    detail: dict[str, object] = {"state": final.value, "path": [s.value for s in path],
                                 "intent": new.intent if intent_text is None
                                 else RawJSON(intent_text), "fingerprint": new.fingerprint,
                                 "action": new.action}
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

class ControlChanges:
    """The operator's switches, written once for both dialects over ``_change_controls``.

    Each dialect's controls mixin supplies ``_change_controls``: one transaction that replaces
    the class's control row, optionally clears its breaker signals, and audits the change.
    """

    def _change_controls(self, action: str, *, operator: str, now: float, kind: str,
                         detail: Mapping[str, object], reset_signals: bool = False,
                         **changes: Any) -> ClassControls:
        raise NotImplementedError

    def set_kill(self, action: str, on: bool, *, operator: str, reason: str | None,
                 now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now,
                                     kind="kill_switch_on" if on else "kill_switch_off",
                                     detail={"reason": reason}, killed=on,
                                     kill_reason=reason if on else None)

    def reset_breaker(self, action: str, *, operator: str, reason: str | None,
                      now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now, kind="breaker_reset",
                                     detail={"reason": reason}, reset_signals=True,
                                     breaker_open=False, breaker_reason=None)

    def set_shadow(self, action: str, on: bool, *, operator: str, now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now,
                                     kind="shadow_on" if on else "shadow_off", detail={},
                                     shadow=on)


def check_approval(row: Operation | None, request: Sequence[Any] | None, *, scope: str,
                   operation_id: str, approver: str,
                   fingerprint: str) -> tuple[Operation, int, float]:
    """The rules an answer must pass before it is recorded: ``(row, required, expires_at)``.

    ``request`` is the stored approval request row (fingerprint, required, expires_at,
    proposers as JSON), or None when the row has none (one approver, no expiry). Raises
    :class:`OperationNotFound` or :class:`ApprovalError`; both dialects call it inside the
    transaction that records the answer.
    """
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    if row.state is not State.AWAITING_APPROVAL:
        raise NotAwaitingApproval(f"operation {operation_id!r} is {row.state.value!r}, not "
                                  "awaiting approval")
    required, expires_at = ((int(request[1]), float(request[2])) if request
                            else (1, float("inf")))
    proposers = set(json.loads(request[3])) if request else set()
    if fingerprint != row.fingerprint:
        raise ApprovalFingerprintMismatch(
            f"the approval names payload {fingerprint[:12]} but operation "
            f"{operation_id!r} carries {row.fingerprint[:12]}: an approval releases "
            "only the exact payload it was given")
    if approver in proposers:
        raise SelfApproval(f"{approver!r} proposed operation {operation_id!r} and "
                           "cannot approve it")
    return row, required, expires_at


# The control row's and an authority step's columns, in the order the decoders below read.
CONTROL_COLUMNS = ("killed, kill_reason, breaker_open, breaker_reason, shadow, envelope, "
                   "envelope_version, updated_by, updated_at")
STEP_COLUMNS = ("id, action, axis, old, new, evidence, reverse_on, operator, at, kind, "
                "reverses, active")


def controls_from_row(action: str, row: Sequence[Any] | None) -> ClassControls:
    """A class's controls from its CONTROL_COLUMNS row; the defaults when it has none."""
    if row is None:
        return ClassControls(action=action)
    return ClassControls(action=action, killed=bool(row[0]), kill_reason=row[1],
                         breaker_open=bool(row[2]), breaker_reason=row[3], shadow=bool(row[4]),
                         envelope=Envelope.from_json(json.loads(row[5]), version=int(row[6])),
                         updated_by=row[7], updated_at=row[8])


def step_from_row(r: Sequence[Any]) -> AuthorityStep:
    """An authority step from its STEP_COLUMNS row."""
    return AuthorityStep(id=int(r[0]), action=r[1], axis=r[2], old=json.loads(r[3]),
                         new=json.loads(r[4]), evidence=json.loads(r[5]), reverse_on=r[6],
                         operator=r[7], at=r[8], kind=r[9],
                         reverses=int(r[10]) if r[10] is not None else None,
                         active=bool(r[11]))
