"""The dispatch counts behind the console's rate chart (issue 17), on SQLite and PostgreSQL:
every send is counted at its dispatch time, per class; a hold, a refusal or a replay is not."""

from __future__ import annotations

from decimal import Decimal

from effectgate import Gate, LimitPolicy, Operator, PolicySet
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock, PaperAdapter, PaperVenue


def gate(store: Store, clock: ManualClock) -> Gate:
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )


class TestDispatchCounts:
    def test_sends_are_counted_in_their_window_per_class(self, store: Store) -> None:
        clock = ManualClock()
        g = gate(store, clock)
        start = clock()
        for i in range(3):
            g.submit("submit_order", f"rate-{i}", EXAMPLE_ORDER)
        clock.advance(120)
        g.submit("submit_order", "rate-late", EXAMPLE_ORDER)
        g.submit("submit_order", "rate-late", EXAMPLE_ORDER)  # a replay sends nothing
        assert store.count_dispatched(start) == {"submit_order": 4}
        assert store.count_dispatched(clock() - 60) == {"submit_order": 1}
        assert store.count_dispatched(clock() + 1) == {}

    def test_a_held_or_refused_action_is_not_a_dispatch(self, store: Store) -> None:
        clock = ManualClock()
        g = gate(store, clock)
        Operator(store=store, registry=g.registry, clock=clock).kill("submit_order", operator="ops")
        g.submit("submit_order", "rate-held", EXAMPLE_ORDER)
        g.submit("submit_order", "rate-big", {**EXAMPLE_ORDER, "quantity": "1000"})
        assert store.count_dispatched(0.0) == {}
