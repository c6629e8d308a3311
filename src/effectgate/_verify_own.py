"""The ledger cases of seed 001 and the controls, driven through a gate built from the user's own
configuration (``effectgate verify``): its action classes, policies, breakers and approval
rules, with the paper venue standing in for every configured adapter, in a scratch scope of a
scratch store of the configured kind. Each case ends with the shared checkers of
:mod:`effectgate._invariants`; a case passes only if what it observed holds **and** no
invariant is broken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass

from effectgate._core.intent import ActionClass, EffectClass
from effectgate._core.states import State
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._execute.dispatcher import Dispatcher
from effectgate._execute.executor import Gate
from effectgate._execute.reconciler import Reconciler
from effectgate._invariants import InvariantViolation, assert_invariants, no_dispatch_while_held
from effectgate._service._config import ServiceConfig
from effectgate._verify import FAIL, NA, PASS, Check
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import IdempotencyConflict, IntentError
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock, temporary_store

__all__ = ["own_class_checks"]

SCOPE = "verify"


class _Died(BaseException):
    """Stands for the process dying between the journal and the venue call."""


class _DyingAdapter(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise _Died


@dataclass
class _World:
    store: Store
    venue: PaperVenue
    counting: dict[str, CountingAdapter]
    gate: Gate
    reconciler: Reconciler
    clock: ManualClock
    cfg: ServiceConfig

    def gate_with(self, adapters: dict[str, PaperAdapter]) -> Gate:
        return Gate(
            store=self.store,
            registry=self.cfg.registry,
            adapters=adapters,
            policy=self.cfg.policy,
            clock=self.clock,
            breakers=self.cfg.breakers,
            approvals=self.cfg.approvals,
        )

    def requests(self) -> list[OutboundRequest]:
        return [r for a in self.counting.values() for r in a.requests]

    def invariants(self) -> str:
        try:
            assert_invariants(
                self.store,
                registry=self.cfg.registry,
                requests=self.requests(),
                venue_keys=[r.operation_key for r in self.venue.visible_records()],
            )
        except InvariantViolation as exc:
            return str(exc)
        return ""


def _world(cfg: ServiceConfig, store: Store) -> _World:
    clock = ManualClock()
    venue = PaperVenue(honour_key=True, clock=clock)
    counting = {name: CountingAdapter(PaperAdapter(venue)) for name in cfg.adapters}
    gate = Gate(
        store=store,
        registry=cfg.registry,
        adapters=dict(counting),
        policy=cfg.policy,
        clock=clock,
        breakers=cfg.breakers,
        approvals=cfg.approvals,
    )
    rec = Reconciler(
        store=store,
        registry=cfg.registry,
        adapters={name: PaperAdapter(venue) for name in cfg.adapters},
        clock=clock,
    )
    return _World(store, venue, counting, gate, rec, clock, cfg)


Case = Callable[[_World, ActionClass, dict[str, object], dict[str, object]], tuple[bool, str]]


def _replay(
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    first = w.gate.submit(ac.name, "op-replay", a, scope=SCOPE)
    again = w.gate.submit(ac.name, "op-replay", dict(a), scope=SCOPE)
    calls = w.venue.calls
    seen = f"state={again.state.value} replayed={again.replayed} venue calls={calls}"
    return first.state is State.ACKNOWLEDGED and again.replayed and calls == 1, seen


def _conflict(
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    w.gate.submit(ac.name, "op-conflict", a, scope=SCOPE)
    try:
        w.gate.submit(ac.name, "op-conflict", b, scope=SCOPE)
    except IdempotencyConflict as exc:
        return w.venue.calls == 1, f"refused ({exc.code}); venue calls={w.venue.calls}"
    return False, "another payload under the same id was accepted"


def _refuses_bad_input(
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    before = sum(w.store.count_by_state().values())
    try:
        w.gate.submit(ac.name, "op-bad", dict(a, not_a_field="x"), scope=SCOPE)
    except IntentError as exc:
        rows = sum(w.store.count_by_state().values())
        return rows == before and w.venue.calls == 0, f"refused ({exc.reason}); rows={rows}"
    return False, "an intent with an unknown field was accepted"


def _crash(
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    dying = w.gate_with({n: _DyingAdapter(w.venue) for n in w.cfg.adapters})
    with suppress(_Died):
        dying.submit(ac.name, "op-crash", a, scope=SCOPE)
    row = w.gate.submit(ac.name, "op-crash", dict(a), scope=SCOPE)
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


def _held_then_released(
    w: _World,
    ac: ActionClass,
    a: dict[str, object],
    engage: Callable[[], None],
    release: Callable[[], None],
    op: str,
) -> tuple[bool, str]:
    engage()
    row = w.gate.submit(ac.name, op, a, scope=SCOPE)
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
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    def on() -> None:
        w.store.set_kill(ac.name, True, operator="verify", reason="verify", now=w.clock())

    def off() -> None:
        w.store.set_kill(ac.name, False, operator="verify", reason="verify", now=w.clock())

    return _held_then_released(w, ac, a, on, off, "op-kill")


def _breaker(
    w: _World, ac: ActionClass, a: dict[str, object], b: dict[str, object]
) -> tuple[bool, str]:
    def trip() -> None:
        w.store.trip_breaker(ac.name, [("verify", "tripped by verify")], now=w.clock())

    def reset() -> None:
        w.store.reset_breaker(ac.name, operator="verify", reason="verify", now=w.clock())

    return _held_then_released(w, ac, a, trip, reset, "op-breaker")


CASES: tuple[tuple[str, str, Case], ...] = (
    ("a retry of one operation reaches the venue once", "inv 1", _replay),
    ("the same id with another payload is refused", "inv 2", _conflict),
    ("an unknown field is refused and writes no row", "inv 2", _refuses_bad_input),
    ("a crash after the journal stays uncertain, then settles", "inv 3, 4", _crash),
    ("an engaged kill switch holds, lifting it releases", "controls", _kill),
    ("an open breaker holds, a reset releases", "controls", _breaker),
)


def _approval(cfg: ServiceConfig, store: Store, ac: ActionClass, raw: dict[str, object]) -> Check:
    w = _world(cfg, store)
    row = w.gate.submit(ac.name, "op-approve", raw, scope=SCOPE)
    broken = w.invariants()
    ok = row.state is State.AWAITING_APPROVAL and w.venue.calls == 0 and not broken
    seen = f"state={row.state.value} venue calls={w.venue.calls}" + (
        f"; {broken}" if broken else ""
    )
    return Check("approval where the policy asks (tiers)", ac.name, PASS if ok else FAIL, seen)


def _class_checks(cfg: ServiceConfig, url: str | None, ac: ActionClass) -> Iterator[Check]:
    from effectgate._verify_intents import IntentSource, Unsupported

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
    auto = source.auto()
    other = source.other_than(auto) if auto is not None else None
    for title, inv, case in CASES:
        if auto is None or other is None:
            why = (
                f"tier floor {ac.tier_floor.value}: no proposal runs without a human"
                if ac.tier_floor.value != "validate"
                else "the policy allows no generated intent automatically"
            )
            yield Check(title, ac.name, NA, why)
            continue
        with temporary_store(url) as store:
            w = _world(cfg, store)
            try:
                ok, seen = case(w, ac, auto, other)
            except Exception as exc:  # a guarantee that raises has failed; say how
                ok, seen = False, f"raised {type(exc).__name__}: {exc}"
            broken = w.invariants()
        detail = f"{seen}; {broken}" if broken else f"{seen} ({inv})"
        yield Check(title, ac.name, PASS if ok and not broken else FAIL, detail)
    ask = source.needs_approval()
    if ask is None:
        yield Check(
            "approval where the policy asks (tiers)",
            ac.name,
            NA,
            "the policy asks for no approval of any generated intent",
        )
    else:
        with temporary_store(url) as store:
            yield _approval(cfg, store, ac, ask)


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
