"""Operational controls through the Gate and the Operator, on every store.

Kill switches, envelopes and staged authority, the anomaly breaker, shadow mode, approvals and
alerts. Each docstring names the DESIGN.md invariant (or the issue's rule) it checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest

from effectgate import (
    Alert,
    ApprovalError,
    BreakerConfig,
    ControlError,
    Gate,
    LimitPolicy,
    Operator,
    PolicySet,
    State,
    Tier,
    UnknownActionClass,
)
from effectgate._core.intent import ActionClass, EffectClass, Registry
from effectgate._execute.reconciler import Reconciler
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, SubmitOrder, cancel_order_class, notional
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock

INTENT = dict(EXAMPLE_ORDER)  # notional 400 (4 x 100.00)
CANCEL = {
    "intent_version": "1",
    "action": "cancel_order",
    "instrument": "XYZ-PERP",
    "order_ref": "V-000001",
}


def order(qty: str = "4", instrument: str = "XYZ-PERP", **extra: object) -> dict:
    return {**INTENT, "quantity": qty, "instrument": instrument, **extra}


def registry(floor: Tier = Tier.VALIDATE, settlement: float | None = None) -> Registry:
    submit = ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter="paper",
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=60.0,
        key_retention=86400.0,
        value_of=notional,
        target_field="instrument",
        tier_floor=floor,
        settlement_window=settlement,
    )
    return Registry([submit, cancel_order_class()])


def policy() -> PolicySet:
    return PolicySet(
        {
            "submit_order": LimitPolicy(Decimal("100000"), approve_above=Decimal("5000")),
            "cancel_order": LimitPolicy(Decimal("1")),
        }
    )


@dataclass
class World:
    store: Store
    venue: PaperVenue
    adapter: CountingAdapter
    gate: Gate
    operator: Operator
    clock: ManualClock
    alerts: list[Alert]

    def gate_on(self, store: Store) -> Gate:
        """Another executor process: its own store handle, same ledger, same venue."""
        return Gate(
            store=store,
            registry=self.gate.registry,
            adapters={"paper": self.adapter},
            policy=self.gate.policy,
            clock=self.clock,
            breakers=self.gate.breakers,
            alerts=self.alerts.append,
        )


def make_world(
    store: Store, *, floor: Tier = Tier.VALIDATE, breakers: dict[str, BreakerConfig] | None = None
) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    adapter = CountingAdapter(PaperAdapter(venue))
    alerts: list[Alert] = []
    reg = registry(floor)
    gate = Gate(
        store=store,
        registry=reg,
        adapters={"paper": adapter},
        policy=policy(),
        clock=clock,
        breakers=breakers,
        alerts=alerts.append,
    )
    op = Operator(store=store, registry=reg, alerts=alerts.append, clock=clock)
    return World(store, venue, adapter, gate, op, clock, alerts)


@pytest.fixture
def world(store: Store) -> World:
    return make_world(store)


class TestKillSwitch:
    def test_kill_holds_its_class_and_spares_the_others(self, world: World) -> None:
        """Invariant 7: halting submit_order leaves cancel_order working; held rows stay
        validated (not failed), are listed, and nothing reaches the venue."""
        world.operator.kill("submit_order", operator="alice", reason="incident 42")
        held = world.gate.submit("submit_order", "op-1", INTENT)
        assert held.state is State.VALIDATED and "kill switch" in (held.detail or "")
        assert world.gate.submit("cancel_order", "c-1", CANCEL).state is not State.VALIDATED
        assert [r.operation_id for r in world.operator.held("submit_order")] == ["op-1"]
        assert all(r.action == "cancel_order" for r in world.adapter.requests)
        world.operator.release("submit_order", operator="alice")
        assert world.gate.dispatch("op-1").state is State.ACKNOWLEDGED

    def test_switch_flipped_through_one_handle_stops_dispatch_through_another(
        self, store_factory
    ) -> None:
        """Invariant 7 across processes: the switch lives in the store and is read in the
        transaction that would write `submitted` (insert path and validated->submitted)."""
        executor, operator_side = store_factory(), store_factory()
        w = make_world(executor)
        w.gate.propose("submit_order", "op-approved", INTENT)
        Operator(store=operator_side, registry=w.gate.registry).kill(
            "submit_order", operator="alice"
        )
        assert w.gate.submit("submit_order", "op-new", INTENT).state is State.VALIDATED
        assert w.gate.dispatch("op-approved").state is State.VALIDATED
        assert w.adapter.execute_calls == 0

    def test_blast_radius_is_rehearsed_without_flipping(self, world: World) -> None:
        """A rehearsal shows what the switch would hold now and changes nothing."""
        world.gate.propose("submit_order", "op-a", INTENT)
        world.gate.submit("submit_order", "op-b", order("60"))  # needs approval
        world.gate.submit("submit_order", "op-c", INTENT)
        radius = world.operator.blast_radius("submit_order")
        assert not radius.killed and [r.operation_id for r in radius.dispatchable] == ["op-a"]
        assert radius.awaiting_approval == 1 and radius.dispatched_last_hour == 1
        assert not world.store.controls("submit_order").killed

    def test_agent_facing_gate_cannot_flip_a_switch(self, world: World) -> None:
        """Invariant 7: operators only. The Gate exposes no control-changing method."""
        names = {n for n in dir(world.gate) if not n.startswith("_")}
        assert not names & {
            "kill",
            "release",
            "reset_breaker",
            "set_shadow",
            "step",
            "approve",
            "refuse",
            "set_kill",
        }


class TestBadOperatorInput:
    @pytest.mark.parametrize(
        "call",
        [
            lambda op: op.kill("wire_money", operator="alice"),
            lambda op: op.reset_breaker("wire_money", operator="alice"),
            lambda op: op.set_shadow("wire_money", True, operator="alice"),
            lambda op: op.step(
                "wire_money", "max_value", "10", evidence={"n": 1}, operator="alice"
            ),
        ],
    )
    def test_unknown_class_is_a_clear_error_and_changes_nothing(self, world: World, call) -> None:
        with pytest.raises(UnknownActionClass, match="wire_money"):
            call(world.operator)
        assert world.store.list_controls() == [] and list(world.store.iter_audit()) == []

    @pytest.mark.parametrize(
        "axis,value,field",
        [
            ("max_value", 100.5, "max_value"),
            ("max_value", "-3", "max_value"),
            ("max_value", "lots", "max_value"),
            ("exposure", {"limit": "10"}, "exposure"),
            ("exposure", {"limit": "10", "window": -1}, "exposure.window"),
            ("rate", {"limit": 0, "interval": 60}, "rate.limit"),
            ("allowed_targets", "XYZ-PERP", "allowed_targets"),
            ("allowed_targets", ["XYZ-P\u0415RP"], "allowed_targets"),
            ("tier", "validate", "axis"),
            ("blast", "1", "axis"),
        ],
    )
    def test_malformed_envelope_is_refused_and_changes_nothing(
        self, world: World, axis: str, value: object, field: str
    ) -> None:
        with pytest.raises(ControlError) as info:
            world.operator.step(
                "submit_order", axis, value, evidence={"clean": 10}, operator="alice"
            )
        assert info.value.field == field
        assert world.operator.envelope("submit_order").to_json()["max_value"] is None
        assert world.operator.history() == [] and list(world.store.iter_audit()) == []

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"evidence": {}},
            {"evidence": {"n": 1}, "reverse_on": "whenever"},
            {"evidence": {"n": 1}, "operator": "system:breaker"},
            {"evidence": {"n": 1}, "operator": ""},
        ],
    )
    def test_step_needs_evidence_a_condition_and_an_operator(
        self, world: World, kwargs: dict
    ) -> None:
        with pytest.raises(ControlError):
            world.operator.step(
                "submit_order", "max_value", "500", **{"operator": "alice", **kwargs}
            )
        assert world.operator.history() == []


class TestEnvelope:
    def test_per_action_axes_reject_with_the_axis_named(self, world: World) -> None:
        """Envelope ceiling and allowlist refuse out-of-envelope proposals (journalled reason)."""
        world.operator.step(
            "submit_order", "max_value", "500", evidence={"initial": True}, operator="alice"
        )
        world.operator.step(
            "submit_order",
            "allowed_targets",
            ["XYZ-PERP"],
            evidence={"initial": True},
            operator="alice",
        )
        big = world.gate.submit("submit_order", "op-big", order("6"))
        other = world.gate.submit("submit_order", "op-abc", order(instrument="ABC"))
        assert big.state is State.REJECTED and "ceiling 500" in (big.reason or "")
        assert "envelope-" in (big.policy_version or "")
        assert other.state is State.REJECTED and "allowlist" in (other.reason or "")
        assert world.gate.submit("submit_order", "op-ok", INTENT).state is State.ACKNOWLEDGED

    def test_unmeasurable_value_is_refused_by_the_ceiling_and_held_by_exposure(
        self, world: World
    ) -> None:
        """A limit that cannot be checked is not a limit: a market order has no notional.

        The class policy has no value axis here, so only the envelope can refuse it."""
        market = {**INTENT, "order_type": "market"}
        del market["limit_price"]
        world.gate.policy = PolicySet({"submit_order": LimitPolicy()})
        world.operator.step(
            "submit_order",
            "exposure",
            {"limit": "1000", "window": 60},
            evidence={"initial": True},
            operator="alice",
        )
        held = world.gate.submit("submit_order", "op-m1", market)
        assert held.state is State.VALIDATED and "cannot be measured" in (held.detail or "")
        world.operator.step(
            "submit_order", "max_value", "500", evidence={"initial": True}, operator="alice"
        )
        refused = world.gate.submit("submit_order", "op-m2", market)
        assert refused.state is State.REJECTED and "cannot be measured" in (refused.reason or "")
        assert world.adapter.execute_calls == 0

    def test_rate_axis_holds_the_extra_dispatch(self, world: World) -> None:
        world.operator.step(
            "submit_order",
            "rate",
            {"limit": 2, "interval": 60},
            evidence={"initial": True},
            operator="alice",
        )
        states = [world.gate.submit("submit_order", f"op-{i}", INTENT).state for i in range(3)]
        assert states == [State.ACKNOWLEDGED, State.ACKNOWLEDGED, State.VALIDATED]
        world.clock.advance(61)
        assert world.gate.dispatch("op-2").state is State.ACKNOWLEDGED

    def test_exposure_axis_is_a_sliding_window(self, world: World) -> None:
        world.operator.step(
            "submit_order",
            "exposure",
            {"limit": "1000", "window": 60},
            evidence={"initial": True},
            operator="alice",
        )
        a = world.gate.submit("submit_order", "op-a", order("6"))  # 600
        b = world.gate.submit("submit_order", "op-b", order("5"))  # 500: 1100 > 1000
        c = world.gate.submit("submit_order", "op-c", order("4"))  # 400: 1000 fits
        assert (a.state, b.state, c.state) == (
            State.ACKNOWLEDGED,
            State.VALIDATED,
            State.ACKNOWLEDGED,
        )
        assert "exposure" in (b.detail or "")
        world.clock.advance(61)
        assert world.gate.dispatch("op-b").state is State.ACKNOWLEDGED

    def test_concurrent_handles_cannot_exceed_the_aggregate(self, store_factory) -> None:
        """The aggregate holds under concurrency: checked and charged in the store's
        transaction, so eight executors together never exceed it."""
        from concurrent.futures import ThreadPoolExecutor

        w = make_world(store_factory())
        w.operator.step(
            "submit_order",
            "exposure",
            {"limit": "2000", "window": 3600},
            evidence={"initial": True},
            operator="alice",
        )
        gates = [w.gate_on(store_factory()) for _ in range(8)]

        def burst(i: int) -> list[State]:
            return [gates[i].submit("submit_order", f"op-{i}-{j}", INTENT).state for j in range(3)]

        with ThreadPoolExecutor(8) as pool:
            states = [s for batch in pool.map(burst, range(8)) for s in batch]
        assert states.count(State.ACKNOWLEDGED) == 5  # 5 x 400 = 2000
        assert w.venue.effect_count == 5


class TestStagedAuthority:
    def test_steps_are_recorded_and_the_breaker_reverses_them(self, store: Store) -> None:
        """Envelope changes are recorded steps (axis, old, new, evidence, reversal, operator);
        a breaker trip returns the envelope to where it was, and that is recorded too."""
        w = make_world(store, breakers={"submit_order": BreakerConfig(window=60, max_repeats=2)})
        w.operator.step(
            "submit_order",
            "max_value",
            "1000",
            evidence={"initial": True},
            operator="alice",
            reverse_on="manual",
        )
        start = w.clock()
        w.gate.submit("submit_order", "clean-1", order("1"))
        w.gate.submit("submit_order", "clean-2", order("2"))
        w.clock.advance(10)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=start, until=w.clock()
        )
        w.operator.step("submit_order", "max_value", "2000", evidence=proof, operator="bob")
        w.operator.step("submit_order", "max_value", "4000", evidence=proof, operator="bob")
        assert w.operator.envelope("submit_order").max_value == Decimal("4000")
        for i in range(3):  # the same payload under three ids trips `repeats`
            w.gate.submit("submit_order", f"dup-{i}", INTENT)
        assert w.operator.envelope("submit_order").max_value == Decimal("1000")
        history = w.operator.history("submit_order")
        assert [(h.kind, h.old, h.new) for h in history] == [
            ("step", None, "1000"),
            ("step", "1000", "2000"),
            ("step", "2000", "4000"),
            ("reversal", "4000", "2000"),
            ("reversal", "2000", "1000"),
        ]
        assert history[1].evidence == {**proof, "verified_at": w.clock()}
        assert history[1].evidence["max_value_seen"] == "200"
        assert history[3].operator == "system:breaker" and history[3].reverses == 3
        kinds = [e.kind for e in store.iter_audit()]
        assert kinds.count("authority_step") == 3 and kinds.count("authority_reversed") == 2

    def test_evidence_never_lowers_a_tier_floor(self, store: Store) -> None:
        """A class whose floor is `approve` stays behind approval however large its envelope
        grows; the tier is not an axis a step can move."""
        w = make_world(store, floor=Tier.APPROVE)
        w.operator.step(
            "submit_order",
            "max_value",
            "1000000",
            evidence={"clean_actions": 10_000},
            operator="alice",
        )
        with pytest.raises(ControlError, match="floor never moves"):
            w.operator.step(
                "submit_order",
                "tier",
                "validate",
                evidence={"clean_actions": 10_000},
                operator="alice",
            )
        row = w.gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.AWAITING_APPROVAL and row.tier == "approve"
        assert w.adapter.execute_calls == 0


class TestBreaker:
    def trip_world(self, store: Store, **cfg: object) -> World:
        return make_world(store, breakers={"submit_order": BreakerConfig(window=60, **cfg)})

    def assert_open_and_staying(self, w: World, signal: str) -> None:
        ctl = w.store.controls("submit_order")
        assert ctl.breaker_open and signal in (ctl.breaker_reason or "")
        assert [a.kind for a in w.alerts] == ["breaker-tripped"]
        w.clock.advance(3600)  # it never closes by itself
        later = w.gate.submit("submit_order", "later", order("1"))
        assert later.state is State.VALIDATED and "breaker open" in (later.detail or "")
        assert w.gate.submit("cancel_order", "c-1", CANCEL).state is not State.VALIDATED
        w.operator.reset_breaker("submit_order", operator="alice", reason="reviewed")
        assert w.gate.dispatch("later").state is State.ACKNOWLEDGED

    def test_rejection_rate_trips(self, store: Store) -> None:
        w = self.trip_world(store, max_rejection_rate=0.5, min_samples=4)
        for i, qty in enumerate(["4", "4000", "4000", "4000"]):  # 3/4 over the 100000 limit
            w.gate.submit("submit_order", f"op-{i}", order(qty))
        self.assert_open_and_staying(w, "rejection_rate")

    def test_value_per_window_trips(self, store: Store) -> None:
        w = self.trip_world(store, max_value=Decimal("1000"))
        states = [w.gate.submit("submit_order", f"op-{i}", INTENT).state for i in range(3)]
        assert states == [State.ACKNOWLEDGED, State.ACKNOWLEDGED, State.VALIDATED]
        self.assert_open_and_staying(w, "value_rate")

    def test_same_fingerprint_under_many_ids_trips(self, store: Store) -> None:
        w = self.trip_world(store, max_repeats=2)
        for i in range(3):
            w.gate.submit("submit_order", f"op-{i}", INTENT)
        self.assert_open_and_staying(w, "repeats")

    def test_never_seen_targets_trip(self, store: Store) -> None:
        w = self.trip_world(store, max_new_targets=2)
        for i, target in enumerate(["AAA", "BBB", "AAA", "CCC"]):
            w.gate.submit("submit_order", f"op-{i}", order(instrument=target))
        self.assert_open_and_staying(w, "new_targets")

    def test_trip_is_logged_at_error(self, store: Store, caplog: pytest.LogCaptureFixture) -> None:
        w = self.trip_world(store, max_repeats=0)
        w.gate.submit("submit_order", "op-0", INTENT)
        assert any(r.levelname == "ERROR" and "breaker" in r.message for r in caplog.records)

    def test_open_breaker_seen_by_another_handle(self, store_factory) -> None:
        """Invariant 7: an open breaker blocks dispatch in every process."""
        a = make_world(store_factory(), breakers={"submit_order": BreakerConfig(max_repeats=0)})
        b = a.gate_on(store_factory())
        a.gate.propose("submit_order", "held-elsewhere", order("1"))
        a.gate.submit("submit_order", "op-0", INTENT)
        assert b.dispatch("held-elsewhere").state is State.VALIDATED


class TestShadow:
    def test_shadow_mode_never_calls_the_venue(self, world: World) -> None:
        """Rows end `shadowed` with the request that would have been sent; zero venue calls."""
        world.operator.set_shadow("submit_order", True, operator="alice")
        row = world.gate.submit("submit_order", "op-1", INTENT, correlation_id="ticket-1")
        proposed = world.gate.propose("submit_order", "op-2", order("2"))
        assert world.gate.dispatch("op-2", correlation_id="ticket-2").state is State.SHADOWED
        assert row.state is State.SHADOWED and proposed.state is State.VALIDATED
        assert world.adapter.execute_calls == 0 and world.venue.calls == 0
        (shadowed,) = [
            e
            for e in world.store.iter_audit()
            if e.operation_id == "op-1" and e.detail.get("state") == "shadowed"
        ]
        assert shadowed.detail["request"]["effect"]["quantity"] == "4"

    def test_report_gives_the_disagreement_rate_and_cases(self, world: World) -> None:
        """The agent against the incumbent: a different effect disagrees; neither acting (the
        incumbent did nothing, the agent proposed nothing) agrees (tests/test_shadow.py has
        the rest)."""
        op = world.operator
        op.set_shadow("submit_order", True, operator="alice")
        for i, qty in enumerate(["4", "2", "3"]):
            world.gate.submit("submit_order", f"op-{i}", order(qty), correlation_id=f"t-{i}")
        op.feed_incumbent("t-0", "submit_order", order("4"), source="desk")  # agrees
        op.feed_incumbent("t-1", "submit_order", order("5"), source="desk")  # differs
        op.feed_incumbent("t-9", "submit_order", None, source="desk")  # neither acted
        report = op.shadow_report("submit_order")
        assert report.compared == 3 and len(report.agreed) == 2
        assert report.disagreement_rate == pytest.approx(1 / 3)
        assert [p.correlation_id for p in report.disagreed] == ["t-1"]
        assert report.agreed_inaction == 1
        assert [p.correlation_id for p in report.awaiting_incumbent] == ["t-2"]

    def test_toggle_keeps_history(self, world: World) -> None:
        op = world.operator
        op.set_shadow("submit_order", True, operator="alice")
        world.gate.submit("submit_order", "op-s", INTENT)
        op.set_shadow("submit_order", False, operator="alice")
        assert world.gate.submit("submit_order", "op-live", INTENT).state is State.ACKNOWLEDGED
        op.set_shadow("submit_order", True, operator="alice")
        assert [p.operation_id for p in op.shadow_report().awaiting_incumbent] == ["op-s"]
        assert world.gate.get("op-s").state is State.SHADOWED


class TestApprovals:
    def big(self, w: World, op: str, qty: str = "60", **kw: object) -> str:
        row = w.gate.submit("submit_order", op, order(qty), **kw)  # 6000 > 5000: approve
        assert row.state is State.AWAITING_APPROVAL
        return row.fingerprint

    def test_approval_of_payload_a_never_releases_payload_b(self, world: World) -> None:
        """Approvals are bound to (operation id, fingerprint)."""
        fa = self.big(world, "op-a", "60")
        fb = self.big(world, "op-b", "70")
        with pytest.raises(ApprovalError) as info:
            world.operator.approve("op-b", fingerprint=fa, approver="alice")
        assert info.value.reason == "fingerprint_mismatch"
        assert world.gate.get("op-b").state is State.AWAITING_APPROVAL
        outcome = world.operator.approve("op-a", fingerprint=fa, approver="alice")
        assert outcome.complete and outcome.operation.state is State.VALIDATED
        assert world.gate.get("op-b").state is State.AWAITING_APPROVAL and fb != fa
        assert world.gate.dispatch("op-a").state is State.ACKNOWLEDGED
        assert world.gate.dispatch("op-b").state is State.AWAITING_APPROVAL
        assert world.adapter.execute_calls == 1

    def test_proposer_cannot_approve_its_own_action(self, world: World) -> None:
        fp = self.big(world, "op-a", principal="agent-7")
        with pytest.raises(ApprovalError) as info:
            world.operator.approve("op-a", fingerprint=fp, approver="agent-7")
        assert info.value.reason == "self_approval"
        assert world.gate.get("op-a").state is State.AWAITING_APPROVAL

    def test_proposed_by_cannot_veto_an_approver(self, world: World) -> None:
        """Audit fields never influence a decision (docs/design.md, Trust; issue 11 item 6):
        an intent whose proposed_by names an approver does not stop that approver."""
        intent = order("60", proposed_by={"model": "alice", "session": "bob"})
        row = world.gate.submit("submit_order", "op-v", intent, principal="agent-7")
        assert row.state is State.AWAITING_APPROVAL
        out = world.operator.approve("op-v", fingerprint=row.fingerprint, approver="alice")
        assert out.complete and out.operation.state is State.VALIDATED

    def test_multi_approve_needs_distinct_approvers(self, store: Store) -> None:
        w = make_world(store, floor=Tier.MULTI_APPROVE)
        row = w.gate.submit("submit_order", "op-m", INTENT)
        assert row.state is State.AWAITING_APPROVAL and row.tier == "multi_approve"
        first = w.operator.approve("op-m", fingerprint=row.fingerprint, approver="alice")
        assert not first.complete and first.operation.state is State.AWAITING_APPROVAL
        with pytest.raises(ApprovalError) as info:
            w.operator.approve("op-m", fingerprint=row.fingerprint, approver="alice")
        assert info.value.reason == "duplicate_approver"
        done = w.operator.approve("op-m", fingerprint=row.fingerprint, approver="bob")
        assert done.complete and done.approvals == 2
        assert [a.approver for a in store.list_approvals("default", "op-m")] == ["alice", "bob"]

    def test_refusal_denies(self, world: World) -> None:
        fp = self.big(world, "op-r")
        outcome = world.operator.refuse(
            "op-r", fingerprint=fp, approver="alice", reason="too large"
        )
        assert outcome.operation.state is State.DENIED
        assert world.gate.dispatch("op-r").state is State.DENIED
        with pytest.raises(ApprovalError):
            world.operator.approve("op-r", fingerprint=fp, approver="bob")

    def test_expired_approval_denies(self, world: World) -> None:
        fp = self.big(world, "op-x")
        world.clock.advance(86400 + 1)
        with pytest.raises(ApprovalError) as info:
            world.operator.approve("op-x", fingerprint=fp, approver="alice")
        assert info.value.reason == "expired"
        assert world.gate.get("op-x").state is State.DENIED
        fp2 = self.big(world, "op-y")
        world.clock.advance(86400 + 1)
        assert [r.operation_id for r in world.operator.expire_approvals()] == ["op-y"]
        assert fp2 and world.gate.get("op-y").state is State.DENIED

    def test_approvals_are_audited_with_the_approver(self, world: World) -> None:
        fp = self.big(world, "op-a")
        world.operator.approve("op-a", fingerprint=fp, approver="alice")
        events = [e for e in world.store.iter_audit() if e.operation_id == "op-a"]
        (approval,) = [e for e in events if e.kind == "approval"]
        assert approval.detail["approver"] == "alice" and approval.detail["fingerprint"] == fp
        assert events[-1].detail["state"] == "validated"


class TestAlerts:
    def test_orphans_and_duplicates_alert_separately(self, store: Store) -> None:
        """Maintenance rules: orphans > 0 and duplicate effects > 0 each page (once); the
        duplicate also trips the class's breaker, which pages once too."""
        clock = ManualClock()
        venue = PaperVenue(clock=clock, honour_key=False)
        alerts: list[Alert] = []
        reg = registry()
        gate = Gate(
            store=store,
            registry=reg,
            adapters={"paper": PaperAdapter(venue)},
            policy=policy(),
            clock=clock,
        )
        gate.submit("submit_order", "op-1", INTENT)
        venue.inject_record("default:op-1")
        venue.inject_record("default:op-ghost")
        rec = Reconciler(
            store=store,
            registry=reg,
            adapters={"paper": PaperAdapter(venue)},
            clock=clock,
            alerts=alerts.append,
        )
        rec.run_once()
        rec.run_once()
        assert sorted(a.kind for a in alerts) == ["breaker-tripped", "duplicate-effect", "orphan"]
        assert sorted(a.kind for a in store.list_alerts()) == [
            "breaker-tripped",
            "duplicate-effect",
            "orphan",
        ]

    def test_uncertain_past_settlement_window_alerts(self, store: Store) -> None:
        from effectgate._execute.maintenance import check_maintenance

        clock = ManualClock()
        reg = registry(settlement=30.0)

        class Silent(PaperAdapter):
            def execute(self, request, *, timeout):  # the venue never answers
                raise TimeoutError

        gate = Gate(
            store=store,
            registry=reg,
            adapters={"paper": Silent(PaperVenue())},
            policy=policy(),
            clock=clock,
        )
        assert gate.submit("submit_order", "op-u", INTENT).state is State.SUBMITTED
        alerts: list[Alert] = []
        assert check_maintenance(store, reg, alerts.append, now=clock()) == []
        clock.advance(31)
        check_maintenance(store, reg, alerts.append, now=clock())
        check_maintenance(store, reg, alerts.append, now=clock())
        assert [(a.kind, a.subject) for a in alerts] == [("uncertain-aged", "default:op-u")]

    def test_horizon_not_well_inside_retention_alerts(self, store: Store) -> None:
        from effectgate._execute.maintenance import check_maintenance

        reg = Registry(
            [
                ActionClass(
                    name="submit_order",
                    model=SubmitOrder,
                    adapter="paper",
                    effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
                    visibility_horizon=60.0,
                    key_retention=1000.0,
                    settlement_window=900.0,
                )
            ]
        )
        alerts: list[Alert] = []
        check_maintenance(store, reg, alerts.append, now=1.0)
        assert [a.kind for a in alerts] == ["horizon-retention"]
        assert "settlement_window" in alerts[0].message

    def test_a_failing_sink_never_breaks_dispatch(self, store: Store) -> None:
        def broken(alert: Alert) -> None:
            raise RuntimeError("pager down")

        w = make_world(store, breakers={"submit_order": BreakerConfig(max_repeats=0)})
        w.gate.alerts = broken
        assert w.gate.submit("submit_order", "op-0", INTENT).state is State.VALIDATED
        assert store.controls("submit_order").breaker_open
