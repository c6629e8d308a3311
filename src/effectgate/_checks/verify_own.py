"""The ledger cases of seed 001 and the controls, driven through a gate built from the user's own
configuration (``effectgate verify``): its action classes, policies, breakers and approval
rules, with the paper venue standing in for every configured adapter, in a scratch scope of a
scratch store of the configured kind. Each case ends with the shared checkers of
:mod:`effectgate._evidence.invariants`; a case passes only if what it observed holds **and** no
invariant is broken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress

from effectgate._checks._check import FAIL, NA, PASS, Check
from effectgate._checks._world import PROPOSER, SCOPE, World, make_world
from effectgate._checks.verify_controls import NotApplicable, approval_protocol, breaker_case
from effectgate._checks.verify_intents import IntentSource, Unsupported
from effectgate._core.intent import ActionClass, EffectClass, Tier
from effectgate._core.states import State
from effectgate._core.venue import ReadView
from effectgate._evidence.invariants import no_dispatch_while_held
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._execute.dispatcher import Dispatcher
from effectgate._service._config import ServiceConfig
from effectgate.adapters.paper import PaperAdapter
from effectgate.errors import IdempotencyConflict, IntentError
from effectgate.store._scratch import temporary_store
from effectgate.store.roles import Store

__all__ = ["own_class_checks"]


class _Died(BaseException):
    """Stands for the process dying between the journal and the venue call."""


class _DyingAdapter(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise _Died


Case = Callable[[World, ActionClass, dict[str, object], dict[str, object]], tuple[bool, str]]


def _replay(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    first = w.submit(ac, "op-replay", a)
    # The retry carries every audit field (free text, a digest, the nested proposed_by object,
    # the tool_output_digests array): none of them is part of the action's identity.
    audit = w.source.audit_fields() if w.source is not None else {}
    again = w.gate.submit(ac.name, "op-replay", {**a, **audit}, scope=SCOPE, principal=PROPOSER)
    calls = w.venue.calls
    seen = (
        f"state={again.state.value} replayed={again.replayed} venue calls={calls}; "
        f"retry with audit fields {sorted(audit) or 'none'}"
    )
    return first.state is State.ACKNOWLEDGED and again.replayed and calls == 1, seen


def _conflict(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    w.submit(ac, "op-conflict", a)
    try:
        w.gate.submit(ac.name, "op-conflict", b, scope=SCOPE, principal=PROPOSER)
    except IdempotencyConflict as exc:
        return w.venue.calls == 1, f"refused ({exc.code}); venue calls={w.venue.calls}"
    return False, "another payload under the same id was accepted"


def _refuses_hostile(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    hostile = [("not_a_field: an unknown field", dict(a, not_a_field="x"))]
    hostile += w.source.hostile(a) if w.source is not None else []
    before = sum(w.store.count_by_state().values())
    accepted: list[str] = []
    reasons: set[str] = set()
    for i, (why, raw) in enumerate(hostile):
        try:
            w.gate.submit(ac.name, f"op-bad-{i}", raw, scope=SCOPE, principal=PROPOSER)
        except IntentError as exc:
            reasons.add(exc.reason)
            continue
        accepted.append(why)
    rows = sum(w.store.count_by_state().values())
    seen = f"refused {len(hostile) - len(accepted)}/{len(hostile)} ({', '.join(sorted(reasons))})"
    if accepted:
        seen += f"; ACCEPTED: {'; '.join(accepted)}"
    return not accepted and rows == before and w.venue.calls == 0, f"{seen}; rows={rows}"


def _crash(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    dying = w.gate_with({n: _DyingAdapter(w.venue) for n in w.cfg.adapters})
    with suppress(_Died):
        w.submit(ac, "op-crash", a, gate=dying)
    row = w.gate.submit(ac.name, "op-crash", dict(a), scope=SCOPE, principal=PROPOSER)
    after_retry = (row.state, w.venue.calls)
    w.clock.advance(ac.visibility_horizon / 2)
    w.reconciler.run_once()
    inside = w.gate.get("op-crash", scope=SCOPE).state
    w.venue.inject_record(row.op_key)
    w.reconciler.run_once()
    last = w.gate.get("op-crash", scope=SCOPE)
    seen = (
        f"after retry: {after_retry[0].value}, venue calls={after_retry[1]}; inside the "
        f"horizon: {inside.value}; once visible: {last.state.value}"
    )
    ok = (
        after_retry == (State.SUBMITTED, 0)
        and inside is State.SUBMITTED
        and last.state is State.ACKNOWLEDGED
    )
    return ok, seen


def _write_off_then_appears(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    if ac.venue.read_view is ReadView.NONE:
        raise NotApplicable(
            "read_view = none: absence is never written off (the row goes to the operators' "
            "queue past the horizon)"
        )
    dying = w.gate_with({n: _DyingAdapter(w.venue) for n in w.cfg.adapters})
    with suppress(_Died):
        w.submit(ac, "op-late", a, gate=dying)
    w.clock.advance(ac.visibility_horizon + 1)
    w.reconciler.run_once()
    written_off = w.gate.get("op-late", scope=SCOPE)
    w.clock.advance(ac.visibility_horizon)
    w.venue.inject_record(written_off.op_key)
    report = w.reconciler.run_once()
    kinds = [d[0] for d in report.new_divergences]
    seen = (
        f"past the {ac.visibility_horizon:g}s horizon: {written_off.state.value}; "
        f"then it appears: {kinds or 'nothing reported'}"
    )
    return written_off.state is State.FAILED and kinds == ["ledger-says-failed"], seen


def _held_then_released(
    w: World,
    ac: ActionClass,
    a: dict[str, object],
    engage: Callable[[], None],
    release: Callable[[], None],
    op: str,
) -> tuple[bool, str]:
    engage()
    row = w.submit(ac, op, a)
    held_calls = w.venue.calls
    broken = no_dispatch_while_held(w.requests(), {row.op_key})
    release()
    Dispatcher(w.gate).run_once()
    last = w.gate.get(op, scope=SCOPE)
    seen = (
        f"while held: {row.state.value}, venue calls={held_calls}; "
        f"released: {last.state.value}, venue calls={w.venue.calls}"
    )
    ok = row.state is State.VALIDATED and held_calls == 0 and not broken
    return ok and last.state is State.ACKNOWLEDGED and w.venue.calls == 1, seen


def _kill(
    w: World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    def on() -> None:
        w.operator.kill(ac.name, operator="verify", reason="verify")

    def off() -> None:
        w.operator.release(ac.name, operator="verify", reason="verify")

    return _held_then_released(w, ac, a, on, off, "op-kill")


CASES: tuple[tuple[str, str, Case], ...] = (
    ("a retry of one operation reaches the venue once", "inv 1", _replay),
    ("the same id with another payload is refused", "inv 2", _conflict),
    ("hostile intents are refused and write no row", "inv 2", _refuses_hostile),
    ("a crash after the journal stays uncertain, then settles", "inv 3, 4", _crash),
    (
        "written off past the horizon, then it appears: reported",
        "inv 4, 5",
        _write_off_then_appears,
    ),
    ("an engaged kill switch holds, lifting it releases", "controls", _kill),
    ("a breaker tripped by its thresholds holds, a reset releases", "controls", breaker_case),
)

APPROVAL = "approval where the floor or the policy asks (tiers)"


def _approval(cfg: ServiceConfig, store: Store, ac: ActionClass, source: IntentSource) -> Check:
    ask = source.needs_approval()
    if ask is None:
        return Check(
            APPROVAL, ac.name, NA, "the policy asks for no approval of any generated intent"
        )
    w = make_world(cfg, store, ac, source)
    try:
        ok, seen = approval_protocol(w, ac, ask)
    except Exception as exc:  # a guarantee that raises has failed; say how
        ok, seen = False, f"raised {type(exc).__name__}: {exc}"
    broken = w.invariants()
    return Check(
        APPROVAL,
        ac.name,
        PASS if ok and not broken else FAIL,
        f"{seen}; {broken}" if broken else seen,
    )


def _intents(
    source: IntentSource, ac: ActionClass
) -> tuple[dict[str, object] | None, dict[str, object] | None]:
    """Two intents of different fingerprints the policy allows: automatically where the floor
    is ``validate``, else at the tier a human approves."""
    auto = ac.tier_floor is Tier.VALIDATE
    first = source.auto() if auto else source.allowed()
    return first, source.other_than(first, auto=auto) if first is not None else None


def _class_checks(cfg: ServiceConfig, url: str | None, ac: ActionClass) -> Iterator[Check]:
    if ac.effect_class is EffectClass.READ_ONLY:
        for title, _, _ in CASES:
            yield Check(title, ac.name, NA, "read-only class: nothing is dispatched once")
        return
    try:
        source = IntentSource(cfg.registry, ac, cfg.policy)
    except Unsupported as exc:
        for title, _, _ in CASES:
            yield Check(title, ac.name, NA, f"no intent could be generated: {exc}")
        return
    a, b = _intents(source, ac)
    for title, inv, case in CASES:
        if a is None or b is None:
            yield Check(title, ac.name, NA, "the policy allows no generated intent")
            continue
        with temporary_store(url) as store:
            w = make_world(cfg, store, ac, source)
            try:
                ok, seen = case(w, ac, a, b)
            except NotApplicable as exc:
                yield Check(title, ac.name, NA, str(exc))
                continue
            except Exception as exc:  # a guarantee that raises has failed; say how
                ok, seen = False, f"raised {type(exc).__name__}: {exc}"
            broken = w.invariants()
        detail = f"{seen}; {broken}" if broken else f"{seen} ({inv})"
        yield Check(title, ac.name, PASS if ok and not broken else FAIL, detail)
    with temporary_store(url) as store:
        yield _approval(cfg, store, ac, source)


def own_class_checks(cfg: ServiceConfig, store_url: str | None) -> list[Check]:
    """Every case for every configured class, in scratch stores of ``store_url``'s kind."""
    url = store_url if store_url and store_url.startswith("postgres") else None
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        return [
            Check(
                "ledger cases on your classes",
                "verify",
                FAIL,
                "not run: generating intents needs hypothesis (pip install 'effectgate[verify]')",
            )
        ]
    return [c for ac in cfg.registry for c in _class_checks(cfg, url, ac)]
