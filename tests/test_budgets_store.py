"""The budgets role's contract on both stores (issue 14, docs/budgets.md): run budgets, tool
slots consumed at bound admission, plan accounts, reservations and settlement. Refusals write
one audit line and no row; every change writes a chained audit entry (invariant 8)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from effectgate import Gate, State, verify_entries
from effectgate._core.budgets import DIMENSIONS, Resources, RunBudget
from effectgate._core.reservations import (
    PlanPolicy,
    ReservationKind,
    ReservationRequest,
    Settlement,
)
from effectgate._execute.budgets import budget_dispatch_check
from effectgate.errors import (
    BudgetExceeded,
    InvalidBudget,
    ReservationConflict,
    ReservationNotFound,
    SettlementOutOfOrder,
)
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from runkit import RUN, SCOPE, gate_for, tool_call

H = "harness-1"
DIGEST = "d" * 64
ALL = frozenset(DIMENSIONS)


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.iter_audit()]


def refusals(store: Store, kind: str = "budget_refused") -> list[dict[str, Any]]:
    return [e.detail for e in store.iter_audit() if e.kind == kind]


def plan(**kw: Any) -> PlanPolicy:
    limits = kw.pop("limits", Resources(steps=20, tokens=2000, tool_calls=10, fan_out=5, replans=1))
    return PlanPolicy("plan-1", DIGEST, limits, deadline=1000.0, token_only=True, **kw)


def req(
    rid: str, kind: str = "leaf", parent: str | None = None, **alloc: int
) -> ReservationRequest:
    return ReservationRequest(
        reservation_id=rid,
        plan_id="plan-1",
        plan_digest=DIGEST,
        task_id=f"task-{rid}",
        owner_ref=f"attempt-{rid}",
        kind=ReservationKind(kind),
        allocation=Resources(**(alloc or {"steps": 2, "tokens": 200, "tool_calls": 1})),
        deadline=900.0,
        parent_id=parent,
    )


class TestRunBudget:
    def test_set_once_replay_and_conflict(self, store: Store) -> None:
        b = RunBudget(max_steps=3, max_tokens=100, max_tool_calls=2, deadline=50.0)
        state, new = store.set_run_budget(SCOPE, RUN, b, now=1.0, actor=H)
        assert new and state.budget == b and state.usage.steps == 0
        again, new_again = store.set_run_budget(SCOPE, RUN, b, now=2.0, actor=H)
        assert not new_again and again == state
        with pytest.raises(ReservationConflict):
            store.set_run_budget(SCOPE, RUN, replace(b, max_steps=4), now=3.0, actor=H)
        assert kinds(store).count("run_budget_set") == 1
        assert refusals(store)[-1]["error"]["code"] == "reservation_conflict"
        assert verify_entries(store.audit_entries(limit=1000), heads=store.audit_heads()).ok

    def test_steps_are_charged_until_the_limit_then_refused_naming_it(self, store: Store) -> None:
        store.set_run_budget(SCOPE, RUN, RunBudget(max_steps=2, max_tokens=100), now=1.0, actor=H)
        _, cap = store.begin_run_step(SCOPE, RUN, now=2.0, configured_output=500)
        assert cap == 100, "the provider's output cap is narrowed to the tokens left"
        store.record_run_tokens(SCOPE, RUN, 70, now=3.0)
        _, cap = store.begin_run_step(SCOPE, RUN, now=4.0, configured_output=500)
        assert cap == 30
        with pytest.raises(BudgetExceeded) as e:
            store.begin_run_step(SCOPE, RUN, now=5.0)
        assert e.value.dimension == "steps"
        with pytest.raises(InvalidBudget, match="negative"):
            store.begin_run_step(SCOPE, RUN, now=5.0, configured_output=-1)
        assert refusals(store)[-1]["error"]["code"] == "invalid_budget"
        state = store.run_budget(SCOPE, RUN)
        assert state is not None and state.usage.steps == 2, "a refusal charges nothing"
        assert refusals(store)[-2]["error"]["dimension"] == "steps"

    def test_missing_usage_is_charged_pessimistically_and_overruns_are_kept(
        self, store: Store
    ) -> None:
        store.set_run_budget(SCOPE, RUN, RunBudget(max_tokens=100), now=1.0, actor=H)
        state = store.record_run_tokens(SCOPE, RUN, 130, now=2.0)
        assert state.usage.tokens == 130 and state.usage.reported_tokens == 130
        entry = [e for e in store.iter_audit() if e.kind == "run_tokens_charged"][-1]
        assert entry.detail["reported"] == 130 and entry.detail["overrun"] is True
        other = "run-2"
        store.set_run_budget(SCOPE, other, RunBudget(max_tokens=100), now=1.0, actor=H)
        state = store.record_run_tokens(SCOPE, other, None, now=2.0)
        assert state.usage.tokens == 100 and state.usage.estimated
        state = store.record_run_tokens(SCOPE, other, 5, now=3.0)
        assert state.usage.tokens == 105, "missing usage never resets the allowance"
        with pytest.raises(BudgetExceeded) as e:
            store.begin_run_step(SCOPE, other, now=4.0)
        assert e.value.dimension == "tokens"

    def test_a_run_without_a_budget_is_refused_by_name(self, store: Store) -> None:
        with pytest.raises(ReservationNotFound):
            store.begin_run_step(SCOPE, "nobody", now=1.0)
        assert store.run_budget(SCOPE, "nobody") is None


class TestToolSlotsAtBoundAdmission:
    """One tool-call slot per operation id at its first admission, in the journal's transaction;
    an over-budget proposal writes an audit line and no row (invariant 12)."""

    def test_slots_are_consumed_once_per_operation_and_refused_past_the_limit(
        self, store: Store
    ) -> None:
        store.set_run_budget(SCOPE, RUN, RunBudget(max_tool_calls=2), now=0.5, actor=H)
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, adapter = gate_for(store)
        for op in ("op-1", "op-2"):
            gate.submit("submit_order", op, EXAMPLE_ORDER, run_call=call.ref)
        # A replay consumes nothing.
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)
        assert row.state is State.ACKNOWLEDGED
        state = store.run_budget(SCOPE, RUN)
        assert state is not None and state.usage.tool_calls == 2
        with pytest.raises(BudgetExceeded) as e:
            gate.submit("submit_order", "op-3", EXAMPLE_ORDER, run_call=call.ref)
        assert e.value.code == "budget_exceeded" and e.value.dimension == "tool_calls"
        assert store.get("default", "op-3") is None, "a refused proposal writes no row"
        assert store.run_binding(SCOPE, "op-3") is None
        refused = refusals(store, "run_refused")[-1]
        assert refused["operation_id"] == "op-3"
        assert refused["error"] == {
            "code": "budget_exceeded",
            "message": e.value.message,
            "dimension": "tool_calls",
        }
        assert adapter.execute_calls == 2
        # The same id may be proposed again: it is refused the same way, never a conflict.
        with pytest.raises(BudgetExceeded):
            gate.submit("submit_order", "op-3", EXAMPLE_ORDER, run_call=call.ref)
        assert kinds(store).count("budget_tool_slot") == 2
        assert verify_entries(store.audit_entries(limit=1000), heads=store.audit_heads()).ok

    def test_a_run_without_a_budget_admits_as_before(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, _ = gate_for(store)
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)
        assert row.state is State.ACKNOWLEDGED and "budget_tool_slot" not in kinds(store)

    def test_a_row_past_its_runs_deadline_is_refused_at_dispatch(self, store: Store) -> None:
        """The budget check runs inside the dispatch transaction (the pre-dispatch pipeline's
        in-transaction stage): past the run's deadline the row is rejected, nothing is sent."""
        store.set_run_budget(SCOPE, RUN, RunBudget(deadline=1_000_050.0), now=0.5, actor=H)
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        clock = ManualClock(1_000_000.0)
        plain, adapter = gate_for(store, clock)
        gate = Gate(
            store=store,
            registry=plain.registry,
            adapters=plain.adapters,
            policy=plain.policy,
            clock=clock,
            admission_checks=[budget_dispatch_check],
        )
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref, dispatch=False)
        assert row.state is State.VALIDATED
        clock.advance(50.0)
        out = gate.dispatch("op-1", scope=SCOPE)
        assert out.state is State.REJECTED and "deadline" in (out.detail or "")
        assert adapter.execute_calls == 0


class TestPlanAccount:
    def test_open_once_replay_and_conflict(self, store: Store) -> None:
        p = plan()
        assert store.open_plan_account(SCOPE, p, now=1.0, actor=H) == (p, True)
        assert store.open_plan_account(SCOPE, p, now=2.0, actor=H) == (p, False)
        with pytest.raises(ReservationConflict):
            store.open_plan_account(SCOPE, replace(p, deadline=2000.0), now=3.0, actor=H)
        assert store.list_plan_accounts(SCOPE) == [(SCOPE, "plan-1")]
        with pytest.raises(ReservationNotFound):
            store.plan_account(SCOPE, "plan-2")

    def test_reserve_is_idempotent_and_a_changed_request_conflicts(self, store: Store) -> None:
        store.open_plan_account(SCOPE, plan(), now=1.0, actor=H)
        r, new = store.reserve(SCOPE, req("l1"), now=2.0, actor=H)
        assert new and r.depth == 1
        again, new_again = store.reserve(SCOPE, req("l1"), now=3.0, actor=H)
        assert not new_again and again.created_at == 2.0
        with pytest.raises(ReservationConflict):
            store.reserve(SCOPE, req("l1", steps=3), now=4.0, actor=H)
        assert store.plan_account(SCOPE, "plan-1").reservations == 1
        assert kinds(store).count("reservation_admitted") == 1

    def test_over_capacity_is_refused_with_an_audit_line_and_no_row(self, store: Store) -> None:
        store.open_plan_account(SCOPE, plan(), now=1.0, actor=H)
        for i in range(5):
            store.reserve(SCOPE, req(f"l{i}", steps=1, fan_out=1), now=2.0, actor=H)
        with pytest.raises(BudgetExceeded) as e:
            store.reserve(SCOPE, req("l5", steps=1), now=3.0, actor=H)
        assert e.value.dimension == "fan_out"
        snap = store.plan_account(SCOPE, "plan-1")
        assert snap.reservations == 5 and snap.used.fan_out == 5
        assert snap.remaining()["fan_out"] == 0 and snap.remaining()["money_micros"] is None
        assert refusals(store)[-1]["reservation_id"] == "l5"

    def test_two_sub_agents_settle_and_the_branch_closes_last(self, store: Store) -> None:
        """The worked example of docs/budgets.md."""
        store.open_plan_account(SCOPE, plan(), now=1.0, actor=H)
        store.reserve(
            SCOPE,
            req("team", "branch", steps=10, tokens=1200, tool_calls=6, fan_out=3),
            now=2.0,
            actor=H,
        )
        a = req("agent-a", parent="team", steps=4, tokens=500, tool_calls=3, fan_out=1)
        b = req("agent-b", parent="team", steps=4, tokens=500, tool_calls=3, fan_out=1)
        store.reserve(SCOPE, a, now=3.0, actor=H)
        store.reserve(SCOPE, b, now=3.0, actor=H)
        with pytest.raises(BudgetExceeded) as e:
            store.reserve(SCOPE, req("agent-c", parent="team", steps=1), now=3.5, actor=H)
        assert e.value.dimension == "fan_out"
        close = Settlement(
            "team",
            req("team", "branch", steps=10, tokens=1200, tool_calls=6, fan_out=3).digest(),
            close_branch=True,
        )
        with pytest.raises(SettlementOutOfOrder):
            store.settle(SCOPE, "plan-1", close, now=4.0, actor=H)
        # A: all known, under its allocation (refunded). B: tokens unknown, overran steps.
        sa = Settlement("agent-a", a.digest(), usage=Resources(2, 300, 2, 1, 0, 0), known=ALL)
        sb = Settlement(
            "agent-b",
            b.digest(),
            usage=Resources(6, 0, 3, 1, 0, 0),
            known=ALL - {"tokens"},
            minimum=Resources(tokens=650),
        )
        ra, _ = store.settle(SCOPE, "plan-1", sa, now=5.0, actor=H)
        rb, _ = store.settle(SCOPE, "plan-1", sb, now=6.0, actor=H)
        assert ra.charge == Resources(2, 300, 2, 1, 0, 0)
        assert rb.charge == Resources(6, 650, 3, 1, 0, 0)
        # B's overrun reaches the root at once, while the branch is still open.
        snap = store.plan_account(SCOPE, "plan-1")
        assert snap.used.tokens == 1200 and snap.used.steps == 10
        rt, new = store.settle(SCOPE, "plan-1", close, now=7.0, actor=H)
        assert new and rt.charge == Resources(8, 950, 5, 3, 0, 0)
        assert rt.receipt_digest and len(rt.receipt_digest) == 64
        snap = store.plan_account(SCOPE, "plan-1")
        assert snap.used == rt.charge, "the root shows the sum of stored charges"
        assert store.settle(SCOPE, "plan-1", close, now=8.0, actor=H)[1] is False
        with pytest.raises(ReservationConflict):
            store.settle(SCOPE, "plan-1", replace(sa, receipt="other"), now=9.0, actor=H)
        tree = snap.to_dict()["tree"]
        assert [c["reservation_id"] for c in tree[0]["children"]] == ["agent-a", "agent-b"]
        assert verify_entries(store.audit_entries(limit=1000), heads=store.audit_heads()).ok

    def test_a_crash_between_admission_and_settlement_leaves_it_charged(
        self, store_factory: Any
    ) -> None:
        first = store_factory()
        first.open_plan_account(SCOPE, plan(), now=1.0, actor=H)
        leaf = req("l1", steps=5, tokens=500, tool_calls=2)
        first.reserve(SCOPE, leaf, now=2.0, actor=H)
        first.close()  # the executor dies holding the reservation
        second = store_factory()
        snap = second.plan_account(SCOPE, "plan-1")
        assert snap.used == Resources(5, 500, 2, 1, 0, 0)
        # Past its lease nothing is refunded: a settlement with unknown use keeps it all.
        with pytest.raises(BudgetExceeded) as e:
            second.check_reservation(SCOPE, "plan-1", "l1", now=900.0)
        assert e.value.dimension == "deadline"
        r, _ = second.settle(SCOPE, "plan-1", Settlement("l1", leaf.digest()), now=950.0, actor=H)
        assert r.charge == Resources(5, 500, 2, 1, 0, 0)

    def test_bad_requests_change_nothing(self, store: Store) -> None:
        store.open_plan_account(SCOPE, plan(), now=1.0, actor=H)
        with pytest.raises(ReservationNotFound):
            store.reserve(SCOPE, req("x", parent="ghost"), now=2.0, actor=H)
        with pytest.raises(InvalidBudget):
            store.reserve(SCOPE, replace(req("y"), plan_digest="e" * 64), now=2.0, actor=H)
        with pytest.raises(ReservationNotFound):
            store.settle(SCOPE, "plan-1", Settlement("zz", DIGEST), now=3.0, actor=H)
        assert store.plan_account(SCOPE, "plan-1").reservations == 0
        assert [r["error"]["code"] for r in refusals(store)] == [
            "reservation_not_found",
            "invalid_budget",
            "reservation_not_found",
        ]
