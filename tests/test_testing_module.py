"""effectgate.testing: what users test their harness with, tested as they would use it."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import PG_URL, require_pg
from effectgate import Gate, LimitPolicy, PolicySet, Reconciler, State
from effectgate._execute.adapter import OutboundRequest
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import (
    CountingAdapter,
    InvariantViolation,
    ManualClock,
    PaperAdapter,
    PaperVenue,
    SimulatedCrash,
    assert_invariants,
    at_most_one_dispatch,
    crash_at,
    duplicates_reported,
    no_write_off_inside_horizon,
    temporary_store,
)


def rig(store: Store) -> tuple[Gate, PaperVenue, CountingAdapter, Reconciler, ManualClock]:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    counting = CountingAdapter(PaperAdapter(venue))
    registry = default_registry()
    gate = Gate(
        store=store,
        registry=registry,
        adapters={"paper": counting},
        clock=clock,
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
    )
    rec = Reconciler(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    return gate, venue, counting, rec, clock


class TestCrashAt:
    def test_raise_mode_leaves_the_row_uncertain_and_never_sent(self, store: Store) -> None:
        """Invariant 3: a crash after the journal leaves the row submitted, nothing sent."""
        gate, venue, counting, _, _ = rig(store)
        with crash_at("after_journal"), pytest.raises(SimulatedCrash) as info:
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert info.value.point == "after_journal"
        assert store.get("default", "op-1").state is State.SUBMITTED  # type: ignore[union-attr]
        assert counting.execute_calls == 0 and venue.effect_count == 0
        # Disarmed after the block: a retry replays the uncertain row and sends nothing.
        again = gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert again.replayed and counting.execute_calls == 0

    def test_a_crash_after_the_venue_call_is_settled_by_the_reconciler(self, store: Store) -> None:
        """Invariants 1 and 3: the effect happened, the receipt did not; the sweep confirms."""
        gate, venue, counting, rec, _ = rig(store)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert venue.effect_count == 1
        rec.run_once()
        assert store.get("default", "op-1").state is State.ACKNOWLEDGED  # type: ignore[union-attr]
        assert_invariants(
            store,
            requests=counting.requests,
            venue_keys=[r.operation_key for r in venue.visible_records()],
        )

    def test_an_unknown_point_is_refused(self) -> None:
        with pytest.raises(ValueError, match="unknown crash point"), crash_at("nowhere"):
            pass


class TestInvariantCheckers:
    def test_two_dispatches_of_one_key_break_invariant_1(self) -> None:
        req = OutboundRequest(operation_key="default:op-1", action="submit_order", effect={})
        assert [v.invariant for v in at_most_one_dispatch([req, req])] == [1]
        assert at_most_one_dispatch([req]) == []

    def test_an_unrecorded_duplicate_breaks_invariant_5(self, store: Store) -> None:
        gate, venue, _, rec, _ = rig(store)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        venue.set_honour_key(False)
        venue.inject_record("default:op-1")
        keys = [r.operation_key for r in venue.visible_records()]
        assert [v.invariant for v in duplicates_reported(store, keys)] == [5]
        # The same judgement on the ledger's keys read once by the caller (the simulator's),
        # and an orphan when the key is not among them.
        ledger = {e.op_key for e in store.page_entries(None, 1000)}
        assert duplicates_reported(store, keys, ledger_keys=ledger) == duplicates_reported(
            store, keys
        )
        (orphan,) = duplicates_reported(store, keys, ledger_keys=set())
        assert orphan.invariant == 5 and "orphan" in orphan.message
        rec.sweep()
        assert duplicates_reported(store, keys) == []
        assert duplicates_reported(store, keys, ledger_keys=ledger) == []

    def test_a_write_off_inside_the_horizon_breaks_invariant_4(self, store: Store) -> None:
        gate, venue, _, _, clock = rig(store)
        venue.fail_next(1, after_apply=False)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        store.transition(
            "default",
            "op-1",
            State.SUBMITTED,
            State.FAILED,
            now=clock() + 5,
            detail="absent at the venue 5s after submission",
        )
        found = no_write_off_inside_horizon(store, default_registry())
        assert [v.invariant for v in found] == [4]

    def test_an_edited_audit_entry_breaks_invariant_8(self, tmp_path: Path) -> None:
        with temporary_store() as store:
            gate, *_ = rig(store)
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
            assert_invariants(store)
            path = store.path  # type: ignore[attr-defined]
            conn = sqlite3.connect(path)
            conn.execute("UPDATE audit_log SET detail = replace(detail, 'XYZ', 'ABC')")
            conn.commit()
            conn.close()
            with pytest.raises(InvariantViolation) as info:
                assert_invariants(store)
            assert {v.invariant for v in info.value.violations} == {8}


class TestTemporaryStore:
    def test_sqlite_is_removed_afterwards(self) -> None:
        with temporary_store() as store:
            path = Path(store.path)  # type: ignore[attr-defined]
            assert path.exists() and store.schema_version() > 0
        assert not path.exists()

    @pytest.mark.postgres
    def test_postgres_schema_is_dropped_afterwards(self) -> None:
        import psycopg

        url = require_pg()
        with temporary_store(url) as store:
            schema = store.schema  # type: ignore[attr-defined]
            assert store.schema_version() > 0
        assert PG_URL is not None
        with psycopg.connect(PG_URL) as conn:
            assert (
                conn.execute(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
                ).fetchone()
                is None
            )


def test_manual_clock_moves_only_by_hand() -> None:
    clock = ManualClock(10.0)
    assert clock() == 10.0
    clock.advance(2.5)
    assert clock() == 12.5
