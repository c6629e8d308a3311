"""The budget arithmetic as values (issue 14, docs/budgets.md): property tests of saturation,
overflow, refunds and conservation, plus the run budget's limits. Invariant 12 (budgets and
reservations never overdraw) rests on these functions; the store applies them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectgate._core.budgets import (
    DIMENSIONS,
    INT64_MAX,
    Resources,
    RunBudget,
    RunUsage,
    charge_tokens,
    check_step,
    check_tool,
    output_limit,
    total,
)
from effectgate._core.reservations import (
    MAX_DEPTH,
    MAX_RESERVATIONS,
    OWN_SLOT,
    PlanPolicy,
    Reservation,
    ReservationKind,
    ReservationRequest,
    Settlement,
    account,
    admit,
    closing_charge,
    settle_charge,
)
from effectgate.errors import (
    BudgetExceeded,
    InvalidBudget,
    ReservationConflict,
    SettlementOutOfOrder,
)

DIGEST = "a" * 64
amount = st.integers(min_value=0, max_value=INT64_MAX)
small = st.integers(min_value=0, max_value=1000)
resources = st.builds(Resources, *(amount for _ in DIMENSIONS))
small_resources = st.builds(Resources, *(small for _ in DIMENSIONS))
known = st.frozensets(st.sampled_from(DIMENSIONS))


def policy(limits: Resources | None = None, **kw: object) -> PlanPolicy:
    return PlanPolicy(
        plan_id="plan-1",
        plan_digest=DIGEST,
        limits=limits or Resources(100, 10_000, 50, 10, 2, 0),
        deadline=1000.0,
        token_only=True,
        **kw,  # type: ignore[arg-type]
    )


def request(
    rid: str, kind: str = "leaf", parent: str | None = None, alloc: Resources | None = None
) -> ReservationRequest:
    return ReservationRequest(
        reservation_id=rid,
        plan_id="plan-1",
        plan_digest=DIGEST,
        task_id=f"task-{rid}",
        owner_ref=f"attempt-{rid}",
        kind=ReservationKind(kind),
        allocation=alloc or Resources(steps=1, tokens=100, tool_calls=1, fan_out=1),
        deadline=900.0,
        parent_id=parent,
    )


class TestSaturatingArithmetic:
    @given(resources, resources)
    def test_a_sum_saturates_and_says_so_instead_of_wrapping(
        self, a: Resources, b: Resources
    ) -> None:
        got, overflow = a.add(b)
        for d in DIMENSIONS:
            exact = getattr(a, d) + getattr(b, d)
            assert getattr(got, d) == min(exact, INT64_MAX)
        assert overflow == any(getattr(a, d) + getattr(b, d) > INT64_MAX for d in DIMENSIONS)

    @given(resources, resources, resources)
    def test_overflow_refuses_admission_even_at_the_largest_limit(
        self, limit: Resources, used: Resources, want: Resources
    ) -> None:
        short = limit.first_short(used, want)
        fits = all(getattr(used, d) + getattr(want, d) <= getattr(limit, d) for d in DIMENSIONS)
        assert (short is None) == fits
        big = Resources(*(INT64_MAX for _ in DIMENSIONS))
        assert big.first_short(big, Resources(steps=1)) == "steps"

    def test_negative_and_out_of_range_amounts_are_refused(self) -> None:
        with pytest.raises(InvalidBudget, match="negative"):
            Resources(tokens=-1)
        with pytest.raises(InvalidBudget, match="64-bit"):
            Resources(tokens=INT64_MAX + 1)
        with pytest.raises(InvalidBudget, match="integer"):
            Resources.from_dict({"tokens": 1.5})
        with pytest.raises(InvalidBudget, match="unknown"):
            Resources.from_dict({"gold": 1})


class TestSettlementRefundsOnlyKnownUnused:
    @given(small_resources, small_resources, known, st.none() | small_resources)
    def test_charge_per_dimension(
        self, alloc: Resources, usage: Resources, k: frozenset[str], minimum: Resources | None
    ) -> None:
        req = request("l1", alloc=alloc)
        s = Settlement("l1", req.digest(), usage=usage, known=k, minimum=minimum)
        charge = settle_charge(req, s)
        for d in DIMENSIONS:
            got = getattr(charge, d)
            if d == "fan_out":
                assert got >= 1, "every reservation consumes a fan-out slot"
            if d in k:
                assert got == max(getattr(usage, d), 1 if d == "fan_out" else 0)
            else:
                # Unknown use is never refunded below the allocation or the observed minimum.
                floor = max(getattr(alloc, d), getattr(minimum, d) if minimum else 0)
                assert got == max(floor, 1 if d == "fan_out" else 0)

    def test_an_overrun_is_kept_not_clamped(self) -> None:
        req = request("l1", alloc=Resources(tokens=100, fan_out=1))
        s = Settlement("l1", req.digest(), usage=Resources(tokens=250), known=frozenset(DIMENSIONS))
        assert settle_charge(req, s).tokens == 250

    def test_a_branch_cannot_settle_from_usage(self) -> None:
        req = request("b1", "branch")
        with pytest.raises(InvalidBudget):
            settle_charge(req, Settlement("b1", req.digest(), usage=Resources(steps=1)))


@st.composite
def trees(draw: st.DrawFn) -> list[Reservation]:
    """A random account: branches and leaves up to a few levels, some settled."""
    out: list[Reservation] = []
    branches: list[tuple[str, int]] = [("", 0)]
    for i in range(draw(st.integers(min_value=1, max_value=12))):
        parent, depth = draw(st.sampled_from(branches))
        kind = draw(st.sampled_from(["leaf", "branch"]))
        rid = f"r{i}"
        req = request(rid, kind, parent or None, draw(small_resources))
        out.append(Reservation(req, depth + 1, float(i)))
        if kind == "branch":
            branches.append((rid, depth + 1))
    # Settle leaves bottom-up, then close branches whose children all settled.
    settled: dict[str, Reservation] = {}
    for r in out:
        if r.request.kind is ReservationKind.LEAF and draw(st.booleans()):
            s = Settlement(
                r.request.reservation_id,
                r.request.digest(),
                usage=draw(small_resources),
                known=draw(known),
            )
            settled[r.request.reservation_id] = replace(r, charge=settle_charge(r.request, s))
    return [settled.get(r.request.reservation_id, r) for r in out]


class TestConservation:
    @given(trees())
    @settings(max_examples=150)
    def test_the_root_shows_the_sum_of_its_top_level_holds_and_closing_keeps_it(
        self, rs: list[Reservation]
    ) -> None:
        p = policy(Resources(*(10**9 for _ in DIMENSIONS)), value_bound=True)
        snap = account(p, rs)
        assert snap.used == total([n.holds for n in snap.roots])[0]
        assert snap.reservations == len(rs)
        # Every reservation holds at least one fan-out slot, so the root holds at least as many
        # slots as there are top-level reservations.
        assert snap.used.fan_out >= len(snap.roots)
        # Settling everything bottom-up: the root then equals the sum of stored charges.
        stored = {r.request.reservation_id: r for r in rs}
        for r in sorted(rs, key=lambda r: -r.depth):
            cur = stored[r.request.reservation_id]
            if cur.settled:
                continue
            snap = account(p, stored.values())
            if r.request.kind is ReservationKind.LEAF:
                s = Settlement(cur.request.reservation_id, cur.request.digest(), known=frozenset())
            else:
                s = Settlement(cur.request.reservation_id, cur.request.digest(), close_branch=True)
            stored[cur.request.reservation_id] = replace(cur, charge=closing_charge(snap, cur, s))
        final = account(p, stored.values())
        tops = [r.charge for r in stored.values() if r.request.parent_id is None]
        assert final.used == total([c for c in tops if c is not None])[0]
        for r in stored.values():
            if r.request.kind is ReservationKind.BRANCH:
                kids = [
                    k.charge
                    for k in stored.values()
                    if k.request.parent_id == r.request.reservation_id
                ]
                assert r.charge == total([OWN_SLOT, *(k for k in kids if k is not None)])[0]


class TestAdmission:
    def snap(self, rs: list[Reservation], limits: Resources | None = None):  # type: ignore[no-untyped-def]
        return account(policy(limits), rs)

    def test_both_the_root_and_the_immediate_parent_must_have_capacity(self) -> None:
        branch = Reservation(request("b", "branch", alloc=Resources(steps=5, fan_out=3)), 1, 0.0)
        leaf = Reservation(request("l", parent="b", alloc=Resources(steps=4, fan_out=1)), 2, 0.0)
        snap = self.snap([branch, leaf], Resources(steps=100, fan_out=10))
        with pytest.raises(BudgetExceeded) as e:
            admit(snap.policy, snap, request("x", parent="b", alloc=Resources(steps=2)), 1.0)
        assert e.value.dimension == "steps" and "branch 'b'" in e.value.message
        # The branch's third slot is its own: two children fit, a third has no fan-out left.
        admit(snap.policy, snap, request("y", parent="b", alloc=Resources(steps=1)), 1.0)
        y = Reservation(request("y", parent="b", alloc=Resources(steps=1)), 2, 0.0)
        full = self.snap([branch, leaf, y], Resources(steps=100, fan_out=10))
        with pytest.raises(BudgetExceeded) as e:
            admit(full.policy, full, request("z", parent="b", alloc=Resources()), 1.0)
        assert e.value.dimension == "fan_out"
        root = self.snap([branch], Resources(steps=6, fan_out=10))
        with pytest.raises(BudgetExceeded) as e:
            admit(root.policy, root, request("z", alloc=Resources(steps=2)), 1.0)
        assert e.value.dimension == "steps" and "plan" in e.value.message

    def test_depth_is_bounded_exactly_at_sixteen(self) -> None:
        rs, parent = [], None
        for d in range(1, MAX_DEPTH):
            r = Reservation(request(f"b{d}", "branch", parent, Resources(fan_out=100)), d, 0.0)
            rs.append(r)
            parent = f"b{d}"
        snap = self.snap(rs, Resources(fan_out=1000))
        assert (
            admit(snap.policy, snap, request("at", "branch", parent, Resources(fan_out=9)), 1.0)
            == MAX_DEPTH
        )
        rs.append(
            Reservation(request("at", "branch", parent, Resources(fan_out=9)), MAX_DEPTH, 0.0)
        )
        snap = self.snap(rs, Resources(fan_out=1000))
        with pytest.raises(InvalidBudget, match="depth 17"):
            admit(snap.policy, snap, request("past", parent="at"), 1.0)

    def test_count_is_bounded_exactly_at_1024(self) -> None:
        big = Resources(steps=10, tokens=1000, tool_calls=10, fan_out=10_000)
        rs = [Reservation(request(f"l{i}", alloc=Resources()), 1, 0.0) for i in range(1023)]
        snap = self.snap(rs, big)
        admit(snap.policy, snap, request("last"), 1.0)  # the 1,024th
        rs.append(Reservation(request("last"), 1, 0.0))
        snap = self.snap(rs, big)
        assert snap.reservations == MAX_RESERVATIONS
        with pytest.raises(BudgetExceeded) as e:
            admit(snap.policy, snap, request("one-past"), 1.0)
        assert e.value.dimension == "reservations"

    def test_a_closed_branch_or_a_leaf_takes_no_children(self) -> None:
        closed = Reservation(request("b", "branch"), 1, 0.0, charge=Resources(fan_out=1))
        leaf = Reservation(request("l"), 1, 0.0)
        snap = self.snap([closed, leaf])
        with pytest.raises(SettlementOutOfOrder):
            admit(snap.policy, snap, request("x", parent="b"), 1.0)
        with pytest.raises(InvalidBudget, match="leaf"):
            admit(snap.policy, snap, request("x", parent="l"), 1.0)

    def test_pins_deadline_and_money(self) -> None:
        snap = self.snap([])
        with pytest.raises(InvalidBudget, match="digest"):
            admit(snap.policy, snap, replace(request("x"), plan_digest="b" * 64), 1.0)
        with pytest.raises(BudgetExceeded) as e:
            admit(snap.policy, snap, request("x"), 1000.0)
        assert e.value.dimension == "deadline"
        with pytest.raises(InvalidBudget, match="price table"):
            PlanPolicy("p", DIGEST, Resources(), 10.0)
        money = PlanPolicy(
            "plan-1",
            DIGEST,
            Resources(money_micros=5, fan_out=5),
            1000.0,
            pricing_revision="prices-7",
        )
        snap = account(money, [])
        with pytest.raises(InvalidBudget, match="money-bound"):
            admit(money, snap, request("x", alloc=Resources(fan_out=1)), 1.0)
        ok = replace(
            request("x", alloc=Resources(fan_out=1, money_micros=5)),
            money_bound=True,
            pricing_revision="prices-7",
        )
        admit(money, snap, ok, 1.0)
        over = replace(ok, allocation=Resources(fan_out=1, money_micros=6))
        with pytest.raises(BudgetExceeded) as e:
            admit(money, snap, over, 1.0)
        assert e.value.dimension == "money_micros"

    def test_branch_settlement_order(self) -> None:
        branch = Reservation(request("b", "branch", alloc=Resources(fan_out=3)), 1, 0.0)
        leaf = Reservation(request("l", parent="b"), 2, 0.0)
        snap = self.snap([branch, leaf])
        close = Settlement("b", branch.request.digest(), close_branch=True)
        with pytest.raises(SettlementOutOfOrder, match="unsettled children"):
            closing_charge(snap, branch, close)
        with pytest.raises(ReservationConflict):
            closing_charge(snap, branch, Settlement("b", "c" * 64, close_branch=True))


class TestRunBudget:
    def test_zero_disables_and_negative_is_refused(self) -> None:
        assert check_step(RunBudget(), RunUsage(steps=10**9, tokens=10**12), 1e12) is None
        with pytest.raises(InvalidBudget, match="negative"):
            RunBudget(max_steps=-1)
        with pytest.raises(InvalidBudget):
            RunBudget.from_dict({"max_steps": 1, "max_gold": 2})

    def test_tool_slots_are_apart_from_steps(self) -> None:
        b = RunBudget(max_steps=3, max_tool_calls=2)
        u = RunUsage(steps=1, tool_calls=2)
        assert check_tool(b, u, 0.0) == "tool_calls"
        assert check_step(b, u, 0.0) is None, "a run out of tools can still answer"
        assert check_step(b, replace(u, steps=3), 0.0) == "steps"
        assert check_tool(RunBudget(deadline=5.0), RunUsage(), 5.0) == "deadline"

    @given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 20_000))
    def test_output_cap_is_narrowed_to_what_remains(
        self, limit: int, configured: int, used: int
    ) -> None:
        cap = output_limit(RunBudget(max_tokens=limit), configured, RunUsage(tokens=used))
        if not limit:
            assert cap == configured
        else:
            remaining = max(limit - used, 0)
            assert cap == (remaining if configured == 0 else min(configured, remaining))

    @given(
        st.integers(0, 1000),
        st.integers(0, 2000),
        st.one_of(
            st.none(), st.integers(-5, 5000), st.text(max_size=3), st.booleans(), st.floats()
        ),
    )
    def test_missing_usage_is_pessimistic_and_reported_usage_unclamped(
        self, limit: int, used: int, reported: object
    ) -> None:
        b = RunBudget(max_tokens=limit)
        before = RunUsage(tokens=used, reported_tokens=used)
        after = charge_tokens(before, reported, b)
        assert after.tokens >= before.tokens, "missing accounting can never reset the allowance"
        valid = isinstance(reported, int) and not isinstance(reported, bool) and reported >= 0
        if valid:
            assert after.tokens == used + reported and after.reported_tokens == used + reported
            assert not after.estimated
        else:
            assert after.estimated and after.reported_tokens == used
            assert after.tokens == (max(used, limit) if limit else used)
            if limit:
                assert check_step(b, after, 0.0) == "tokens"
