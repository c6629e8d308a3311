"""Operators settling uncertain rows through the one resolution service (issue 20), and the
reconciler holding them to it: a resolution the venue later contradicts is a divergence."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler
from effectgate._core.intent import Registry
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._core.states import State
from effectgate._core.venue import ReadView, VenueContract
from effectgate._execute.quarantine import QuarantineService
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ResolutionRefused
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import ManualClock


def uncertain(store: Store, *, applied: bool) -> tuple[Gate, PaperVenue, ManualClock]:
    """An uncertain ``submitted`` row: the venue call failed, after applying or before."""
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    ac = replace(submit_order_class(), venue=VenueContract(read_view=ReadView("lagging")))
    gate = Gate(
        store=store,
        registry=Registry([ac, cancel_order_class()]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    venue.fail_next(1, after_apply=applied)
    assert gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER)).state is State.SUBMITTED
    return gate, venue, clock


def resolution(outcome: str, *, venue_id: str | None = None) -> Resolution:
    proof = (
        Proof(EvidenceKind.VENUE_RECORD, reference=venue_id)
        if venue_id
        else Proof(EvidenceKind.OPERATOR_ATTESTATION, note="the venue's support desk said so")
    )
    return Resolution(
        outcome=ResolutionOutcome(outcome), by="alice", proof=proof, reason="support ticket 7"
    )


def sweep(gate: Gate, venue: PaperVenue, store: Store, clock: ManualClock) -> dict[str, int]:
    rec = Reconciler(
        store=store, registry=gate.registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    return rec.run_once().alarms


class TestOperatorSettlesAnUncertainRow:
    """Invariant 10: an uncertain row leaves the queue only by an audited resolution with
    evidence; who and why are in the audit trail."""

    def test_take_over_then_resolve_applied(self, store: Store) -> None:
        _, _, clock = uncertain(store, applied=True)
        service = QuarantineService(store, clock=clock)
        taken = service.take_over("default", "op-1", by="alice", reason="stuck since 09:00")
        assert taken.state is State.QUARANTINED
        row = service.resolve("default", "op-1", resolution("applied", venue_id="V-000001"))
        assert row.state is State.ACKNOWLEDGED and row.venue_id == "V-000001"
        trail = store.audit_entries(scope="default", operation_id="op-1")
        take = [e for e in trail if e.detail.get("quarantine") == "operator-take-over"]
        assert take and take[-1].detail["by"] == "alice"
        last = trail[-1].detail
        assert last["by"] == "alice" and last["resolution"]["reason"] == "support ticket 7"

    def test_an_uncertain_row_cannot_be_released_for_dispatch(self, store: Store) -> None:
        _, _, clock = uncertain(store, applied=False)
        service = QuarantineService(store, clock=clock)
        service.take_over("default", "op-1", by="alice", reason="stuck")
        with pytest.raises(ResolutionRefused, match="never released"):
            service.resolve(
                "default",
                "op-1",
                Resolution(
                    outcome=ResolutionOutcome.RELEASED,
                    by="alice",
                    proof=Proof(EvidenceKind.OPERATOR_ATTESTATION, note="retry it"),
                    reason="retry",
                ),
            )
        assert store.get("default", "op-1").state is State.QUARANTINED  # type: ignore[union-attr]


class TestAContradictedResolutionIsADivergence:
    """Invariant 4/5: the venue, not the operator, has the last word; a resolution the venue
    contradicts alarms as ``resolution-contradicted``, beside the ledger-says divergence."""

    def test_resolved_failed_but_the_venue_has_the_effect(self, store: Store) -> None:
        gate, venue, clock = uncertain(store, applied=True)
        service = QuarantineService(store, clock=clock)
        service.take_over("default", "op-1", by="alice", reason="stuck")
        service.resolve("default", "op-1", resolution("failed"))
        alarms = sweep(gate, venue, store, clock)
        assert alarms == {"ledger-says-failed": 1, "resolution-contradicted": 1}
        kinds = {d.kind for d in store.list_divergences()}
        assert "resolution-contradicted" in kinds
        # Seen once, alarmed once.
        assert sweep(gate, venue, store, clock) == {}

    def test_resolved_applied_but_the_venue_never_had_it(self, store: Store) -> None:
        gate, venue, clock = uncertain(store, applied=False)
        service = QuarantineService(store, clock=clock)
        service.take_over("default", "op-1", by="alice", reason="stuck")
        service.resolve("default", "op-1", resolution("applied"))
        assert sweep(gate, venue, store, clock) == {}  # inside the horizon: nothing yet
        clock.advance(3600)
        assert sweep(gate, venue, store, clock) == {
            "missing-at-venue": 1,
            "resolution-contradicted": 1,
        }

    def test_a_resolution_the_venue_confirms_is_quiet(self, store: Store) -> None:
        gate, venue, clock = uncertain(store, applied=True)
        service = QuarantineService(store, clock=clock)
        service.take_over("default", "op-1", by="alice", reason="stuck")
        service.resolve("default", "op-1", resolution("applied", venue_id="V-000001"))
        clock.advance(3600)
        assert sweep(gate, venue, store, clock) == {}
