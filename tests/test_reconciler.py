"""The sweep: bounded paging on both sides, grouping across page boundaries, alarms once."""

from __future__ import annotations

from decimal import Decimal

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler, State
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock


def build(store: Store, page_size: int, honour_key: bool = True):
    clock = ManualClock()
    venue = PaperVenue(clock=clock, honour_key=honour_key)
    registry = default_registry()
    gate = Gate(
        store=store,
        registry=registry,
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    counting = CountingAdapter(PaperAdapter(venue))
    rec = Reconciler(
        store=store,
        registry=registry,
        adapters={"paper": counting},
        clock=clock,
        page_size=page_size,
    )
    return gate, venue, rec, counting, clock


class TestBoundedSweep:
    def test_sweep_pages_both_sides_and_sees_everything(self, store: Store) -> None:
        """Invariant 5 in bounded memory: small pages still see every record exactly once."""
        gate, _, rec, counting, _ = build(store, page_size=7)
        for i in range(50):
            gate.submit("submit_order", f"op-{i:03d}", EXAMPLE_ORDER)
        report = rec.sweep()
        assert report.ledger_rows == 50 and report.venue_records == 50
        assert counting.records_calls >= 50 // 7
        assert report.new_divergences == []

    def test_duplicate_straddling_a_page_boundary_is_reported(self, store: Store) -> None:
        """Invariant 5: records of one key split across two venue pages are still grouped."""
        gate, venue, rec, _, _ = build(store, page_size=3)
        for i in range(5):
            gate.submit("submit_order", f"op-{i}", EXAMPLE_ORDER)
        # op-2 is the third record (end of page one); a second effect lands at page two's start.
        venue.set_honour_key(False)
        venue.inject_record("default:op-2")
        report = rec.sweep()
        assert [(d[0], d[1]) for d in report.new_divergences] == [
            ("duplicate-effect", "default:op-2")
        ]

    def test_mixed_divergences_in_one_pass(self, store: Store) -> None:
        """Orphans, duplicates, late appearances and write-offs in one merge-join."""
        gate, venue, rec, _, clock = build(store, page_size=4)
        for i in range(10):
            gate.submit("submit_order", f"op-{i}", EXAMPLE_ORDER)
        venue.inject_record("default:op-5")  # duplicate
        venue.inject_record("default:zz-orphan")  # orphan after every ledger key
        venue.inject_record("aaa:orphan")  # orphan before every ledger key
        venue.fail_next(1, after_apply=False)
        gate.submit("submit_order", "op-lost", EXAMPLE_ORDER)  # uncertain, never reached venue
        clock.advance(61)
        report = rec.sweep()
        kinds = sorted((d[0], d[1]) for d in report.new_divergences)
        assert kinds == [
            ("duplicate-effect", "default:op-5"),
            ("orphan", "aaa:orphan"),
            ("orphan", "default:zz-orphan"),
        ]
        assert report.written_off == 1
        assert gate.get("op-lost").state is State.FAILED
        assert rec.sweep().new_divergences == []  # once each

    def test_acknowledged_row_missing_at_venue_past_horizon(self, store: Store) -> None:
        """A receipt the venue later cannot show is reported, not silently believed."""
        gate, _, _, _, clock = build(store, page_size=10)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        rec_other = Reconciler(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue(clock=clock))},
            clock=clock,
        )
        assert rec_other.sweep().new_divergences == []  # inside the horizon: no verdict yet
        clock.advance(61)
        kinds = [d[0] for d in rec_other.sweep().new_divergences]
        assert kinds == ["missing-at-venue"]


class TestProgress:
    def test_progress_reports_rows_swept_per_page(self, store: Store) -> None:
        """The CLI's progress bar: cumulative ledger rows, once per page, ending at the total."""
        gate, _, rec, _, _ = build(store, page_size=4)
        for i in range(10):
            gate.submit("submit_order", f"op-{i}", EXAMPLE_ORDER)
        seen: list[int] = []
        rec.progress = seen.append
        rec.sweep()
        assert seen == [4, 8, 10]


class TestLiveTraffic:
    def test_actions_during_a_sweep_raise_no_false_alarms(self, store: Store) -> None:
        """Invariant 5 without crying wolf: rows journalled or dispatched after the sweep read
        their ledger page are judged as they stand now, not reported as orphans or
        ledger-says-<state>."""
        from effectgate._execute.adapter import VenueRecord

        gate, venue, _, _, clock = build(store, page_size=100)
        gate.submit("submit_order", "op-a", EXAMPLE_ORDER)
        gate.propose("submit_order", "op-c", EXAMPLE_ORDER)  # validated, not yet sent

        class Racing(PaperAdapter):
            fired = False

            def records(
                self, after: VenueRecord | None, limit: int, *, timeout: float = 10.0
            ) -> list[VenueRecord]:
                if not Racing.fired:  # the ledger page is already read: traffic lands now
                    Racing.fired = True
                    gate.submit("submit_order", "op-b", EXAMPLE_ORDER)
                    gate.dispatch("op-c")
                return super().records(after, limit, timeout=timeout)

        rec = Reconciler(
            store=store,
            registry=default_registry(),
            adapters={"paper": Racing(venue)},
            clock=clock,
            page_size=100,
        )
        report = rec.sweep()
        assert Racing.fired and report.new_divergences == []
        assert store.list_divergences() == []
        assert gate.get("op-b").state is State.ACKNOWLEDGED
        assert gate.get("op-c").state is State.ACKNOWLEDGED

    def test_a_real_orphan_is_still_reported_after_the_recheck(self, store: Store) -> None:
        gate, venue, rec, _, _ = build(store, page_size=100)
        gate.submit("submit_order", "op-a", EXAMPLE_ORDER)
        venue.inject_record("default:op-ghost")
        venue.inject_record("not-a-ledger-key")
        kinds = sorted((d[0], d[1]) for d in rec.sweep().new_divergences)
        assert kinds == [("orphan", "default:op-ghost"), ("orphan", "not-a-ledger-key")]
