"""The in-process paper venue and its adapter."""

from __future__ import annotations

import threading

import pytest

from effectgate._execute.adapter import OutboundRequest, Outcome, VenueRecord, iter_records
from effectgate.adapters.paper import PaperAdapter, PaperVenue, VenueRejection
from effectgate.errors import AdapterError
from effectgate.testing import CountingAdapter

EFFECT = {"instrument": "XYZ-PERP", "side": "buy", "quantity": "4", "limit_price": "100.00"}


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def request(key: str, **effect: str | int | bool) -> OutboundRequest:
    return OutboundRequest(operation_key=key, action="submit_order", effect={**EFFECT, **effect})


class TestKeyHonouring:
    """invariant 5: duplicate effects are visible (and absent when the venue honours the key)."""

    def test_honoured_key_gives_one_effect_and_the_same_venue_id(self) -> None:
        venue = PaperVenue(honour_key=True)
        first = venue.submit("op-1", "submit_order", EFFECT)
        second = venue.submit("op-1", "submit_order", EFFECT)
        assert first == ("V-000001", True)
        assert second == ("V-000001", False)
        assert (venue.calls, venue.effect_count, venue.effects_for("op-1")) == (2, 1, 1)
        assert venue.find("op-1") == ["V-000001"]

    def test_ignored_key_gives_two_effects_enumerated_separately(self) -> None:
        venue = PaperVenue(honour_key=False)
        a, _ = venue.submit("op-1", "submit_order", EFFECT)
        b, _ = venue.submit("op-1", "submit_order", EFFECT)
        assert a != b
        assert venue.effects_for("op-1") == 2
        assert venue.find("op-1") == [a, b]
        assert venue.records_after(None, 10) == [VenueRecord("op-1", a), VenueRecord("op-1", b)]
        assert [r.venue_id for r in venue.visible_records()] == [a, b]

    def test_set_honour_key_switches_behaviour_for_later_submits(self) -> None:
        venue = PaperVenue()
        venue.submit("op-1", "submit_order", EFFECT)
        venue.set_honour_key(False)
        venue.submit("op-1", "submit_order", EFFECT)
        assert venue.effects_for("op-1") == 2

    def test_distinct_keys_with_identical_payloads_are_two_effects(self) -> None:
        venue = PaperVenue()
        venue.submit("op-a", "submit_order", EFFECT)
        venue.submit("op-b", "submit_order", EFFECT)
        assert venue.effect_count == 2

    def test_concurrent_submits_of_one_key_make_one_effect(self) -> None:
        venue = PaperVenue()
        threads = [
            threading.Thread(target=venue.submit, args=("op-1", "submit_order", EFFECT))
            for _ in range(16)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (venue.calls, venue.effect_count) == (16, 1)

    def test_effect_is_a_snapshot(self) -> None:
        venue = PaperVenue()
        effect = dict(EFFECT)
        venue.submit("op-1", "submit_order", effect)
        effect["quantity"] = "400"
        assert venue.visible_records()[0].effect["quantity"] == "4"


class TestReadLag:
    """invariant 4: absence is not failure until the horizon; the read view may lag writes."""

    def test_records_hidden_until_the_clock_passes_the_lag(self) -> None:
        clock = FakeClock(100.0)
        venue = PaperVenue(read_lag=5.0, clock=clock)
        venue.submit("op-1", "submit_order", EFFECT)
        assert venue.find("op-1") == []
        assert venue.records_after(None, 10) == []
        assert venue.visible_records() == []
        assert venue.effects_for("op-1") == 1  # ground truth ignores lag
        clock.now = 104.9
        assert venue.find("op-1") == []
        clock.now = 105.0
        assert venue.find("op-1") == ["V-000001"]
        assert venue.records_after(None, 10) == [VenueRecord("op-1", "V-000001")]

    def test_honoured_key_deduplicates_even_while_the_read_view_lags(self) -> None:
        venue = PaperVenue(read_lag=60.0, clock=FakeClock())
        venue.submit("op-1", "submit_order", EFFECT)
        assert venue.submit("op-1", "submit_order", EFFECT) == ("V-000001", False)

    def test_set_read_lag_applies_to_existing_records(self) -> None:
        clock = FakeClock(10.0)
        venue = PaperVenue(clock=clock)
        venue.submit("op-1", "submit_order", EFFECT)
        venue.set_read_lag(30.0)
        assert venue.find("op-1") == []
        venue.set_read_lag(0.0)
        assert venue.find("op-1") == ["V-000001"]

    def test_a_hidden_record_does_not_break_paging(self) -> None:
        clock = FakeClock(0.0)
        venue = PaperVenue(read_lag=10.0, clock=clock)
        venue.submit("a", "submit_order", EFFECT)
        clock.now = 20.0
        venue.submit("b", "submit_order", EFFECT)  # still inside the lag
        venue.submit("c", "submit_order", EFFECT)
        clock.now = 25.0
        assert venue.records_after(None, 1) == [VenueRecord("a", "V-000001")]
        assert venue.records_after(VenueRecord("a", "V-000001"), 1) == []
        clock.now = 30.0
        assert [r.operation_key for r in venue.records_after(None, 10)] == ["a", "b", "c"]


class TestPaging:
    """invariant 5: the sweep enumerates venue records individually, each exactly once."""

    def test_pages_return_every_record_once_in_sorted_order_with_duplicates(self) -> None:
        venue = PaperVenue(honour_key=False)
        keys = ["op-7", "op-2", "op-9", "op-2", "op-5", "op-2", "op-1", "op-9"]
        for key in keys:
            venue.submit(key, "submit_order", EFFECT)
        venue.inject_record("op-0")
        expected = sorted(VenueRecord(r.operation_key, r.venue_id) for r in venue.visible_records())
        for page_size in (1, 2, 3, 4, 100):
            seen: list[VenueRecord] = []
            after: VenueRecord | None = None
            while True:
                page = venue.records_after(after, page_size)
                assert len(page) <= page_size
                seen.extend(page)
                if len(page) < page_size:
                    break
                after = page[-1]
            assert seen == expected, page_size
        assert [r.operation_key for r in expected].count("op-2") == 3

    def test_iter_records_over_the_adapter_matches(self) -> None:
        venue = PaperVenue(honour_key=False)
        for i in range(25):
            venue.submit(f"op-{i % 7}", "submit_order", EFFECT)
        records = list(iter_records(PaperAdapter(venue), page_size=4))
        assert records == sorted(records) and len(records) == 25 and len(set(records)) == 25

    def test_writes_between_pages_are_merged_into_the_index(self) -> None:
        venue = PaperVenue()
        venue.submit("b", "submit_order", EFFECT)
        first = venue.records_after(None, 1)
        venue.submit("c", "submit_order", EFFECT)
        venue.submit("a", "submit_order", EFFECT)  # sorts before the cursor: next sweep's job
        assert venue.records_after(first[-1], 10) == [VenueRecord("c", "V-000002")]
        assert [r.operation_key for r in venue.records_after(None, 10)] == ["a", "b", "c"]

    def test_large_venue_pages_efficiently(self) -> None:
        venue = PaperVenue()
        for i in range(100_000):
            venue.inject_record(f"k-{(i * 7919) % 100_000:06d}")
        page = venue.records_after(VenueRecord("k-050000", "~"), 3)
        assert [r.operation_key for r in page] == ["k-050001", "k-050002", "k-050003"]
        assert len(list(iter_records(PaperAdapter(venue), page_size=5000))) == 100_000

    def test_limit_must_be_positive(self) -> None:
        with pytest.raises(ValueError):
            PaperVenue().records_after(None, 0)


class TestOrphansAndLateAppearances:
    """invariant 4 and the orphan divergence: effects made outside the boundary are visible."""

    def test_injected_orphan_is_enumerated_and_probed(self) -> None:
        venue = PaperVenue()
        venue_id = venue.inject_record("op-unknown")
        assert venue.records_after(None, 10) == [VenueRecord("op-unknown", venue_id)]
        assert venue.find("op-unknown") == [venue_id]
        assert venue.calls == 0

    def test_injected_id_is_kept_and_minting_skips_it(self) -> None:
        venue = PaperVenue()
        assert venue.inject_record("op-c", "V-000001") == "V-000001"
        assert venue.submit("op-d", "submit_order", EFFECT) == ("V-000002", True)
        with pytest.raises(ValueError):
            venue.inject_record("op-e", "V-000002")

    def test_late_appearance_respects_read_lag(self) -> None:
        clock = FakeClock(0.0)
        venue = PaperVenue(read_lag=10.0, clock=clock)
        venue.inject_record("op-c")
        assert venue.find("op-c") == []
        clock.now = 10.0
        assert venue.find("op-c") == ["V-000001"]


class TestFaults:
    """invariant 3: a call lost in the crash/timeout window leaves the outcome unknown."""

    def test_fail_before_apply_changes_nothing(self) -> None:
        venue = PaperVenue()
        venue.fail_next(2, after_apply=False)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                venue.submit("op-1", "submit_order", EFFECT)
        assert (venue.calls, venue.effect_count) == (2, 0)
        assert venue.submit("op-1", "submit_order", EFFECT) == ("V-000001", True)

    def test_fail_after_apply_applies_but_the_caller_never_hears(self) -> None:
        venue = PaperVenue()
        venue.fail_next(1, after_apply=True)
        with pytest.raises(ConnectionError):
            venue.submit("op-1", "submit_order", EFFECT)
        assert venue.effect_count == 1 and venue.find("op-1") == ["V-000001"]
        # A retry on an honouring venue finds the effect already there.
        assert venue.submit("op-1", "submit_order", EFFECT) == ("V-000001", False)

    def test_fail_after_apply_on_an_ignoring_venue_then_retry_duplicates(self) -> None:
        venue = PaperVenue(honour_key=False)
        venue.fail_next(1, after_apply=True)
        with pytest.raises(ConnectionError):
            venue.submit("op-1", "submit_order", EFFECT)
        venue.submit("op-1", "submit_order", EFFECT)
        assert venue.effects_for("op-1") == 2  # why invariant 9 forbids automatic retries

    def test_negative_count_refused(self) -> None:
        with pytest.raises(ValueError):
            PaperVenue().fail_next(-1, after_apply=False)


class TestRejections:
    """The venue's explicit refusal: nothing applied, and the reason is proof."""

    def test_unknown_instrument_refused(self) -> None:
        venue = PaperVenue(instruments=frozenset({"ABC-PERP"}))
        with pytest.raises(VenueRejection) as info:
            venue.submit("op-1", "submit_order", EFFECT)
        assert "XYZ-PERP" in info.value.reason
        assert (venue.calls, venue.effect_count) == (1, 0)

    @pytest.mark.parametrize("quantity", ["11", 11, "1E2", "abc", True])
    def test_quantity_over_maximum_or_not_a_number_refused(self, quantity: object) -> None:
        venue = PaperVenue(max_quantity=10)
        with pytest.raises(VenueRejection):
            venue.submit("op-1", "submit_order", {**EFFECT, "quantity": quantity})  # type: ignore[dict-item]
        assert venue.effect_count == 0

    def test_quantity_at_maximum_accepted(self) -> None:
        venue = PaperVenue(max_quantity=10, instruments=frozenset({"XYZ-PERP"}))
        assert venue.submit("op-1", "submit_order", {**EFFECT, "quantity": "10.0"})[1] is True


class TestPaperAdapter:
    """invariant 3: only proof makes not_applied; every other failure is unknown (AdapterError)."""

    def test_applied_receipt(self) -> None:
        adapter = PaperAdapter(PaperVenue())
        receipt = adapter.execute(request("op-1"), timeout=1.0)
        assert (receipt.outcome, receipt.venue_id) == (Outcome.APPLIED, "V-000001")
        again = adapter.execute(request("op-1"), timeout=1.0)
        assert again.venue_id == "V-000001" and again.detail["created"] == "false"
        assert adapter.name == "paper"

    def test_rejection_is_not_applied_with_proof(self) -> None:
        adapter = PaperAdapter(PaperVenue(max_quantity=1))
        receipt = adapter.execute(request("op-1"), timeout=1.0)
        assert receipt.outcome is Outcome.NOT_APPLIED
        assert receipt.proof is not None and receipt.proof.kind.value == "venue_refusal"
        assert (receipt.proof.note or "").startswith("venue rejected: ")

    @pytest.mark.parametrize("after_apply", [False, True])
    def test_lost_connection_is_adapter_error(self, after_apply: bool) -> None:
        venue = PaperVenue()
        venue.fail_next(1, after_apply=after_apply)
        with pytest.raises(AdapterError):
            PaperAdapter(venue).execute(request("op-1"), timeout=1.0)
        assert venue.effect_count == (1 if after_apply else 0)

    def test_a_lost_rejection_is_unknown_not_proof(self) -> None:
        venue = PaperVenue(max_quantity=1)
        venue.fail_next(1, after_apply=True)
        with pytest.raises(AdapterError):
            PaperAdapter(venue).execute(request("op-1"), timeout=1.0)

    def test_probe_and_records(self) -> None:
        venue = PaperVenue(honour_key=False)
        adapter = PaperAdapter(venue)
        adapter.execute(request("op-1"), timeout=1.0)
        adapter.execute(request("op-1"), timeout=1.0)
        assert adapter.probe("op-1") == ["V-000001", "V-000002"]
        assert adapter.probe("op-2") == []
        assert adapter.records(None, 10) == [
            VenueRecord("op-1", "V-000001"),
            VenueRecord("op-1", "V-000002"),
        ]


class TestCountingAdapter:
    """invariant 6: tests can see exactly what reached the adapter."""

    def test_counts_calls_and_keeps_requests(self) -> None:
        counting = CountingAdapter(PaperAdapter(PaperVenue()))
        assert counting.name == "paper"
        counting.execute(request("op-1"), timeout=1.0)
        counting.probe("op-1")
        counting.records(None, 5)
        assert (counting.execute_calls, counting.probe_calls, counting.records_calls) == (1, 1, 1)
        assert counting.requests == [request("op-1")]

    def test_a_failing_call_still_counts(self) -> None:
        venue = PaperVenue()
        venue.fail_next(1, after_apply=False)
        counting = CountingAdapter(PaperAdapter(venue))
        with pytest.raises(AdapterError):
            counting.execute(request("op-1"), timeout=1.0)
        assert counting.execute_calls == 1


class TestLatency:
    """A slow venue for rehearsals and B6: each dispatch answers after ``latency`` seconds."""

    def test_a_dispatch_waits_the_latency_then_applies(self) -> None:
        import time

        venue = PaperVenue()
        adapter = PaperAdapter(venue, latency=0.05)
        t0 = time.perf_counter()
        receipt = adapter.execute(OutboundRequest("k1", "submit_order", EFFECT), timeout=1.0)
        assert time.perf_counter() - t0 >= 0.05
        assert receipt.outcome is Outcome.APPLIED and venue.find("k1") == [receipt.venue_id]

    def test_waiting_dispatches_overlap(self) -> None:
        """No lock is held while a call waits: eight calls of 50 ms take far less than 400 ms."""
        import time

        adapter = PaperAdapter(PaperVenue(), latency=0.05)
        calls = [
            threading.Thread(
                target=adapter.execute,
                args=(OutboundRequest(f"k{i}", "submit_order", EFFECT),),
                kwargs={"timeout": 1.0},
            )
            for i in range(8)
        ]
        t0 = time.perf_counter()
        for c in calls:
            c.start()
        for c in calls:
            c.join()
        assert time.perf_counter() - t0 < 0.3

    def test_latency_past_the_timeout_is_a_lost_request(self) -> None:
        venue = PaperVenue()
        adapter = PaperAdapter(venue, latency=0.2)
        with pytest.raises(AdapterError, match=r"did not answer within 0\.05 s"):
            adapter.execute(OutboundRequest("k1", "submit_order", EFFECT), timeout=0.05)
        assert venue.find("k1") == []  # the venue never saw it: the reconciler finds nothing

    @pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), 31.0])
    def test_a_latency_outside_0_to_the_call_ceiling_is_refused(self, bad: float) -> None:
        from effectgate.errors import ConfigError

        with pytest.raises(ConfigError, match="paper adapter latency"):
            PaperAdapter(PaperVenue(), latency=bad)
