"""Delegated authority (issue 18): grants, containment per axis, transitive revocation, both
axes needed, and the grant authoriser as a pre-dispatch stage, on every store engine.

The invariant checked throughout is docs/authority.md's "both axes": no action is dispatched
unless the policy allows it AND a live grant of the proposing principal (whole chain live)
covers it; a refusal is the last-moment move ``validated -> rejected``, never a dispatch.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet
from effectgate._core.grants import GrantSpec, check_contained, grant_refusal, parse_spec
from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._evidence.audit import verify_store
from effectgate._execute.authority import (
    acting_principal,
    approver_revocation_check,
    grant_authoriser,
)
from effectgate._execute.predispatch import DispatchContext, Refusal
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ControlError, GrantNotFound, GrantWider
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store.base import Operation
from effectgate.store.roles import Grants, Store
from effectgate.testing import ManualClock

NOW = 1000.0


def spec(**over: object) -> GrantSpec:
    raw: dict[str, object] = {
        "actions": ["submit_order"],
        "targets": ["XYZ-PERP", "ABC-PERP"],
        "environments": ["production"],
        "scope": "default",
        "expires_in": 3600,
        "max_value": "1000",
        "budget": "5000",
        "hops": 3,
    }
    raw.update(over)
    return parse_spec(raw, now=NOW)


class TestSpecInput:
    def test_a_grant_needs_actions_and_an_expiry(self) -> None:
        with pytest.raises(ControlError, match="actions"):
            parse_spec({"expires_in": 60}, now=NOW)
        with pytest.raises(ControlError, match="expiry"):
            parse_spec({"actions": ["submit_order"]}, now=NOW)

    def test_bad_axes_are_refused_by_name(self) -> None:
        for field, value in (
            ("max_value", "-1"),
            ("budget", "lots"),
            ("hops", 99),
            ("targets", []),
            ("actions", ["*", "submit_order"]),
            ("colour", "red"),
        ):
            with pytest.raises(ControlError) as err:
                spec(**{field: value})
            assert err.value.field == field

    def test_break_glass_is_short_and_never_delegable(self) -> None:
        with pytest.raises(ControlError, match="within"):
            spec(break_glass=True, hops=0, expires_in=7200)
        with pytest.raises(ControlError, match="cannot be delegated"):
            spec(break_glass=True, hops=1, expires_in=600)
        assert not spec(break_glass=True, hops=0, expires_in=600).delegable


class TestContainment:
    """A delegation is never wider than its parent: each axis is refused by name."""

    @pytest.mark.parametrize(
        ("axis", "over"),
        [
            ("actions", {"actions": ["submit_order", "cancel_order"]}),
            ("actions", {"actions": "*"}),
            ("targets", {"targets": ["XYZ-PERP", "OTHER"]}),
            ("environments", {"environments": ["production", "staging"]}),
            ("scope", {"scope": "*"}),
            ("max_value", {"max_value": "1000.01"}),
            ("max_value", {"max_value": None}),
            ("budget", {"budget": "5001"}),
            ("expires_at", {"expires_in": 3601}),
            ("hops", {"hops": 3}),
        ],
    )
    def test_each_wider_axis_is_named(
        self, store: Store, axis: str, over: dict[str, object]
    ) -> None:
        root = store.create_grant("alice", spec(), created_by="ops", now=NOW)
        with pytest.raises(GrantWider) as err:
            store.delegate_grant(
                root.grant_id, "bob", spec(**{"hops": 2, **over}), by="alice", now=NOW
            )
        assert err.value.field == axis
        assert [g.holder for g in store.list_grants()] == ["alice"]  # nothing written

    def test_an_equal_or_narrower_delegation_is_accepted(self, store: Store) -> None:
        root = store.create_grant("alice", spec(), created_by="ops", now=NOW)
        child = store.delegate_grant(
            root.grant_id,
            "bob",
            spec(hops=2, targets=["XYZ-PERP"], budget="10"),
            by="alice",
            now=NOW,
        )
        assert (child.parent_id, child.depth, child.created_by) == (root.grant_id, 1, "alice")

    def test_only_the_holder_delegates_and_only_a_delegable_grant(self, store: Store) -> None:
        root = store.create_grant("alice", spec(hops=0), created_by="ops", now=NOW)
        with pytest.raises(GrantWider) as err:
            store.delegate_grant(root.grant_id, "bob", spec(hops=0), by="mallory", now=NOW)
        assert err.value.field == "holder"
        with pytest.raises(GrantWider) as err:
            store.delegate_grant(root.grant_id, "bob", spec(hops=0), by="alice", now=NOW)
        assert err.value.field == "delegable"

    def test_hops_are_bounded(self, store: Store) -> None:
        g = store.create_grant("h0", spec(hops=2), created_by="ops", now=NOW)
        g = store.delegate_grant(g.grant_id, "h1", spec(hops=1), by="h0", now=NOW)
        g = store.delegate_grant(g.grant_id, "h2", spec(hops=0), by="h1", now=NOW)
        with pytest.raises(GrantWider) as err:
            store.delegate_grant(g.grant_id, "h3", spec(hops=0), by="h2", now=NOW)
        assert err.value.field == "delegable"

    def test_a_revoked_parent_cannot_delegate(self, store: Store) -> None:
        root = store.create_grant("alice", spec(), created_by="ops", now=NOW)
        store.revoke_grants(grant_id=root.grant_id, by="ops", now=NOW + 1)
        with pytest.raises(GrantWider) as err:
            store.delegate_grant(root.grant_id, "bob", spec(hops=0), by="alice", now=NOW + 2)
        assert err.value.field == "parent"

    def test_pure_check_matches(self) -> None:
        from effectgate._core.grants import Grant

        parent = Grant("g", "alice", spec(), "ops", NOW)
        check_contained(parent, spec(hops=2), now=NOW)
        with pytest.raises(GrantWider):
            check_contained(parent, spec(hops=2, break_glass=False, budget=None), now=NOW)


class TestTransitiveRevocation:
    def chain(self, store: Store) -> list[str]:
        ids = [store.create_grant("h0", spec(), created_by="ops", now=NOW).grant_id]
        for hop in (1, 2, 3):
            ids.append(
                store.delegate_grant(
                    ids[-1], f"h{hop}", spec(hops=3 - hop), by=f"h{hop - 1}", now=NOW
                ).grant_id
            )
        return ids

    def test_revoking_a_grant_revokes_three_hops_beneath(self, store: Store) -> None:
        assert isinstance(store, Grants)
        ids = self.chain(store)
        gone = store.revoke_grants(grant_id=ids[0], by="ops", now=NOW + 1, reason="left")
        assert sorted(g.grant_id for g in gone) == sorted(ids)
        assert store.list_grants() == []
        assert all(g.revoked_by == "ops" for g in store.list_grants(include_revoked=True))
        entries = [e for e in store.iter_audit() if e.kind == "grants_revoked"]
        assert len(entries) == 1 and sorted(entries[0].detail["grant_ids"]) == sorted(ids)
        assert verify_store(store).ok

    def test_revoke_by_holder_and_by_creator(self, store: Store) -> None:
        ids = self.chain(store)
        gone = store.revoke_grants(holder="h2", by="ops", now=NOW + 1)
        assert sorted(g.grant_id for g in gone) == sorted(ids[2:])
        assert [g.holder for g in store.list_grants()] == ["h0", "h1"]
        gone = store.revoke_grants(created_by="h0", by="ops", now=NOW + 2)
        assert [g.grant_id for g in gone] == [ids[1]]
        assert [g.holder for g in store.list_grants()] == ["h0"]

    def test_nothing_live_to_revoke_is_an_error(self, store: Store) -> None:
        with pytest.raises(GrantNotFound):
            store.revoke_grants(holder="nobody", by="ops", now=NOW)
        with pytest.raises(ControlError):
            store.revoke_grants(holder="a", grant_id="b", by="ops", now=NOW)

    def test_a_child_of_a_revoked_chain_never_counts(self, store: Store) -> None:
        ids = self.chain(store)
        assert [g.grant_id for g in store.live_grants_for("h3", NOW)] == [ids[3]]
        # Revoke the middle row directly (as a race with a delegation could leave it).
        store._run(  # type: ignore[attr-defined]
            lambda tx, _: tx.rows(
                "UPDATE grants SET revoked_at = ? WHERE grant_id = ? RETURNING 1", (NOW, ids[1])
            ),
            "test",
        )
        assert store.live_grants_for("h3", NOW + 1) == []

    def test_expiry_stops_a_grant(self, store: Store) -> None:
        store.create_grant("alice", spec(expires_in=10), created_by="ops", now=NOW)
        assert len(store.live_grants_for("alice", NOW + 9)) == 1
        assert store.live_grants_for("alice", NOW + 10) == []


class TestBreakGlass:
    def test_break_glass_is_alerted_and_audited(self, store: Store) -> None:
        g = store.create_grant(
            "oncall", spec(break_glass=True, hops=0, expires_in=900), created_by="ops", now=NOW
        )
        [alert] = [a for a in store.list_alerts() if a.kind == "break-glass"]
        assert alert.subject == f"grant:{g.grant_id}" and "oncall" in alert.message
        assert any(e.kind == "grant_break_glass" for e in store.iter_audit())


# --- the grant authoriser, through the pre-dispatch stage shape ------------------------------


def make_gate(store: Store, clock: ManualClock, venue: PaperVenue | None = None) -> Gate:
    return Gate(
        store=store,
        registry=Registry([submit_order_class(), cancel_order_class()]),
        adapters={"paper": PaperAdapter(venue or PaperVenue(clock=clock))},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )


def dispatch_with(
    gate: Gate, row: Operation, stages: list, environment: str = "production"
) -> Operation:  # type: ignore[type-arg]
    """Dispatch through the gate's own pipeline with ``stages`` as its approval stages."""
    gate.pipeline = replace(gate.pipeline, approved=tuple(stages))
    return gate.dispatch(row.operation_id, scope=row.scope)


def order(quantity: str = "4", instrument: str = "XYZ-PERP") -> dict[str, object]:
    return {**EXAMPLE_ORDER, "quantity": quantity, "instrument": instrument}


class TestBothAxes:
    """Invariant (docs/authority.md, "both axes"): policy AND grant; the stricter wins."""

    def setup(self, store: Store) -> tuple[Gate, ManualClock]:
        clock = ManualClock(NOW)
        return make_gate(store, clock), clock

    def test_the_proposer_comes_from_the_credential(self, store: Store) -> None:
        gate, _ = self.setup(store)
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        assert acting_principal(store, row) == "alice"
        anon = gate.submit("submit_order", "op-2", order(), dispatch=False)
        assert acting_principal(store, anon) is None

    def test_grant_covers_policy_allows_dispatch(self, store: Store) -> None:
        gate, _ = self.setup(store)
        store.create_grant("alice", spec(), created_by="ops", now=NOW)
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        done = dispatch_with(gate, row, [grant_authoriser(environment="production")])
        assert done.state is State.ACKNOWLEDGED

    @pytest.mark.parametrize(
        ("code", "over", "intent", "env"),
        [
            ("grant_missing", None, order(), "production"),
            ("grant_target", {}, order(instrument="OTHER-PERP"), "production"),
            ("grant_value", {"max_value": "100"}, order(), "production"),
            ("grant_environment", {}, order(), "staging"),
            ("grant_action", {"actions": ["cancel_order"]}, order(), "production"),
        ],
    )
    def test_no_covering_grant_rejects_at_the_last_moment(
        self,
        store: Store,
        code: str,
        over: dict[str, object] | None,
        intent: dict[str, object],
        env: str,
    ) -> None:
        clock = ManualClock(NOW)
        venue = PaperVenue(clock=clock)
        gate = make_gate(store, clock, venue)
        if over is not None:
            store.create_grant("alice", spec(**over), created_by="ops", now=NOW)
        row = gate.submit("submit_order", "op-1", intent, principal="alice", dispatch=False)
        assert row.state is State.VALIDATED  # policy allowed it
        done = dispatch_with(gate, row, [grant_authoriser(environment=env)])
        assert done.state is State.REJECTED and done.detail is not None
        assert done.detail.startswith(code)
        assert venue.effect_count == 0

    def test_policy_denies_even_with_a_grant(self, store: Store) -> None:
        gate, _ = self.setup(store)
        store.create_grant("alice", spec(max_value=None, budget=None), created_by="ops", now=NOW)
        row = gate.submit("submit_order", "op-1", order(quantity="20"), principal="alice")
        assert row.state is State.REJECTED  # 2000 > the policy's 1000: policy is an axis too

    def test_the_budget_reads_the_record_of_dispatched_value(self, store: Store) -> None:
        gate, clock = self.setup(store)
        store.create_grant("alice", spec(budget="1000"), created_by="ops", now=NOW)
        stage = grant_authoriser(environment="production")
        for n in (1, 2):  # 400 + 400 of 1000
            row = gate.submit("submit_order", f"op-{n}", order(), principal="alice", dispatch=False)
            assert dispatch_with(gate, row, [stage]).state is State.ACKNOWLEDGED
            clock.advance(1)
        assert store.dispatched_micros("alice", frozenset({"submit_order"}), NOW) == 800_000_000
        row = gate.submit("submit_order", "op-3", order(), principal="alice", dispatch=False)
        done = dispatch_with(gate, row, [stage])
        assert done.state is State.REJECTED and (done.detail or "").startswith("grant_budget")
        # Another principal's dispatches do not count against alice's budget.
        assert store.dispatched_micros("bob", frozenset({"submit_order"}), NOW) == 0

    def test_revoking_a_grant_stops_the_next_dispatch(self, store: Store) -> None:
        gate, _ = self.setup(store)
        g = store.create_grant("alice", spec(), created_by="ops", now=NOW)
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        store.revoke_grants(grant_id=g.grant_id, by="ops", now=NOW)
        done = dispatch_with(gate, row, [grant_authoriser(environment="production")])
        assert done.state is State.REJECTED

    def test_a_revoked_principal_holds_nothing(self, store: Store) -> None:
        gate, _ = self.setup(store)
        store.create_grant("alice", spec(), created_by="ops", now=NOW)
        revoked = {"alice"}
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        stage = grant_authoriser(environment="production", revoked=revoked.__contains__)
        done = dispatch_with(gate, row, [stage])
        assert done.state is State.REJECTED and (done.detail or "").startswith("principal_revoked")

    def test_a_revoked_creator_voids_the_grant(self, store: Store) -> None:
        gate, _ = self.setup(store)
        store.create_grant("alice", spec(), created_by="carol", now=NOW)
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        stage = grant_authoriser(environment="production", revoked={"carol"}.__contains__)
        assert dispatch_with(gate, row, [stage]).state is State.REJECTED


class TestRevokedApprover:
    def test_an_approval_by_a_revoked_approver_asks_again(self, store: Store) -> None:
        clock = ManualClock(NOW)
        gate = Gate(
            store=store,
            registry=Registry([submit_order_class(), cancel_order_class()]),
            adapters={"paper": PaperAdapter(PaperVenue(clock=clock))},
            policy=PolicySet(
                {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("100"))}
            ),
            clock=clock,
        )
        row = gate.submit("submit_order", "op-1", order(), principal="alice", dispatch=False)
        assert row.state is State.AWAITING_APPROVAL
        store.decide_approval(
            "default", "op-1", approver="bob", fingerprint=row.fingerprint, approve=True,
            reason=None, now=NOW,
        )  # fmt: skip
        row = store.get("default", "op-1")
        assert row is not None and row.state is State.VALIDATED
        check = approver_revocation_check({"bob"}.__contains__)
        done = dispatch_with(gate, row, [check])
        assert done.state is State.AWAITING_APPROVAL
        assert store.list_approvals("default", "op-1") == []
        # With bob live, the same approval passes.
        assert (
            approver_revocation_check(set().__contains__)(
                DispatchContext(row, gate.registry.get("submit_order"), store, NOW, None)
            )
            is None
        )


def test_refusal_shape() -> None:
    r = Refusal("reject", "grant_missing", "x")
    assert (r.move, r.code) == ("reject", "grant_missing")
    assert grant_refusal(
        __import__("effectgate._core.grants", fromlist=["Grant"]).Grant("g", "a", spec(), "o", NOW),
        action="submit_order", scope="default", target="XYZ-PERP", value=Decimal("1"),
        environment="production", now=NOW, used_micros=0,
    ) is None  # fmt: skip
