"""The ceiling on one adapter call (30 s): no configured timeout above it, and probe and record
listing take a timeout that every adapter keeps (docs/adapters.md, "Timeouts").

Invariant 11 (nothing waits silently: every wait has a bound) and invariant 4 (absence becomes
failure only when the venue answered: a probe that timed out is a probe error, never absence).
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler, State
from effectgate._execute.adapter import (
    ADAPTER_CALL_CEILING,
    Adapter,
    OutboundRequest,
    Receipt,
    VenueRecord,
    call_budget,
    check_call_timeout,
)
from effectgate._execute.continuations import ContinuationService
from effectgate._service import parse_config
from effectgate.adapters.conformance.transport_faults import FaultServer
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import AdapterError, ConfigError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock, run_conformance
from servicekit import config_text
from venuekit import PaperDriver

GOOD = config_text(store_url="sqlite:///:memory:")


def _refused(text: str, *needles: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "svc.toml")
    for needle in needles:
        assert needle in info.value.message, info.value.message


class TestConfiguredTimeouts:
    def test_the_ceiling_is_thirty_seconds(self) -> None:
        assert ADAPTER_CALL_CEILING == 30.0

    @pytest.mark.parametrize(
        ("edit", "field"),
        [
            (("[service]", "[service]\ndispatch_timeout = 31"), "service.dispatch_timeout"),
            (("[service]", "[service]\nprobe_timeout = 45"), "service.probe_timeout"),
        ],
    )
    def test_service_timeouts_above_the_ceiling_are_refused_naming_the_field(
        self, edit: tuple[str, str], field: str
    ) -> None:
        _refused(GOOD.replace(*edit, 1), field, "30s ceiling")

    def test_an_adapter_timeout_above_the_ceiling_is_refused_naming_the_field(self) -> None:
        text = config_text(store_url="sqlite:///:memory:", venue_url="http://127.0.0.1:9")
        _refused(text.replace("timeout = 5.0", "timeout = 60"), "adapters.venue.timeout", "30s")

    def test_at_the_ceiling_is_accepted_and_probe_timeout_is_read(self) -> None:
        cfg = parse_config(
            GOOD.replace("[service]", "[service]\ndispatch_timeout = 30\nprobe_timeout = 4", 1),
            "svc.toml",
        )
        assert cfg.service.dispatch_timeout == 30 and cfg.service.probe_timeout == 4

    def test_the_gateway_refuses_an_upstream_timeout_above_the_ceiling(self) -> None:
        from effectgate._doors.gateway._config import _call_timeout
        from effectgate._service._toml import Section

        sec = Section({"timeout": 31}, ("upstreams", "shop"), "gw.toml", "")
        with pytest.raises(ConfigError, match=r"upstreams\.shop\.timeout.*30s ceiling"):
            _call_timeout(sec)
        assert _call_timeout(Section({"timeout": 30}, ("upstreams", "shop"), "gw.toml", ""))

    @pytest.mark.parametrize("bad", [0, -1, 31, 1e9, True, "5"])
    def test_library_callers_are_held_to_it_too(self, bad: object) -> None:
        with pytest.raises(ConfigError, match="call_timeout"):
            check_call_timeout(bad, "call_timeout")
        with pytest.raises(ConfigError, match="timeout"):
            HttpVenueAdapter("http://127.0.0.1:9", credential="k-0123456789", timeout=bad)  # type: ignore[arg-type]

    def test_a_call_is_never_given_more_than_the_ceiling(self) -> None:
        assert call_budget(100.0) == ADAPTER_CALL_CEILING
        assert call_budget(100.0, 5.0) == 5.0
        assert call_budget(2.0, 5.0) == 2.0
        with pytest.raises(AdapterError):
            call_budget(0.0)


class TestReadsKeepTheirTimeout:
    def test_an_http_probe_and_listing_give_up_at_their_timeout(self) -> None:
        """Invariant 11: a venue that reads the request and never answers holds a probe for
        the probe's timeout, not the adapter's own (longer) one, and the probe raises."""
        with FaultServer("hang") as server:
            adapter = HttpVenueAdapter(server.url(), credential="k-0123456789", timeout=20.0)
            try:
                for read in (
                    lambda: adapter.probe("default:op-1", timeout=0.5),
                    lambda: adapter.records(None, 10, timeout=0.5),
                ):
                    started = time.monotonic()
                    with pytest.raises(AdapterError):
                        read()
                    assert time.monotonic() - started < 5.0
            finally:
                adapter.close()

    def test_the_kit_passes_an_adapter_that_keeps_it(self) -> None:
        venue = PaperVenue(max_quantity=1000)
        from effectgate.adapters._paper_server import serve_paper_venue

        def make(url: str) -> HttpVenueAdapter:
            return HttpVenueAdapter(url, credential="k-0123456789", timeout=5.0)

        with serve_paper_venue(venue, api_key="k-0123456789") as running:
            driver = PaperDriver(venue, secret="k-0123456789", pointed_at=make)
            rep = run_conformance(make(running.url), driver, horizon=1.0)
        result = rep.results["reads-bounded"]
        assert result["status"] == "pass", result
        assert "probe gave up" in result["detail"] and "records gave up" in result["detail"]

    def test_the_kit_fails_an_adapter_whose_probe_ignores_it(self) -> None:
        """An adapter whose probe waits out its own timeout (or takes none) fails."""

        class Deaf(HttpVenueAdapter):
            def probe(self, operation_key: str, *, timeout: float = 10.0) -> list[str]:
                return super().probe(operation_key, timeout=30.0)

        class Old(PaperAdapter):
            def probe(self, operation_key: str) -> list[str]:  # type: ignore[override]
                return []

        venue = PaperVenue(max_quantity=1000)
        from effectgate.adapters._paper_server import serve_paper_venue

        def make(url: str) -> HttpVenueAdapter:
            return Deaf(url, credential="k-0123456789", timeout=4.0)

        with serve_paper_venue(venue, api_key="k-0123456789") as running:
            driver = PaperDriver(venue, secret="k-0123456789", pointed_at=make)
            rep = run_conformance(make(running.url), driver, horizon=1.0)
        result = rep.results["reads-bounded"]
        assert result["status"] == "fail" and "probe took" in result["detail"], result
        old = run_conformance(Old(venue), PaperDriver(venue), horizon=1.0)
        assert old.results["reads-bounded"]["status"] == "fail"
        assert "probe" in old.results["reads-bounded"]["detail"]


class _Recording(PaperAdapter):
    """The paper venue, recording the timeout each read was given."""

    def __init__(self, venue: PaperVenue) -> None:
        super().__init__(venue)
        self.given: list[tuple[str, float]] = []

    def probe(self, operation_key: str, *, timeout: float = 10.0) -> list[str]:
        self.given.append(("probe", timeout))
        return super().probe(operation_key, timeout=timeout)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = 10.0
    ) -> list[VenueRecord]:
        self.given.append(("records", timeout))
        return super().records(after, limit, timeout=timeout)


class _Silent(PaperAdapter):
    """Journals ``submitted`` then never answers (the outcome is unknown)."""

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise AdapterError("no answer")


def _gate(store: Store, adapter: Adapter, clock: ManualClock) -> Gate:
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": adapter},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000000"))}),
        clock=clock,
    )


class TestCallersPassIt:
    def test_the_reconciler_gives_each_probe_and_page_its_call_timeout(self, store: Store) -> None:
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        row = _gate(store, _Silent(venue), clock).submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert row.state is State.SUBMITTED
        reader = _Recording(venue)
        rec = Reconciler(
            store=store,
            registry=default_registry(),
            adapters={"paper": reader},
            clock=clock,
            call_timeout=3.5,
        )
        rec.repair()
        rec.sweep()
        assert ("probe", 3.5) in reader.given and ("records", 3.5) in reader.given
        assert {t for _, t in reader.given} == {3.5}
        with pytest.raises(ConfigError, match="call_timeout"):
            Reconciler(store=store, registry=default_registry(), adapters={}, call_timeout=31)

    def test_a_probe_that_times_out_is_never_read_as_absence(self, store: Store) -> None:
        """Invariant 4: past the horizon, a probe that raised leaves the row uncertain."""
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        _gate(store, _Silent(venue), clock).submit("submit_order", "op-1", EXAMPLE_ORDER)
        clock.advance(3600)

        class TimingOut(PaperAdapter):
            def probe(self, operation_key: str, *, timeout: float = 10.0) -> list[str]:
                raise AdapterError(f"no answer within {timeout:g}s")

        report = Reconciler(
            store=store,
            registry=default_registry(),
            adapters={"paper": TimingOut(venue)},
            clock=clock,
            call_timeout=1.0,
        ).repair()
        assert report.probe_errors == 1
        row = store.get("default", "op-1")
        assert row is not None and row.state is State.SUBMITTED

    def test_the_continuation_service_refuses_a_timeout_above_the_ceiling(
        self, store: Store
    ) -> None:
        gate = _gate(store, PaperAdapter(PaperVenue()), ManualClock())
        with pytest.raises(ConfigError, match="probe_timeout"):
            ContinuationService(gate, probe_timeout=60)
        assert ContinuationService(gate, probe_timeout=2).probe_timeout == 2
