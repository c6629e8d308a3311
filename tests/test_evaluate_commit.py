"""Evaluate bound to the later commit (issue 41 part 1, on both stores): the breaker's forecast,
the reservation quote, and the token re-checked inside the journal's transaction.

* The forecast says "would trip" exactly when the real submit then trips the breaker
  (invariant 7: an open breaker stops the dispatch; the forecast is the same rule, read-only).
* The quote is what the submit then reserves, per budget, and ``left`` is what remains
  (invariant 12: budgets never overdraw; a quote is never an overdraft in disguise).
* A token goes stale when the policy, a kill switch or a budget's headroom changes between the
  evaluation and the submit, including a change committed by a second connection after the
  gate's pre-check and before the journal (invariant 7: a switch stops every new dispatch at
  once); the refusal writes nothing but its audit line (invariant 3's other side).
* Evaluate itself changes no row, budget, breaker counter or rate window (full snapshots).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import pytest

import effectgate._execute.executor as executor_module
from effectgate import BreakerConfig, Gate, LimitPolicy, Operator, PolicySet, State
from effectgate._core.budgets import Resources
from effectgate._core.controls import to_micros
from effectgate._core.governed_policy import document_of, policy_hash
from effectgate._core.grants import parse_spec
from effectgate._core.reservations import PlanPolicy, ReservationKind, ReservationRequest
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.budgets import budget_dispatch_check
from effectgate._execute.evaluate import Evaluator
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import EvaluationTokenStale
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore
from effectgate.testing import ManualClock
from runkit import SCOPE, tool_call

T0 = 1_000_000.0
H = "harness-1"
DIGEST = "b" * 64
SECRET = b"s" * 32


def order(qty: str = "4", **extra: object) -> dict[str, object]:
    return {**EXAMPLE_ORDER, "quantity": qty, **extra}  # 4 at 100: value 400


def limits(version: str = "limit-1", ceiling: str = "100000") -> PolicySet:
    return PolicySet(
        {
            "submit_order": replace(
                LimitPolicy(Decimal(ceiling), approve_above=Decimal("5000")), version=version
            ),
            "cancel_order": LimitPolicy(Decimal("1")),
        }
    )


def _tables(store: Store) -> list[str]:
    rows = store._rows  # type: ignore[attr-defined]
    if isinstance(store, SQLiteStore):
        found = rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        found = rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    return sorted(str(r[0]) for r in found)


def snapshot(store: Store) -> dict[str, list[str]]:
    """Every table's rows but the audit's: operations, budgets, reservations, breaker signals
    and known targets, the dispatch record (rate and exposure windows), controls, grants."""
    rows = store._rows  # type: ignore[attr-defined]
    return {
        t: sorted(repr(tuple(r)) for r in rows(f"SELECT * FROM {t}"))
        for t in _tables(store)
        if not t.startswith("audit")
    }


def audit_kinds(store: Store) -> list[str]:
    return [e.kind for e in store.iter_audit()]


@dataclass
class World:
    store: Store
    gate: Gate
    operator: Operator
    clock: ManualClock
    ref: Any = None
    grant_id: str | None = None


def world(
    store: Store,
    *,
    breaker: BreakerConfig | None = None,
    envelope: bool = False,
    run: bool = False,
    grants: bool = False,
) -> World:
    """A gate on ``store`` with what each test asks for: a breaker, an envelope (rate 5 per
    60s, exposure 2000 per 60s), a run admitted under a value-bound leaf of 1000 (with the
    value charged at dispatch), a grant to ``alice`` with an aggregate budget of 20000."""
    clock = ManualClock(T0)
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue(clock=clock))},
        policy=limits(),
        clock=clock,
        breakers={"submit_order": breaker} if breaker else None,
        evaluator=Evaluator(SECRET),
        admission_checks=[budget_dispatch_check] if run else (),
        authorise=grant_authoriser(environment="production") if grants else None,
    )
    operator = Operator(store=store, registry=gate.registry, clock=clock)
    w = World(store, gate, operator, clock)
    if envelope:
        for axis, value in (("rate", {"limit": 5, "interval": 60}),
                            ("exposure", {"limit": "2000", "window": 60})):  # fmt: skip
            operator.step(
                "submit_order", axis, value, evidence={"t": "x"}, reverse_on="manual",
                operator="ops",
            )  # fmt: skip
    if run:
        lim = Resources(steps=50, tokens=5000, tool_calls=20, fan_out=8, replans=1)
        lim = replace(lim, value_micros=to_micros(Decimal(5000)))
        store.open_plan_account(
            SCOPE,
            PlanPolicy("plan-v", DIGEST, lim, T0 + 3600, token_only=True, value_bound=True),
            now=T0, actor=H,
        )  # fmt: skip
        alloc = Resources(steps=5, tokens=500, tool_calls=5, fan_out=1,
                          value_micros=to_micros(Decimal(1000)))  # fmt: skip
        store.reserve(
            SCOPE,
            ReservationRequest(
                "leaf-a",
                "plan-v",
                DIGEST,
                "task-a",
                "att-a",
                ReservationKind.LEAF,
                alloc,
                T0 + 1800,
            ),
            now=T0,
            actor=H,
        )
        store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        call = tool_call("t-1", run="run-a")
        store.record_run_call(SCOPE, call, now=T0, actor=H)
        w.ref = call.ref
    if grants:
        raw = {"actions": ["submit_order"], "targets": ["*"], "scope": SCOPE,
               "environments": ["production"], "expires_in": 3600, "max_value": "10000",
               "budget": "20000"}  # fmt: skip
        g = store.create_grant("alice", parse_spec(raw, now=T0), created_by="ops", now=T0)
        w.grant_id = g.grant_id
    return w


# --- evaluate writes nothing ----------------------------------------------------------------


class TestEvaluateChangesNothing:
    """Invariants 3 and 12: evaluate journals nothing, so it charges no budget, records no
    breaker signal or target, and takes no rate or exposure window; its one write is its
    audit line."""

    def test_full_snapshot_is_unchanged_with_every_budget_in_play(self, store: Store) -> None:
        w = world(
            store, breaker=BreakerConfig(window=300, max_repeats=1, max_new_targets=5),
            envelope=True, run=True, grants=True,
        )  # fmt: skip
        w.gate.submit("submit_order", "seen", order(), principal="alice", run_call=w.ref)
        before, kinds = snapshot(store), audit_kinds(store)
        asked = [
            dict(intent=order(), principal="alice", run_call=w.ref),  # would trip (repeat)
            dict(intent=order("3", instrument="NEW-1"), principal="alice", run_call=w.ref),
            dict(intent=order("60"), principal="alice"),  # the approval tier
            dict(intent=order("9000"), principal="bob"),  # over the policy: rejected
        ]
        got = [w.gate.evaluate("submit_order", **a) for a in asked]  # type: ignore[arg-type]
        assert got[0].breaker is not None and got[0].breaker["would_trip"] is True
        assert [g.outcome for g in got] == ["held", "dispatch", "awaiting_approval", "rejected"]
        assert snapshot(store) == before
        assert audit_kinds(store) == kinds + ["intent_evaluated"] * len(asked)


# --- the breaker's forecast ----------------------------------------------------------------


def _sequence(signal: str) -> tuple[BreakerConfig, list[dict[str, object]]]:
    """A breaker config and the proposals that walk one signal up to its threshold."""
    if signal == "repeats":
        return BreakerConfig(window=300, max_repeats=2), [order()] * 4
    if signal == "value_rate":
        return BreakerConfig(window=300, max_value=Decimal("1000")), [order()] * 4
    if signal == "new_targets":
        cfg = BreakerConfig(window=300, max_new_targets=1)
        return cfg, [order(instrument=f"NEW-{i}") for i in range(4)]
    cfg = BreakerConfig(window=300, max_rejection_rate=0.5, min_samples=3)
    return cfg, [order(), order("9000"), order("9000"), order(), order("9000")]


class TestBreakerForecast:
    """Invariant 7: the forecast says "would trip" exactly when the real submit then trips
    the breaker (and the row is held), for every signal; read-only, so asking twice changes
    nothing."""

    @pytest.mark.parametrize("signal", ["repeats", "value_rate", "new_targets", "rejection_rate"])
    def test_would_trip_exactly_when_the_submit_trips(self, store: Store, signal: str) -> None:
        cfg, proposals = _sequence(signal)
        w = world(store, breaker=cfg)
        trips = []
        for i, intent in enumerate(proposals):
            was_open = store.controls("submit_order").breaker_open
            ev = w.gate.evaluate("submit_order", intent, principal="agent-1")
            again = w.gate.evaluate("submit_order", intent, principal="agent-1")
            assert ev.breaker is not None and again.breaker == ev.breaker
            op = w.gate.submit("submit_order", f"op-{i}", intent, principal="agent-1")
            tripped = not was_open and store.controls("submit_order").breaker_open
            assert ev.breaker["would_trip"] is tripped, (i, ev.breaker)
            assert ev.breaker["open"] is was_open
            if tripped:
                trips.append(i)
                assert signal in str(ev.breaker["signals"])
                if op.state is not State.REJECTED:
                    assert ev.outcome == "held" and op.state is State.VALIDATED
                    assert (op.detail or "").startswith("held: breaker open")
            elif not was_open and op.state is State.ACKNOWLEDGED:
                assert ev.outcome == "dispatch"
        assert len(trips) == 1  # the walk crossed the threshold once, and the forecast saw it
        after = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert after.breaker == {
            "open": True, "window": 300, "would_trip": False, "signals": [], "reason": "",
        }  # fmt: skip
        assert after.outcome == "held"

    def test_a_token_that_quoted_no_trip_is_stale_once_the_window_would_trip(
        self, store: Store
    ) -> None:
        """The token covers the forecast, not only the open/closed state: signals recorded
        since the evaluation that make this proposal trip the breaker refuse the submit
        (``breaker``) instead of holding a row the agent was told would be sent."""
        w = world(store, breaker=BreakerConfig(window=300, max_repeats=1))
        ev = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert ev.breaker is not None and ev.breaker["would_trip"] is False
        w.gate.submit("submit_order", "rival", order(), principal="agent-2")
        now = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert now.breaker is not None and now.breaker["would_trip"] is True
        before = snapshot(store)
        with pytest.raises(EvaluationTokenStale) as caught:
            w.gate.submit(
                "submit_order", "op-1", order(), principal="agent-1", evaluation_token=ev.token
            )
        assert (caught.value.reason, caught.value.stage) == ("breaker", "pre")
        assert "would now trip" in caught.value.message
        assert snapshot(store) == before and not store.controls("submit_order").breaker_open
        # A token quoted after the window filled still holds: it said "would trip".
        held = w.gate.submit(
            "submit_order", "op-2", order(), principal="agent-1", evaluation_token=now.token
        )
        assert held.state is State.VALIDATED and (held.detail or "").startswith("held: breaker")

    def test_no_breaker_no_forecast(self, store: Store) -> None:
        w = world(store)
        got = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert got.breaker is None and got.to_dict()["breaker"] is None


# --- the reservation quote -----------------------------------------------------------------


def _used(w: World) -> dict[str, int]:
    """What each budget has used, read from the store the way each is charged."""
    s = w.store
    count, value = s.dispatch_window("submit_order", w.clock() - 60)
    state = s.run_budget(SCOPE, "run-a")
    assert state is not None and w.grant_id is not None
    return {
        "envelope.rate": count,
        "envelope.exposure": value,
        "run.tool_calls": state.usage.tool_calls,
        "reservation.plan-v.leaf-a.value": s.run_dispatched_value(SCOPE, "run-a"),
        f"grant.{w.grant_id}": s.dispatched_micros("alice", frozenset({"submit_order"}), T0),
    }


class TestReservationQuote:
    """Invariant 12: the quote of each budget (the envelope's windows, the run's tool slot,
    its leaf reservation's value, the caller's grant) equals what the real submit then
    reserves, and ``left`` is what remains after it; one that would not fit is refused by
    evaluate and by the submit alike."""

    def test_the_quote_is_what_the_submit_reserves(self, store: Store) -> None:
        w = world(store, envelope=True, run=True, grants=True)
        for i, qty in enumerate(["4", "3", "2"]):
            ev = w.gate.evaluate("submit_order", order(qty), principal="alice", run_call=w.ref)
            quotes = {b.name: b for b in ev.state.budgets}
            assert set(quotes) == set(_used(w)), quotes
            before = _used(w)
            assert {n: q.used for n, q in quotes.items()} == before
            op = w.gate.submit(
                "submit_order", f"op-{i}", order(qty), principal="alice", run_call=w.ref,
                evaluation_token=ev.token,
            )  # fmt: skip
            assert op.state is State.ACKNOWLEDGED
            after = _used(w)
            for name, q in quotes.items():
                assert after[name] - before[name] == q.reserve, name
                assert q.limit - after[name] == q.left, name
        assert quotes["reservation.plan-v.leaf-a.value"].left == to_micros(Decimal(100))

    def test_a_reservation_that_would_not_fit_is_refused_by_both(self, store: Store) -> None:
        w = world(store, run=True)
        for i in range(2):
            w.gate.submit("submit_order", f"op-{i}", order(), run_call=w.ref)  # 800 of 1000
        ev = w.gate.evaluate("submit_order", order(), principal="agent-1", run_call=w.ref)
        (leaf,) = [b for b in ev.state.budgets if b.name.startswith("reservation.")]
        assert (leaf.used, leaf.reserve, leaf.left) == (
            to_micros(Decimal(800)), to_micros(Decimal(400)), -to_micros(Decimal(200)),
        )  # fmt: skip
        assert ev.outcome == "rejected"
        assert any("would not fit" in r for r in ev.reasons)
        op = w.gate.submit("submit_order", "op-2", order(), principal="agent-1", run_call=w.ref)
        assert op.state is State.REJECTED and "budget_exceeded" in (op.detail or "")
        small = w.gate.evaluate("submit_order", order("2"), run_call=w.ref)
        assert small.outcome == "dispatch"
        assert w.gate.submit("submit_order", "op-3", order("2"), run_call=w.ref).state is (
            State.ACKNOWLEDGED
        )


# --- the token re-checked inside the journal's transaction ---------------------------------


@pytest.fixture
def between(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """Changes to commit after the gate's pre-check of a token and before its journal
    transaction: appended callables run once, in order, right after the pre-check passed."""
    pending: list[Callable[[], None]] = []
    original = executor_module.check_token

    def patched(*args: Any, **kwargs: Any) -> Any:
        recheck = original(*args, **kwargs)  # the pre-check passed: now the race
        while pending:
            pending.pop(0)()
        return recheck

    monkeypatch.setattr(executor_module, "check_token", patched)
    yield pending


def _refusals(store: Store) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in store.iter_audit() if e.kind == "evaluation_token_refused"]


class TestTokenRecheckedInTheJournal:
    """Invariant 7 (and 12): a change committed between the pre-check and the journal, here by
    a second store handle (another connection, as another process would), still refuses the
    submit, in the journal's own transaction: ``stage`` ``in_tx``, the reason naming what
    changed, nothing written but the refusal's audit line."""

    def _refused(
        self, w: World, token: str, reason: str, theirs: frozenset[str] = frozenset()
    ) -> EvaluationTokenStale:
        """Submit ``op-1`` with ``token`` and check the refusal; ``theirs``: tables the
        concurrent change itself writes (its own row, its own dispatch)."""
        before = snapshot(w.store)
        with pytest.raises(EvaluationTokenStale) as caught:
            w.gate.submit(
                "submit_order", "op-1", order(), principal="alice", run_call=w.ref,
                evaluation_token=token,
            )  # fmt: skip
        exc = caught.value
        assert (exc.reason, exc.stage) == (reason, "in_tx"), exc.message
        assert exc.to_dict()["stage"] == "in_tx"
        after = snapshot(w.store)
        changed = {t for t in after if after[t] != before[t]}
        # Only the concurrent change's own tables moved: no row, signal, slot or window entry.
        ours = {"operations", "control_signals", "known_targets", "run_effects", "dispatch_log"}
        assert not changed & (ours - theirs), changed
        assert w.store.get(SCOPE, "op-1") is None
        (line,) = _refusals(w.store)
        assert line["error"]["stage"] == "in_tx" and line["error"]["reason"] == reason
        return exc

    def test_a_kill_switch_flipped_after_the_pre_check(
        self, store_factory: Any, between: list[Callable[[], None]]
    ) -> None:
        w = world(store_factory(), breaker=BreakerConfig(window=300, max_repeats=50))
        other = Operator(store=store_factory(), registry=w.gate.registry, clock=w.clock)
        token = w.gate.evaluate("submit_order", order(), principal="alice").token
        between.append(lambda: other.kill("submit_order", operator="ops", reason="drill"))
        exc = self._refused(w, token, "controls")
        assert "controls changed" in exc.message

    def test_a_policy_swapped_after_the_pre_check_on_the_one_statement_path(
        self, store: Store, between: list[Callable[[], None]]
    ) -> None:
        """No breaker and no active control: without a token this class journals in one
        statement; with one, the recheck still runs in the journal's transaction."""
        w = world(store)
        token = w.gate.evaluate("submit_order", order(), principal="alice").token

        def swap() -> None:
            w.gate.policy = limits("limit-2")

        between.append(swap)
        exc = self._refused(w, token, "policy")
        assert "limit-1" in exc.message and "limit-2" in exc.message

    def test_a_policy_activated_by_another_replica_after_the_pre_check(
        self, store_factory: Any, between: list[Callable[[], None]]
    ) -> None:
        w = world(store_factory())
        other = store_factory()
        token = w.gate.evaluate("submit_order", order(), principal="alice").token
        doc = document_of({"submit_order": LimitPolicy(Decimal("50000"))})
        text = json.dumps(doc, sort_keys=True)
        between.append(
            lambda: other.load_policy(text, policy_hash(doc), by="ops", now=T0)
        )  # fmt: skip
        exc = self._refused(w, token, "policy")
        assert "active policy changed" in exc.message

    def test_headroom_spent_by_another_process_after_the_pre_check(
        self, store_factory: Any, between: list[Callable[[], None]]
    ) -> None:
        w = world(store_factory(), envelope=True)
        rival = world(store_factory())
        token = w.gate.evaluate("submit_order", order(), principal="alice").token
        between.append(
            lambda: rival.gate.submit("submit_order", "rival", order(), principal="bob")
        )  # fmt: skip
        exc = self._refused(w, token, "budget", frozenset({"operations", "dispatch_log"}))
        assert exc.message.startswith("envelope.") and "below the" in exc.message
        assert w.store.get(SCOPE, "rival") is not None  # the rival's dispatch stands, alone
        assert w.store.dispatch_window("submit_order", 0.0) == (1, to_micros(Decimal(400)))

    def test_a_run_bound_submit_is_rechecked_before_its_tool_slot(
        self, store_factory: Any, between: list[Callable[[], None]]
    ) -> None:
        """The slot is charged after the recheck: an unchanged state passes (no false stale
        from the submit's own charge), a kill switch flipped in the race refuses with the
        slot uncharged."""
        w = world(store_factory(), run=True)
        other = Operator(store=store_factory(), registry=w.gate.registry, clock=w.clock)
        ok = w.gate.evaluate("submit_order", order("2"), principal="alice", run_call=w.ref)
        done = w.gate.submit(
            "submit_order", "op-0", order("2"), principal="alice", run_call=w.ref,
            evaluation_token=ok.token,
        )  # fmt: skip
        assert done.state is State.ACKNOWLEDGED
        token = w.gate.evaluate("submit_order", order(), principal="alice", run_call=w.ref).token
        slots = w.store.run_budget(SCOPE, "run-a")
        between.append(lambda: other.kill("submit_order", operator="ops", reason="drill"))
        self._refused(w, token, "controls")
        assert w.store.run_budget(SCOPE, "run-a") == slots

    def test_signals_committed_after_the_pre_check_that_now_trip_the_breaker(
        self, store_factory: Any, between: list[Callable[[], None]]
    ) -> None:
        """A rival's proposal committed after the pre-check fills the breaker's window: this
        proposal would now trip the breaker, so the journal's transaction refuses it
        (``breaker``); the breaker is not tripped by a proposal that was never journalled."""
        cfg = BreakerConfig(window=300, max_repeats=1)
        w = world(store_factory(), breaker=cfg)
        rival = world(store_factory(), breaker=cfg)
        ev = w.gate.evaluate("submit_order", order(), principal="alice")
        assert ev.breaker is not None and ev.breaker["would_trip"] is False
        between.append(
            lambda: rival.gate.submit("submit_order", "rival", order(), principal="bob")
        )  # fmt: skip
        theirs = frozenset({"operations", "dispatch_log", "control_signals", "known_targets"})
        exc = self._refused(w, ev.token, "breaker", theirs)
        assert "would now trip" in exc.message
        assert not w.store.controls("submit_order").breaker_open

    def test_nothing_changed_the_token_is_accepted(
        self, store: Store, between: list[Callable[[], None]]
    ) -> None:
        w = world(store, envelope=True, grants=True, breaker=BreakerConfig(max_repeats=9))
        token = w.gate.evaluate("submit_order", order(), principal="alice").token
        between.append(lambda: None)
        op = w.gate.submit(
            "submit_order", "op-1", order(), principal="alice", evaluation_token=token
        )
        assert op.state is State.ACKNOWLEDGED and not between
        assert _refusals(store) == []
