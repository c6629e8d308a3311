"""Prometheus metrics for one service: read from the store at scrape time, plus dispatch timing.

Labels are action-class names, states, adapter names and divergence kinds: configuration and
ledger vocabulary, never request content, tokens or credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from effectgate.core.states import State
from effectgate.execute.adapter import Adapter, OutboundRequest, Receipt, VenueRecord

if TYPE_CHECKING:
    from effectgate.store.base import Store

__all__ = ["CONTENT_TYPE", "Metrics", "TimedAdapter"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_UNCERTAIN_SCAN = 10_000


class TimedAdapter(Adapter):
    """Delegates to ``inner`` and observes how long each outbound call took."""

    def __init__(self, inner: Adapter, adapter_name: str, histogram: Histogram) -> None:
        self.inner = inner
        self.name = inner.name
        self._adapter_name = adapter_name
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
                time.perf_counter() - started)

    def probe(self, operation_key: str) -> list[str]:
        return self.inner.probe(operation_key)

    def records(self, after: VenueRecord | None, limit: int) -> list[VenueRecord]:
        return self.inner.records(after, limit)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"TimedAdapter({self.inner!r})"


class _LedgerCollector(Collector):
    def __init__(self, store: Store, clock: Callable[[], float],
                 breakers: Callable[[], Mapping[str, bool]] | None) -> None:
        self._store = store
        self._clock = clock
        self._breakers = breakers

    def collect(self) -> Iterator[Metric]:
        ops = GaugeMetricFamily("effectgate_operations", "Ledger rows by action class and state",
                                labels=["action", "state"])
        for (action, state), n in sorted(self._store.count_by_state().items()):
            ops.add_metric([action, state], n)
        yield ops
        uncertain = self._store.list_operations(state=State.SUBMITTED, limit=_UNCERTAIN_SCAN)
        oldest = min((r.submitted_at or r.updated_at for r in uncertain), default=None)
        age = GaugeMetricFamily("effectgate_uncertain_oldest_age_seconds",
                                "Age of the oldest submitted (uncertain) row; 0 when none")
        age.add_metric([], max(0.0, self._clock() - oldest) if oldest is not None else 0.0)
        yield age
        kinds: dict[str, int] = {"orphan": 0, "duplicate-effect": 0}
        for d in self._store.list_divergences(limit=100_000):
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        div = GaugeMetricFamily("effectgate_divergences", "Divergences recorded, by kind",
                                labels=["kind"])
        for kind, n in sorted(kinds.items()):
            div.add_metric([kind], n)
        yield div
        orphans = GaugeMetricFamily("effectgate_orphans", "Venue records with no ledger row")
        orphans.add_metric([], kinds["orphan"])
        yield orphans
        dups = GaugeMetricFamily("effectgate_duplicate_effects",
                                 "Operation keys with more than one venue record")
        dups.add_metric([], kinds["duplicate-effect"])
        yield dups
        if self._breakers is not None:
            breaker = GaugeMetricFamily("effectgate_breaker_open",
                                        "1 while the action class's circuit breaker is open",
                                        labels=["action"])
            for action, is_open in sorted(self._breakers().items()):
                breaker.add_metric([action], 1 if is_open else 0)
            yield breaker


class Metrics:
    """One registry per service instance (tests build many; nothing global)."""

    def __init__(self, store: Store, clock: Callable[[], float],
                 breakers: Callable[[], Mapping[str, bool]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.dispatch_seconds = Histogram(
            "effectgate_dispatch_seconds", "Duration of outbound venue calls",
            ["action", "adapter", "outcome"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.registry.register(_LedgerCollector(store, clock, breakers))

    def render(self) -> bytes:
        return generate_latest(self.registry)
