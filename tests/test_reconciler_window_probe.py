"""An uncertain row older than a time-window listing's lookback is settled by a probe of its
key during the sweep (found by the simulator's evidence actor, seeds 1 and 2: its venue lists
200 s back, and a row left uncertain while the clock jumped past that stayed ``submitted``
through every later pass). ``repair()`` probes only while another replica holds the sweep
lock, so a lone sweeper that skipped such a row never settled it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler, State
from effectgate._execute.adapter import DEFAULT_CALL_TIMEOUT, Listing, VenueRecord
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock

LOOKBACK = 200.0


class WindowPaper(PaperAdapter):
    """A paper venue listed by creation time, ``LOOKBACK`` seconds back (as Stripe is)."""

    listing = Listing.TIME_WINDOW
    listing_lookback = LOOKBACK

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        return iter(
            [
                VenueRecord(r.operation_key, r.venue_id)
                for r in self.venue.visible_records()
                if start <= r.created_at <= end
            ]
        )


@pytest.mark.parametrize("applied", [False, True])
def test_invariant_11_an_uncertain_row_older_than_the_listing_window_is_settled(
    store: Store, applied: bool
) -> None:
    """Invariant 11 (nothing waits silently) and 4: a lost reply, then the clock past the
    window before any pass: the next single-replica pass settles the row from a probe (written
    off when the venue never applied it, acknowledged when it did), never leaves it uncertain."""
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    adapter = WindowPaper(venue)
    registry = default_registry()
    gate = Gate(
        store=store,
        registry=registry,
        adapters={"paper": adapter},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    venue.fail_next(1, after_apply=applied)
    row = gate.submit("submit_order", "op-old", EXAMPLE_ORDER)
    assert row.state is State.SUBMITTED
    clock.advance(LOOKBACK + 120)  # past the horizon (60 s) and out of the listing's window
    rec = Reconciler(store=store, registry=registry, adapters={"paper": adapter}, clock=clock)
    report = rec.run_once()
    assert report.swept
    settled = store.get("default", "op-old")
    assert settled is not None
    assert settled.state is (State.ACKNOWLEDGED if applied else State.FAILED)
    assert report.still_uncertain == 0
