"""Prometheus metrics for one service: read from the store at scrape time, plus dispatch timing.

Every ledger figure is one aggregate query (``count(*) ... GROUP BY``, ``min(...)``), never a
scan of rows into Python, so a scrape costs the same on a ledger of any size.

Labels are action-class names, states, adapter names and divergence kinds: configuration and
ledger vocabulary, never request content, tokens or credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    OutboundRequest,
    Receipt,
    SpeculationPassThrough,
    VenueRecord,
)
from effectgate._service._budget_metrics import plan_metrics

if TYPE_CHECKING:
    from effectgate.store.roles import Store

__all__ = ["CONTENT_TYPE", "Metrics", "TimedAdapter"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class TimedAdapter(SpeculationPassThrough, Adapter):
    """Delegates to ``inner`` and observes how long each outbound call took."""

    def __init__(self, inner: Adapter, adapter_name: str, histogram: Histogram) -> None:
        self.inner = inner
        self.name = inner.name
        self._adapter_name = adapter_name
        # A wrapper lists the way its venue does (time-window venues included).
        self.listing = inner.listing
        self.listing_lookback = inner.listing_lookback
        self._histogram = histogram

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        started = time.perf_counter()
        outcome = "error"
        try:
            receipt = self.inner.execute(request, timeout=timeout)
            outcome = receipt.outcome.value
            return receipt
        finally:
            self._histogram.labels(request.action, self._adapter_name, outcome).observe(
                time.perf_counter() - started
            )

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        return self.inner.probe(operation_key, timeout=timeout)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        return self.inner.records(after, limit, timeout=timeout)

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        return self.inner.window_records(start, end, timeout=timeout)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"TimedAdapter({self.inner!r})"


class _LedgerCollector(Collector):
    """Each scrape costs a handful of aggregate queries, whatever the ledger's size."""

    def __init__(self, store: Store, clock: Callable[[], float], actions: Sequence[str]) -> None:
        self._store = store
        self._clock = clock
        self._actions = list(actions)

    def collect(self) -> Iterator[Metric]:
        ops = GaugeMetricFamily(
            "effectgate_operations",
            "Ledger rows by action class and state",
            labels=["action", "state"],
        )
        for (action, state), n in sorted(self._store.count_by_state().items()):
            ops.add_metric([action, state], n)
        yield ops
        oldest = self._store.oldest_submitted_at()
        age = GaugeMetricFamily(
            "effectgate_uncertain_oldest_age_seconds",
            "Age of the oldest submitted (uncertain) row; 0 when none",
        )
        age.add_metric([], max(0.0, self._clock() - oldest) if oldest is not None else 0.0)
        yield age
        kinds = {"orphan": 0, "duplicate-effect": 0, **self._store.count_divergences()}
        div = GaugeMetricFamily(
            "effectgate_divergences", "Divergences recorded, by kind", labels=["kind"]
        )
        for kind, n in sorted(kinds.items()):
            div.add_metric([kind], n)
        yield div
        orphans = GaugeMetricFamily("effectgate_orphans", "Venue records with no ledger row")
        orphans.add_metric([], kinds["orphan"])
        yield orphans
        dups = GaugeMetricFamily(
            "effectgate_duplicate_effects", "Operation keys with more than one venue record"
        )
        dups.add_metric([], kinds["duplicate-effect"])
        yield dups
        count, entered = self._store.quarantine_summary()
        queue = GaugeMetricFamily(
            "effectgate_quarantine_size", "Rows in the operators' quarantine queue"
        )
        queue.add_metric([], count)
        yield queue
        waited = GaugeMetricFamily(
            "effectgate_quarantine_oldest_age_seconds",
            "How long the oldest quarantined row has waited for an operator; 0 when none",
        )
        waited.add_metric([], max(0.0, self._clock() - entered) if entered is not None else 0.0)
        yield waited
        yield from self._controls()
        yield from _runs(self._store)
        yield from plan_metrics(self._store)

    def _controls(self) -> Iterator[Metric]:
        stored = {c.action: c for c in self._store.list_controls()}
        held = self._store.count_held()
        gauges = {
            "breaker": GaugeMetricFamily(
                "effectgate_breaker_open",
                "1 while the action class's circuit breaker is open",
                labels=["action"],
            ),
            "kill": GaugeMetricFamily(
                "effectgate_kill_switch_on",
                "1 while the action class's kill switch holds new dispatches",
                labels=["action"],
            ),
            "shadow": GaugeMetricFamily(
                "effectgate_shadow_mode",
                "1 while the action class runs in shadow mode",
                labels=["action"],
            ),
            "held": GaugeMetricFamily(
                "effectgate_held_operations",
                "Validated rows a control is holding back (not failed, not sent)",
                labels=["action"],
            ),
        }
        for action in sorted(set(self._actions) | set(stored) | set(held)):
            ctl = stored.get(action)
            gauges["breaker"].add_metric([action], 1 if ctl and ctl.breaker_open else 0)
            gauges["kill"].add_metric([action], 1 if ctl and ctl.killed else 0)
            gauges["shadow"].add_metric([action], 1 if ctl and ctl.shadow else 0)
            gauges["held"].add_metric([action], held.get(action, 0))
        yield from gauges.values()


class Metrics:
    """One registry per service instance (tests build many; nothing global)."""

    def __init__(
        self, store: Store, clock: Callable[[], float], actions: Sequence[str] = ()
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.dispatch_seconds = Histogram(
            "effectgate_dispatch_seconds",
            "Duration of outbound venue calls",
            ["action", "adapter", "outcome"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.registry.register(_LedgerCollector(store, clock, actions))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _runs(store: Store) -> Iterator[Metric]:
    """Open (unsealed) runs and model-provider calls with neither a return nor a receipt."""
    open_runs = GaugeMetricFamily("effectgate_runs_open", "Runs not sealed yet")
    open_runs.add_metric([], store.count_open_runs())
    yield open_runs
    unresolved = GaugeMetricFamily(
        "effectgate_provider_calls_unresolved",
        "Model-provider calls with no local return and no provider receipt",
    )
    unresolved.add_metric([], store.count_unresolved_provider_calls())
    yield unresolved
