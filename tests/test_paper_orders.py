"""The paper venue's order state and cancel, in process and over HTTP (the real wire), so
``submit_order`` compensated by ``cancel_order`` is real end to end (docs/paper-venue.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from effectgate._execute.adapter import OutboundRequest, Outcome
from effectgate.adapters._paper_server import serve_paper_venue
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperAdapter, PaperVenue

KEY = "paper-orders-key"
ENV = "EFFECTGATE_TEST_ORDERS_KEY"
ORDER = {"instrument": "XYZ-PERP", "side": "buy", "quantity": "4", "limit_price": "100.00"}


def order(key: str) -> OutboundRequest:
    return OutboundRequest(operation_key=key, action="submit_order", effect=ORDER)


def cancel(key: str, ref: str, instrument: str = "XYZ-PERP") -> OutboundRequest:
    return OutboundRequest(
        operation_key=key,
        action="cancel_order",
        effect={"instrument": instrument, "order_ref": ref},
    )


@pytest.fixture(params=["in_process", "http"])
def wired(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[PaperVenue, object]]:
    venue = PaperVenue(strict_orders=True)
    if request.param == "in_process":
        yield venue, PaperAdapter(venue)
        return
    monkeypatch.setenv(ENV, KEY)
    with serve_paper_venue(venue, api_key=KEY) as server:
        adapter = HttpVenueAdapter(server.url, credential_env=ENV, timeout=5.0)
        try:
            yield venue, adapter
        finally:
            adapter.close()


class TestOrdersAndCancels:
    def test_an_order_is_open_until_cancelled_once(self, wired: tuple[PaperVenue, object]) -> None:
        venue, adapter = wired
        placed = adapter.execute(order("o-1"), timeout=5.0)  # type: ignore[attr-defined]
        assert placed.outcome is Outcome.APPLIED and venue.order_state(placed.venue_id) == "open"
        wrong = adapter.execute(cancel("c-0", placed.venue_id, "ABC-PERP"), timeout=5.0)  # type: ignore[attr-defined]
        assert wrong.outcome is Outcome.NOT_APPLIED
        done = adapter.execute(cancel("c-1", placed.venue_id), timeout=5.0)  # type: ignore[attr-defined]
        assert done.outcome is Outcome.APPLIED
        assert venue.order_state(placed.venue_id) == "cancelled"
        again = adapter.execute(cancel("c-2", placed.venue_id), timeout=5.0)  # type: ignore[attr-defined]
        assert again.outcome is Outcome.NOT_APPLIED and again.proof is not None
        assert "already cancelled" in (again.proof.note or "")
        unknown = adapter.execute(cancel("c-3", "V-999999"), timeout=5.0)  # type: ignore[attr-defined]
        assert unknown.outcome is Outcome.NOT_APPLIED
        assert venue.order_state("V-999999") is None


class TestRecordVersions:
    """The venue's version of a record (docs/paper-venue.md, "Record versions"): 1 when made,
    one more on each change, reported in receipts and lookups, in process and over HTTP."""

    def test_each_change_to_a_record_is_a_new_version(
        self, wired: tuple[PaperVenue, object]
    ) -> None:
        venue, adapter = wired
        placed = adapter.execute(order("o-1"), timeout=5.0)  # type: ignore[attr-defined]
        assert placed.venue_version == "1" and venue.version(placed.venue_id) == 1
        # A replay under the same key answers about the same record, unchanged.
        replay = adapter.execute(order("o-1"), timeout=5.0)  # type: ignore[attr-defined]
        assert (replay.venue_id, replay.venue_version) == (placed.venue_id, "1")
        done = adapter.execute(cancel("c-1", placed.venue_id), timeout=5.0)  # type: ignore[attr-defined]
        assert done.venue_version == "1"  # the cancel is a record of its own, new
        assert venue.version(placed.venue_id) == 2  # the order changed: open -> cancelled
        after = adapter.execute(order("o-1"), timeout=5.0)  # type: ignore[attr-defined]
        assert (after.venue_id, after.venue_version) == (placed.venue_id, "2")
        assert venue.find_versioned("o-1") == [(placed.venue_id, 2)]
        # A refused change changes nothing.
        again = adapter.execute(cancel("c-2", placed.venue_id), timeout=5.0)  # type: ignore[attr-defined]
        assert again.outcome is Outcome.NOT_APPLIED and venue.version(placed.venue_id) == 2
        assert venue.version("V-999999") is None

    def test_a_venue_wrapping_submit_still_sees_every_call_and_reports_versions(self) -> None:
        """A subclass hooking ``submit`` (as the B3 bench counts calls) is not bypassed by the
        versioned answer: the pair it passes through carries the version."""

        class Counting(PaperVenue):
            calls_seen = 0

            def submit(
                self, operation_key: str, action: str, effect: Mapping[str, str | int | bool]
            ) -> tuple[str, bool]:
                self.calls_seen += 1
                return super().submit(operation_key, action, effect)

        venue = Counting(strict_orders=True)
        adapter = PaperAdapter(venue)
        placed = adapter.execute(order("o-1"), timeout=5.0)
        adapter.execute(cancel("c-1", str(placed.venue_id)), timeout=5.0)
        replay = adapter.execute(order("o-1"), timeout=5.0)
        assert venue.calls_seen == 3 and replay.venue_version == "2"
