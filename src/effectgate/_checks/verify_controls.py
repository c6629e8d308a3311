"""Approvals and breakers in ``effectgate verify``, driven as a deployment meets them.

* Approvals: the proposer and the approvers are scratch principals of the scratch store (the
  approvers drawn from the class's ``[authority.approver_roles]`` when it lists any, so they
  satisfy the roles the service checks); a row the floor or the policy sends to a human is
  approved by as many *distinct* approvers as its tier needs, through the operator's own
  :meth:`~effectgate._execute.operator.Operator.approve`, and then released to the standing
  dispatcher. :func:`approval_protocol` also checks the refusals on the way: the proposer's own
  approval, another payload's fingerprint, the same approver twice.
* Breakers: :func:`breaker_case` trips the class's breaker through the thresholds configured in
  ``[controls.<class>]``, by feeding the signals those thresholds watch (repeats of one payload,
  refused proposals, never-seen targets, value), never by tripping it directly; a class with no
  configured threshold is ``n/a``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from decimal import Decimal
from typing import TYPE_CHECKING

from effectgate._checks._world import PROPOSER, SCOPE, World, approve_all, needed
from effectgate._core.controls import BreakerConfig
from effectgate._core.intent import ActionClass, Tier
from effectgate._core.states import State
from effectgate._evidence.invariants import no_dispatch_while_held
from effectgate._execute.dispatcher import Dispatcher
from effectgate.errors import ApprovalError, EffectgateError

if TYPE_CHECKING:
    from effectgate._checks.verify_intents import IntentSource

__all__ = ["NotApplicable", "approval_protocol", "breaker_case"]

#: At most this many proposals are fed to trip a breaker (a threshold beyond it is ``n/a``).
MAX_FEED = 200


def _refused(attempt: Callable[[], object]) -> str | None:
    """The error code ``attempt`` was refused with; None if it was accepted."""
    try:
        attempt()
    except ApprovalError as exc:
        return exc.code
    return None


def approval_protocol(w: World, ac: ActionClass, raw: dict[str, object]) -> tuple[bool, str]:
    """A row a human must approve: nothing reaches the venue before the quorum; the proposer,
    another payload and a repeated approver are refused; the quorum of distinct approvers
    releases it and it is sent once."""
    row = w.gate.submit(ac.name, "op-approve", raw, scope=SCOPE, principal=PROPOSER)
    if row.state is not State.AWAITING_APPROVAL:
        return False, f"state={row.state.value}: no approval was asked"
    tier = row.tier or ac.tier_floor.value
    need = needed(w.cfg, Tier(tier))
    if len(w.approvers) < need:
        return False, (
            f"tier {tier} needs {need} distinct approvers; the class's approver roles hold "
            f"{len(w.approvers)} ({', '.join(w.approvers) or 'none'})"
        )

    def approve(who: str, fingerprint: str) -> object:
        return w.operator.approve(
            row.operation_id, fingerprint=fingerprint, approver=who, scope=SCOPE, reason="verify"
        )

    seen = [f"tier {tier}, {need} approver(s)"]
    ok = True
    for label, attempt in (
        ("the proposer's own approval", lambda: approve(PROPOSER, row.fingerprint)),
        ("another payload's approval", lambda: approve(w.approvers[0], "0" * 64)),
    ):
        code = _refused(attempt)
        ok = ok and code is not None
        seen.append(f"{label}: {code or 'ACCEPTED'}")
    approve(w.approvers[0], row.fingerprint)
    if need > 1:
        waiting = w.gate.get(row.operation_id, scope=SCOPE).state
        ok = ok and waiting is State.AWAITING_APPROVAL and w.venue.calls == 0
        code = _refused(lambda: approve(w.approvers[0], row.fingerprint))
        ok = ok and code is not None
        seen.append(f"after 1 of {need}: {waiting.value}; the same approver again: {code}")
    before = w.venue.calls
    given, state = approve_all(w, row.operation_id)
    Dispatcher(w.gate).run_once()
    last = w.gate.get(row.operation_id, scope=SCOPE)
    ok = ok and before == 0 and last.state is State.ACKNOWLEDGED and w.venue.calls == 1
    seen.append(
        f"venue calls before the quorum={before}; {1 + given} approvals: {state}; "
        f"dispatched: {last.state.value}, venue calls={w.venue.calls}"
    )
    return ok, "; ".join(seen)


def _feeders(
    w: World, ac: ActionClass, cfg: BreakerConfig, source: IntentSource, a: dict[str, object]
) -> list[tuple[str, Callable[[], list[dict[str, object]] | None]]]:
    """Per configured threshold, the proposals that cross it (None: cannot be fed here)."""

    def repeats() -> list[dict[str, object]] | None:
        assert cfg.max_repeats is not None  # noqa: S101 - listed only when configured
        return [a] * (cfg.max_repeats + 1)

    def refused() -> list[dict[str, object]] | None:
        bad = source.find(lambda raw: source.parse(raw) is not None and source.tier(raw) is None)
        return None if bad is None else [bad] * (cfg.min_samples + 1)

    def targets() -> list[dict[str, object]] | None:
        assert cfg.max_new_targets is not None  # noqa: S101 - listed only when configured
        # Varying the first watched field is enough: a new value in any of them counts.
        fields, seen, out = ac.watched_fields, set[object](), []
        if not fields:
            return None
        field = fields[0]
        for _ in range(min(cfg.max_new_targets + 1, MAX_FEED)):
            new = source.find(
                lambda raw: raw.get(field) not in seen and source.parse(raw) is not None
            )
            if new is None:
                return None
            seen.add(new.get(field))
            out.append(new)
        return out

    def value() -> list[dict[str, object]] | None:
        assert cfg.max_value is not None  # noqa: S101 - listed only when configured
        limit = cfg.max_value
        big = source.find(
            lambda raw: source.tier(raw) is not None and _value(ac, source, raw) * MAX_FEED > limit
        )
        if big is None:
            return None
        each = _value(ac, source, big)
        return [big] * min(MAX_FEED, int(limit / each) + 1) if each > 0 else None

    found: list[tuple[str, Callable[[], list[dict[str, object]] | None]]] = []
    if cfg.max_repeats is not None:
        found.append((f"max_repeats={cfg.max_repeats}", repeats))
    if cfg.max_rejection_rate is not None:
        found.append((f"max_rejection_rate={cfg.max_rejection_rate}", refused))
    if cfg.max_new_targets is not None:
        found.append((f"max_new_targets={cfg.max_new_targets}", targets))
    if cfg.max_value is not None and ac.value_of is not None:
        found.append((f"max_window_value={cfg.max_value}", value))
    return found


def _value(ac: ActionClass, source: IntentSource, raw: dict[str, object]) -> Decimal:
    parsed = source.parse(raw)
    got = ac.value_of(parsed.effect) if parsed is not None and ac.value_of else None
    return got if got is not None else Decimal(0)


def _feed(w: World, ac: ActionClass, proposals: list[dict[str, object]], tag: str) -> int:
    """Propose each (refusals are signals too); stop once the breaker is open."""
    fed = 0
    for i, raw in enumerate(proposals):
        if w.store.controls(ac.name).breaker_open:
            break
        # A refused intent raises; its signal is recorded (or not) all the same.
        with suppress(EffectgateError):
            w.gate.submit(ac.name, f"feed-{tag}-{i}", raw, scope=SCOPE, principal=PROPOSER)
        fed += 1
    return fed


def breaker_case(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    """Trip the breaker through a configured threshold, then: a proposal is held (no dispatch
    while held), an operator's reset releases it and it is sent once."""
    cfg = w.cfg.breakers.get(ac.name)
    if cfg is None or w.source is None:
        raise NotApplicable(
            f"no thresholds in [controls.{ac.name}]: nothing trips this class's breaker "
            "automatically (an operator can still open it)"
        )
    tried: list[str] = []
    for i, (label, make) in enumerate(_feeders(w, ac, cfg, w.source, a)):
        proposals = make()
        if proposals is None:
            tried.append(f"{label}: no generated intent feeds it")
            continue
        fed = _feed(w, ac, proposals, str(i))
        if w.store.controls(ac.name).breaker_open:
            tried.append(f"{label}: tripped after {fed} proposal(s)")
            break
        tried.append(f"{label}: not tripped by {fed} proposal(s)")
    controls = w.store.controls(ac.name)
    if not controls.breaker_open:
        return False, "; ".join(tried) + " - the breaker never opened"
    row = w.gate.submit(ac.name, "op-breaker", b, scope=SCOPE, principal=PROPOSER)
    approve_all(w, row.operation_id)
    Dispatcher(w.gate).run_once()
    held = w.gate.get(row.operation_id, scope=SCOPE)
    sent = [r for r in w.requests() if r.operation_key == row.op_key]
    broken = no_dispatch_while_held(w.requests(), {row.op_key})
    w.operator.reset_breaker(ac.name, operator="verify", reason="verify")
    Dispatcher(w.gate).run_once()
    last = w.gate.get(row.operation_id, scope=SCOPE)
    after = [r for r in w.requests() if r.operation_key == row.op_key]
    seen = (
        f"{'; '.join(tried)} ({controls.breaker_reason}); while open: {held.state.value}, "
        f"sent {len(sent)}; reset: {last.state.value}, sent {len(after)}"
    )
    ok = held.state is State.VALIDATED and not sent and not broken
    return ok and last.state is State.ACKNOWLEDGED and len(after) == 1, seen


class NotApplicable(Exception):
    """A case that cannot apply to this class; the message says why."""
