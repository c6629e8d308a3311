"""Effects the boundary never sent are alarms, and no row aborts a pass (both stores)."""

from __future__ import annotations

from decimal import Decimal

from effectgate import Alert, Gate, LimitPolicy, Operator, PolicySet, Reconciler, State
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock

BIG = {**EXAMPLE_ORDER, "quantity": "1000"}  # over the 1000 limit: rejected by policy


class Rig:
    def __init__(
        self, store: Store, *, flush_every: int = 500, trip_on_duplicate: bool = True
    ) -> None:
        self.store, self.clock = store, ManualClock()
        self.venue = PaperVenue(clock=self.clock)
        registry = default_registry()
        self.gate = Gate(
            store=store,
            registry=registry,
            adapters={"paper": PaperAdapter(self.venue)},
            clock=self.clock,
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        )
        self.alerts: list[Alert] = []
        self.rec = Reconciler(
            store=store,
            registry=registry,
            adapters={"paper": PaperAdapter(self.venue)},
            clock=self.clock,
            alerts=self.alerts.append,
            flush_every=flush_every,
            trip_on_duplicate=trip_on_duplicate,
        )
        self.operator = Operator(store=store, registry=registry, clock=self.clock)


class TestNeverDispatchedKeys:
    def test_a_record_under_a_rejected_key_pages_like_an_orphan(self, store: Store) -> None:
        """Invariant 5: an effect under a key the boundary refused was made outside it."""
        rig = Rig(store)
        assert rig.gate.submit("submit_order", "op-r", BIG).state is State.REJECTED
        rig.venue.inject_record("default:op-r")
        report = rig.rec.sweep()
        assert report.alarms == {"ledger-says-rejected": 1}
        assert [a.kind for a in rig.alerts] == ["ledger-says-rejected"]
        assert "never dispatched" in rig.alerts[0].message

    def test_a_record_under_a_held_key_pages(self, store: Store) -> None:
        """Invariant 7: a row the kill switch holds was never sent; a record under it alarms."""
        rig = Rig(store)
        rig.operator.kill("submit_order", operator="alice", reason="drill")
        row = rig.gate.submit("submit_order", "op-h", EXAMPLE_ORDER)
        assert row.state is State.VALIDATED and (row.detail or "").startswith("held:")
        rig.venue.inject_record("default:op-h")
        rig.rec.sweep()
        assert [a.kind for a in rig.alerts] == ["ledger-says-validated"]

    def test_two_records_under_a_rejected_key_do_not_abort_the_pass(self, store: Store) -> None:
        """Invariants 5 and 10: the terminal row cannot be quarantined; that is recorded as a
        divergence, and the repairs buffered before it and the rows after it still land."""
        rig = Rig(store)
        rig.venue.fail_next(1, after_apply=True)  # applied, but the receipt is lost
        assert rig.gate.submit("submit_order", "op-a", EXAMPLE_ORDER).state is State.SUBMITTED
        assert rig.gate.submit("submit_order", "op-m", BIG).state is State.REJECTED
        rig.venue.set_honour_key(False)
        rig.venue.inject_record("default:op-m")
        rig.venue.inject_record("default:op-m")
        rig.venue.fail_next(1, after_apply=True)
        rig.venue.set_honour_key(True)
        assert rig.gate.submit("submit_order", "op-z", EXAMPLE_ORDER).state is State.SUBMITTED
        report = rig.rec.sweep()
        kinds = {d[0] for d in report.new_divergences}
        assert {"duplicate-effect", "ledger-says-rejected", "unapplied-quarantined"} <= kinds
        # op-a's confirmation was buffered before the bad row, op-z's after it: both written.
        assert store.get("default", "op-a").state is State.ACKNOWLEDGED  # type: ignore[union-attr]
        assert store.get("default", "op-z").state is State.ACKNOWLEDGED  # type: ignore[union-attr]
        assert store.get("default", "op-m").state is State.REJECTED  # type: ignore[union-attr]
        assert report.confirmed == 2

    def test_a_written_off_row_that_appears_later_pages(self, store: Store) -> None:
        """Invariant 4: absence past the horizon was written off; its late effect pages."""
        rig = Rig(store)
        rig.venue.set_read_lag(10_000)
        rig.venue.fail_next(1, after_apply=True)
        rig.gate.submit("submit_order", "op-w", EXAMPLE_ORDER)
        rig.clock.advance(61)
        rig.rec.sweep()
        assert store.get("default", "op-w").state is State.FAILED  # type: ignore[union-attr]
        rig.venue.set_read_lag(0)
        rig.rec.sweep()
        assert "ledger-says-failed" in [a.kind for a in rig.alerts]


class TestDuplicateTripsTheBreaker:
    def test_a_duplicate_on_an_acknowledged_row_opens_the_breaker(self, store: Store) -> None:
        """Invariants 1 and 7: the venue ignored the key, so nothing more of the class is sent
        until an operator has looked."""
        rig = Rig(store)
        rig.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        rig.venue.set_honour_key(False)
        rig.venue.inject_record("default:op-1")
        rig.rec.sweep()
        assert store.controls("submit_order").breaker_open
        assert {"duplicate-effect", "breaker-tripped"} <= {a.kind for a in rig.alerts}
        held = rig.gate.submit("submit_order", "op-2", EXAMPLE_ORDER)
        assert held.state is State.VALIDATED and "breaker open" in (held.detail or "")
        calls = rig.venue.calls
        rig.rec.sweep()  # seen again: no second trip, no second alert
        assert [a.kind for a in rig.alerts].count("breaker-tripped") == 1
        assert rig.venue.calls == calls

    def test_tripping_can_be_turned_off(self, store: Store) -> None:
        rig = Rig(store, trip_on_duplicate=False)
        rig.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        rig.venue.set_honour_key(False)
        rig.venue.inject_record("default:op-1")
        rig.rec.sweep()
        assert not store.controls("submit_order").breaker_open
        assert [a.kind for a in rig.alerts] == ["duplicate-effect"]
