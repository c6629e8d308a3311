"""A prune removes rows whose records the venue still lists (a key-ordered venue lists every
record for good): the reconciler must account those records by what the prune kept, not call
them orphans (invariant 5: every divergence is real and reported once), and an orphan's own
entry, about a key with no row, must not stop every later prune (invariant 8: retention keeps
the evidence, and can still cut). Found by the simulator's evidence actor. On both stores."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler
from effectgate._evidence.anchor import FileAnchor
from effectgate._evidence.audit import verify_store
from effectgate._execute.retention import min_ages, prune
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock


class World:
    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.store, self.tmp = store, tmp_path
        self.clock = ManualClock()
        self.venue = PaperVenue()
        registry = default_registry()
        self.gate = Gate(
            store=store,
            registry=registry,
            adapters={"paper": PaperAdapter(self.venue)},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
            clock=self.clock,
        )
        self.rec = Reconciler(
            store=store,
            registry=registry,
            adapters={"paper": PaperAdapter(self.venue)},
            clock=self.clock,
        )
        self.window = max(min_ages(registry).values())

    def orders(self, *ids: str) -> None:
        for op in ids:
            self.gate.submit("submit_order", op, {**EXAMPLE_ORDER, "quantity": "1"})
            self.clock.advance(1)

    def age_and_prune(self):  # type: ignore[no-untyped-def]
        self.clock.advance(self.window + 60)
        report, verified = prune(
            self.store,
            self.gate.registry,
            [FileAnchor(self.tmp / "anchors.jsonl")],
            before=self.clock(),
            by="alice",
            clock=self.clock,
        )
        assert verified.ok, verified
        return report

    def new_divergences(self) -> list[tuple[str, str]]:
        return [(kind, key) for kind, key, _, _ in self.rec.sweep().new_divergences]


N = 20


def pruned(w: World) -> list[str]:
    return [f"op-{i}" for i in range(N) if w.store.get("default", f"op-{i}") is None]


def test_invariant_5_a_pruned_rows_listed_record_is_no_orphan(store: Store, tmp_path: Path) -> None:
    w = World(store, tmp_path)
    w.orders(*(f"op-{i}" for i in range(N)))
    report = w.age_and_prune()
    gone = pruned(w)
    assert report.operations == len(gone) > 0
    assert all(w.venue.find(f"default:{op}") for op in gone)  # the venue still lists them
    assert w.new_divergences() == []
    assert store.pruned_operation("default", gone[0]) == (
        "acknowledged",
        w.venue.find(f"default:{gone[0]}")[0],
    )
    assert store.pruned_operation("default", "never") is None


def test_invariant_8_a_second_prune_is_not_stopped_by_the_first(
    store: Store, tmp_path: Path
) -> None:
    """The sweep between two prunes files nothing about the first one's rows, so nothing about
    a key with no row stops the second: it removes what has aged since."""
    w = World(store, tmp_path)
    w.orders(*(f"op-{i}" for i in range(N)))
    first = w.age_and_prune()
    assert first.operations > 0
    assert w.new_divergences() == []
    w.orders(*(f"op-{i}" for i in range(N, 2 * N)))
    second = w.age_and_prune()
    assert second.operations > 0, second.stopped
    assert not any("no row" in why for why in second.stopped.values()), second.stopped
    assert w.new_divergences() == []
    assert verify_store(store).ok


def test_invariant_5_a_second_record_under_a_pruned_key_is_a_duplicate(
    store: Store, tmp_path: Path
) -> None:
    w = World(store, tmp_path)
    w.orders(*(f"op-{i}" for i in range(N)))
    w.age_and_prune()
    op = pruned(w)[0]
    w.venue.inject_record(f"default:{op}")
    assert w.new_divergences() == [("duplicate-effect", f"default:{op}")]
