"""Per-plan budget gauges for ``/metrics`` (docs/budgets.md).

A scrape reads the newest :data:`MAX_PLANS` plan accounts (each at most 1,024 reservations):
bounded whatever the ledger's size. Labels: scope, plan and dimension.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from effectgate._core.budgets import DIMENSIONS
from effectgate.store.roles import Store

__all__ = ["MAX_PLANS", "plan_metrics"]

#: The most plan accounts one scrape reports (newest first).
MAX_PLANS = 50


def plan_metrics(store: Store) -> Iterator[Metric]:
    labels = ["scope", "plan", "dimension"]
    used = GaugeMetricFamily(
        "effectgate_plan_used", "A plan's conservative charge (settled + reserved)", labels=labels
    )
    reserved = GaugeMetricFamily(
        "effectgate_plan_reserved", "What open reservations of a plan still hold", labels=labels
    )
    remaining = GaugeMetricFamily(
        "effectgate_plan_remaining", "A plan's capacity left (bounded dimensions)", labels=labels
    )
    count = GaugeMetricFamily(
        "effectgate_plan_reservations", "Reservations in a plan account", labels=["scope", "plan"]
    )
    for scope, plan in store.list_plan_accounts(limit=MAX_PLANS):
        snap = store.plan_account(scope, plan)
        _, held = snap.split()
        left = snap.remaining()
        for d in DIMENSIONS:
            used.add_metric([scope, plan, d], getattr(snap.used, d))
            reserved.add_metric([scope, plan, d], getattr(held, d))
            rest = left[d]
            if rest is not None:
                remaining.add_metric([scope, plan, d], rest)
        count.add_metric([scope, plan], snap.reservations)
    yield from (used, reserved, remaining, count)
