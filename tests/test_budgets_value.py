"""The plan's seventh dimension (the summed declared value of a run's effects), runs admitted
under leaf reservations, and the one record of dispatched value, on both stores.

Invariant 12 (docs/design.md): budgets and reservations never overdraw; unknown use stays
charged; arithmetic saturates and an overflow refuses admission.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._core.budgets import DIMENSIONS, INT64_MAX, VALUE, Resources, RunUsage
from effectgate._core.controls import to_micros
from effectgate._core.reservations import (
    PlanPolicy,
    ReservationKind,
    ReservationRequest,
    account,
    admit,
    settle_charge,
)
from effectgate._core.run_value import run_budget_for, run_settlement, value_charge
from effectgate._execute.budgets import budget_dispatch_check
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import BudgetExceeded, InvalidBudget, ReservationConflict
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock
from runkit import SCOPE, tool_call

DIGEST = "b" * 64
T0 = 1_000_000.0
ORDER_VALUE = to_micros(Decimal("400"))  # EXAMPLE_ORDER: 4 at 100.00
H = "harness-1"


def plan(value: int | None = 1000, **kw: Any) -> PlanPolicy:
    limits = Resources(steps=50, tokens=5000, tool_calls=20, fan_out=8, replans=1)
    if value is not None:
        limits = dataclasses.replace(limits, value_micros=to_micros(Decimal(value)))
    return PlanPolicy(
        "plan-v", DIGEST, limits, T0 + 3600, token_only=True, value_bound=value is not None, **kw
    )


def leaf(rid: str = "leaf-a", value: int | None = 1000, **alloc: int) -> ReservationRequest:
    amounts = {"steps": 5, "tokens": 500, "tool_calls": 5, "fan_out": 1, **alloc}
    if value is not None:
        amounts["value_micros"] = to_micros(Decimal(value))
    return ReservationRequest(
        rid, "plan-v", DIGEST, f"task-{rid}", f"att-{rid}", ReservationKind.LEAF,
        Resources(**amounts), T0 + 1800,
    )  # fmt: skip


# --- the arithmetic (pure) ------------------------------------------------------------------


values = st.one_of(st.none(), st.integers(min_value=0, max_value=INT64_MAX))


class TestValueArithmetic:
    """Invariant 12 on the value dimension: what is admitted never passes the allocation."""

    @given(st.integers(min_value=0, max_value=INT64_MAX), st.lists(values, max_size=40))
    @settings(max_examples=300)
    def test_a_run_never_spends_past_its_leaf_in_many_small_effects(
        self, allocation: int, effects: list[int | None]
    ) -> None:
        spent = 0
        for v in effects:
            charge = value_charge(value=v, spent=spent, allocation=allocation)
            fits = v is not None and spent + v <= allocation
            assert (charge.refused is None) == fits
            if fits:
                assert v is not None and charge.spent == spent + v
                spent = charge.spent
            else:
                assert charge.spent == spent  # a refusal charges nothing
        assert spent <= allocation

    @given(st.integers(min_value=1, max_value=INT64_MAX))
    def test_an_overflowing_sum_is_refused_not_wrapped(self, v: int) -> None:
        charge = value_charge(value=v, spent=INT64_MAX, allocation=INT64_MAX)
        assert charge.refused is not None and charge.spent == INT64_MAX

    def test_a_class_with_no_value_measure_is_refused(self) -> None:
        charge = value_charge(value=None, spent=0, allocation=INT64_MAX)
        assert charge.refused is not None and "value measure" in charge.refused

    @given(
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=10_000),
        st.booleans(),
        st.integers(min_value=0, max_value=10**9),
        st.booleans(),
    )
    @settings(max_examples=200)
    def test_a_run_settles_known_use_exactly_and_keeps_unknown_use(
        self, steps: int, tokens: int, tools: int, estimated: bool, value: int, bound: bool
    ) -> None:
        req = leaf(value=1000 if bound else None)
        s = run_settlement(
            req, RunUsage(steps, tokens, tokens, tools, estimated), value=value, value_bound=bound
        )
        charge = settle_charge(req, s)
        a = req.allocation
        # Known use is charged exactly: unused capacity refunded, an overrun kept.
        assert charge.steps == steps and charge.tool_calls == tools
        assert charge.tokens == (max(a.tokens, tokens) if estimated else tokens)
        assert charge.value_micros == (value if bound else a.value_micros)
        # What the run cannot report keeps its allocation.
        assert charge.fan_out == a.fan_out and charge.replans == a.replans
        assert charge.money_micros == a.money_micros

    def test_the_value_dimension_is_absent_from_old_digests(self) -> None:
        r = Resources(steps=1, tokens=2)
        assert VALUE not in r.to_dict() and Resources.from_dict(r.to_dict()) == r
        assert Resources.from_dict(Resources(value_micros=7).to_dict()).value_micros == 7
        p = plan(None)
        assert "value_bound" not in p.to_dict() and PlanPolicy.from_dict(p.to_dict()) == p
        assert PlanPolicy.from_dict(plan().to_dict()) == plan()
        assert len(DIMENSIONS) == 7

    def test_a_value_limit_needs_the_plan_to_say_it_bounds_value(self) -> None:
        with pytest.raises(InvalidBudget, match="value_bound"):
            PlanPolicy("p", DIGEST, Resources(value_micros=5), T0 + 10, token_only=True)
        unbounded = plan(None)
        assert VALUE in unbounded.skip and VALUE not in plan().skip
        with pytest.raises(InvalidBudget, match="does not bound value"):
            admit(unbounded, account(unbounded, []), leaf(), T0)

    def test_a_value_bound_plan_admits_exactly_its_value(self) -> None:
        p = plan(1000)
        snap = account(p, [])
        assert admit(p, snap, leaf(value=1000), T0) == 1
        with pytest.raises(BudgetExceeded) as e:
            admit(p, snap, leaf(value=1001), T0)
        assert e.value.dimension == VALUE

    def test_a_run_needs_a_leaf_with_steps_tokens_and_tool_calls(self) -> None:
        budget = run_budget_for(leaf())
        assert (budget.max_steps, budget.max_tokens, budget.max_tool_calls) == (5, 500, 5)
        assert budget.deadline == T0 + 1800
        with pytest.raises(InvalidBudget, match="tool_calls"):
            run_budget_for(leaf(tool_calls=0))
        with pytest.raises(InvalidBudget, match="branch"):
            run_budget_for(dataclasses.replace(leaf(), kind=ReservationKind.BRANCH))


# --- runs under reservations (store) --------------------------------------------------------


def _open(store: Store, value: int | None = 1000, leaf_value: int | None = 1000) -> None:
    store.open_plan_account(SCOPE, plan(value), now=T0, actor=H)
    store.reserve(SCOPE, leaf(value=leaf_value), now=T0, actor=H)


def _refusals(store: Store) -> list[dict[str, Any]]:
    return [e.detail for e in store.iter_audit() if e.kind == "budget_refused"]


class TestRunsUnderReservations:
    """A run admitted under a leaf charges it; settling the run settles the leaf (invariant 12)."""

    def test_the_run_gets_the_leaf_s_budget_once(self, store: Store) -> None:
        _open(store)
        link, new = store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        assert new and (link.plan_id, link.reservation_id) == ("plan-v", "leaf-a")
        again, new_again = store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        assert again == link and not new_again
        state = store.run_budget(SCOPE, "run-a")
        assert state is not None and state.budget == run_budget_for(leaf())
        assert store.run_link(SCOPE, "run-a") == link
        with pytest.raises(ReservationConflict, match="carries run"):
            store.admit_run(SCOPE, "run-b", "plan-v", "leaf-a", now=T0, actor=H)
        assert store.run_link(SCOPE, "run-b") is None
        assert _refusals(store)[-1]["action"] == "admit_run"

    def test_a_run_with_its_own_budget_is_not_admitted_under_a_leaf(self, store: Store) -> None:
        from effectgate import RunBudget

        _open(store)
        store.set_run_budget(SCOPE, "run-a", RunBudget(max_steps=3), now=T0, actor=H)
        with pytest.raises(ReservationConflict, match="its own budget"):
            store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)

    def test_settling_the_run_settles_its_leaf_from_stored_usage(self, store: Store) -> None:
        _open(store)
        store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        store.begin_run_step(SCOPE, "run-a", now=T0 + 1)
        store.record_run_tokens(SCOPE, "run-a", 120, now=T0 + 2)
        res, new = store.settle_run(SCOPE, "run-a", now=T0 + 3, actor=H)
        assert new and res.charge is not None
        # Known use exactly (4 steps, 380 tokens and 5 tool calls refunded); no effect
        # dispatched, so the value charge is zero; fan-out keeps its slot.
        assert res.charge == Resources(steps=1, tokens=120, tool_calls=0, fan_out=1)
        assert store.settle_run(SCOPE, "run-a", now=T0 + 9, actor=H) == (res, False)
        snap = store.plan_account(SCOPE, "plan-v")
        assert snap.used == res.charge
        # The run admits nothing more once its leaf has settled.
        with pytest.raises(BudgetExceeded) as e:
            store.begin_run_step(SCOPE, "run-a", now=T0 + 4)
        assert e.value.dimension == "settled"

    def test_settling_the_leaf_directly_closes_its_run_too(self, store: Store) -> None:
        from effectgate import Settlement

        _open(store)
        store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        store.settle(SCOPE, "plan-v", Settlement("leaf-a", leaf().digest()), now=T0, actor=H)
        link = store.run_link(SCOPE, "run-a")
        assert link is not None and link.settled_at == T0
        with pytest.raises(BudgetExceeded):
            store.record_run_tokens(SCOPE, "run-a", 5, now=T0 + 1)

    def test_a_crash_between_admission_and_settlement_leaves_the_leaf_charged(
        self, store_factory: Any
    ) -> None:
        first = store_factory()
        _open(first)
        first.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        first.close()  # the harness is gone; nothing settled
        later = store_factory()
        snap = later.plan_account(SCOPE, "plan-v")
        assert snap.used == leaf().allocation  # unknown use stays charged
        assert later.run_link(SCOPE, "run-a") is not None


# --- the value dimension at dispatch, on the shared record ----------------------------------


def _gate(store: Store, clock: ManualClock) -> tuple[Gate, CountingAdapter]:
    adapter = CountingAdapter(PaperAdapter(PaperVenue()))
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": adapter},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000")), "cancel_order": LimitPolicy()}
        ),
        clock=clock,
        admission_checks=[budget_dispatch_check],
    )
    return gate, adapter


def _cancel(ref: str = "paper-1") -> dict[str, object]:
    return {
        "intent_version": "1",
        "action": "cancel_order",
        "instrument": EXAMPLE_ORDER["instrument"],
        "order_ref": ref,
        "context_digest": EXAMPLE_ORDER["context_digest"],
        "proposed_by": EXAMPLE_ORDER["proposed_by"],
    }


class TestValueAtDispatch:
    """Invariant 12: a run cannot spend past its leaf's value in many small effects, each under
    the per-action ceiling; the charge is the dispatch's entry in the one shared record."""

    def _run(self, store: Store, **kw: Any) -> tuple[Gate, CountingAdapter, Any]:
        _open(store, **kw)
        store.admit_run(SCOPE, "run-a", "plan-v", "leaf-a", now=T0, actor=H)
        call = tool_call("t-1", run="run-a")
        store.record_run_call(SCOPE, call, now=T0, actor=H)
        gate, adapter = _gate(store, ManualClock(T0 + 1))
        return gate, adapter, call.ref

    def test_effects_stop_at_the_leaf_s_value(self, store: Store) -> None:
        gate, adapter, ref = self._run(store)
        a = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=ref)
        b = gate.submit("submit_order", "op-2", EXAMPLE_ORDER, run_call=ref)
        c = gate.submit("submit_order", "op-3", EXAMPLE_ORDER, run_call=ref)
        assert a.state is State.ACKNOWLEDGED and b.state is State.ACKNOWLEDGED
        assert c.state is State.REJECTED and "budget_exceeded" in (c.detail or "")
        assert "value_micros" in (c.detail or "")
        assert adapter.execute_calls == 2
        assert store.run_dispatched_value(SCOPE, "run-a") == 2 * ORDER_VALUE
        # The refused dispatch left no entry: the record holds what was sent, no more.
        assert store.count_dispatched(0.0) == {"submit_order": 2}
        res, _ = store.settle_run(SCOPE, "run-a", now=T0 + 5, actor=H)
        assert res.charge is not None and res.charge.value_micros == 2 * ORDER_VALUE
        assert res.charge.tool_calls == 3  # three operations took a slot each
        # After settlement the run admits nothing more: refused, no row (same id may return).
        with pytest.raises(BudgetExceeded) as e:
            gate.submit("submit_order", "op-4", EXAMPLE_ORDER, run_call=ref)
        assert e.value.dimension == "settled"
        assert store.get(SCOPE, "op-4") is None and adapter.execute_calls == 2

    def test_a_class_with_no_value_measure_is_refused_where_the_plan_bounds_value(
        self, store: Store
    ) -> None:
        gate, adapter, ref = self._run(store)
        row = gate.submit("cancel_order", "op-c", _cancel(), run_call=ref)
        assert row.state is State.REJECTED and "value measure" in (row.detail or "")
        assert adapter.execute_calls == 0

    def test_a_plan_that_does_not_bound_value_charges_nothing_to_it(self, store: Store) -> None:
        gate, adapter, ref = self._run(store, value=None, leaf_value=None)
        rows = [
            gate.submit("submit_order", f"op-{i}", EXAMPLE_ORDER, run_call=ref) for i in range(3)
        ]
        assert [r.state for r in rows] == [State.ACKNOWLEDGED] * 3
        assert adapter.execute_calls == 3
        # No reader: the entries name no run.
        assert store.run_dispatched_value(SCOPE, "run-a") == 0

    def test_an_unbound_operation_is_not_charged(self, store: Store) -> None:
        gate, adapter, _ = self._run(store)
        for i in range(4):
            assert gate.submit("submit_order", f"free-{i}", EXAMPLE_ORDER).state is (
                State.ACKNOWLEDGED
            )
        assert adapter.execute_calls == 4
        assert store.run_dispatched_value(SCOPE, "run-a") == 0

    def test_a_row_admitted_before_its_leaf_settled_is_refused_at_dispatch(
        self, store: Store
    ) -> None:
        gate, adapter, ref = self._run(store)
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=ref, dispatch=False)
        assert row.state is State.VALIDATED
        store.settle_run(SCOPE, "run-a", now=T0 + 2, actor=H)
        late = gate.dispatch("op-1")
        assert late.state is State.REJECTED and "(settled)" in (late.detail or "")
        assert adapter.execute_calls == 0


class TestOneRecordPrune:
    """Entries stay while a reader holds them: an unsettled run, a live budgeted grant, an
    envelope window; the rest go after the retention, with a chained audit entry (invariant 8)."""

    def test_the_prune_keeps_what_an_open_run_reads(self, store: Store) -> None:
        gate, _, ref = TestValueAtDispatch()._run(store)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=ref)
        gate.submit("submit_order", "free-1", EXAMPLE_ORDER)
        later = T0 + 10 * 86400
        assert store.prune_dispatch_record(now=later) == 1  # free-1 only
        assert store.run_dispatched_value(SCOPE, "run-a") == ORDER_VALUE
        store.settle_run(SCOPE, "run-a", now=T0 + 5, actor=H)
        assert store.prune_dispatch_record(now=later) == 1  # the run settled: op-1 goes
        assert store.count_dispatched(0.0) == {}
        pruned = [e.detail for e in store.iter_audit() if e.kind == "dispatch_record_pruned"]
        assert [p["entries"] for p in pruned] == [1, 1]

    def test_the_prune_keeps_what_a_live_budgeted_grant_reads(self, store: Store) -> None:
        from effectgate._core.grants import GrantSpec

        gate, _, _ = TestValueAtDispatch()._run(store)
        spec = GrantSpec(
            actions=frozenset({"submit_order"}),
            targets=frozenset({"*"}),
            environments=frozenset({"*"}),
            scope="*",
            expires_at=T0 + 30 * 86400,
            budget=Decimal("5000"),
        )
        store.create_grant("alice", spec, created_by="ops", now=T0)
        gate.submit("submit_order", "free-1", EXAMPLE_ORDER)
        later = T0 + 10 * 86400
        assert store.prune_dispatch_record(now=later) == 0
        assert store.count_dispatched(0.0) == {"submit_order": 1}
        # Without the grant's budget nothing holds the entry past the retention.
        store.revoke_grants(by="ops", now=T0 + 1, holder="alice")
        assert store.prune_dispatch_record(now=later) == 1


class TestHotPathUnchanged:
    """Nothing reads the record for an unbound operation: its dispatch writes the one entry it
    always wrote and touches the record no further; two commits per action (SQLite's statement
    trace; PostgreSQL's first submit writes the entry inside its one statement, unchanged)."""

    def test_an_unread_dispatch_writes_one_entry_and_nothing_else(self, tmp_path: Any) -> None:
        from effectgate.bench.common import SQLiteCommitCounter
        from effectgate.store.sqlite import SQLiteStore

        store = SQLiteStore(str(tmp_path / "hot.db"))
        plain = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
            clock=ManualClock(T0),
        )
        checked, _ = _gate(store, ManualClock(T0))
        seen: list[str] = []
        for gate, op in ((plain, "warm"), (plain, "plain-1"), (checked, "checked-1")):
            seen.clear()
            counter = SQLiteCommitCounter(store._conn)  # type: ignore[attr-defined]
            store._conn.set_trace_callback(  # type: ignore[attr-defined]
                lambda sql, c=counter: (seen.append(sql), c._trace(sql))
            )
            assert gate.submit("submit_order", op, EXAMPLE_ORDER).state is State.ACKNOWLEDGED
            counter.stop()
            touching = [s for s in seen if "dispatch_log" in s]
            assert len(touching) == 1 and touching[0].lstrip().upper().startswith("INSERT")
            if gate is plain:
                assert counter.commits == 2
        store.close()
