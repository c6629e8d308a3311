"""Hunting a mutation: run seeds with it applied until a checker catches it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from effectgate._evidence.invariants import Violation
from effectgate._sim.actor import Mutation
from effectgate._sim.mutations import CATALOGUE, applied
from effectgate._sim.simulator import DEFAULT_STEPS, run_seed

__all__ = ["DEFAULT_BUDGET", "Hunt", "hunt", "hunt_all"]

#: Seeds tried per mutation before it counts as not caught.
DEFAULT_BUDGET = 50


@dataclass(frozen=True)
class Hunt:
    """One mutation's hunt: the seed and step that caught it and what was seen (None: not)."""

    mutation: Mutation
    seeds_tried: int
    seed: int | None = None
    step: int | None = None
    violations: tuple[Violation, ...] = ()

    @property
    def caught(self) -> bool:
        return self.seed is not None

    def line(self) -> str:
        if not self.caught:
            return f"{self.mutation.name}: NOT CAUGHT in {self.seeds_tried} seed(s)"
        first = self.violations[0]
        return (
            f"{self.mutation.name}: caught at seed {self.seed} step {self.step} by invariant "
            f"{first.invariant} ({first.message})"
        )


def hunt(
    m: Mutation, *, budget: int = DEFAULT_BUDGET, first_seed: int = 0, steps: int = DEFAULT_STEPS
) -> Hunt:
    """Run seeds ``first_seed ..`` with ``m`` applied until one fails, at most ``budget``."""
    with applied(m):
        for tried, seed in enumerate(range(first_seed, first_seed + budget), start=1):
            result = run_seed(seed, steps)
            if result.violations:
                return Hunt(m, tried, seed, result.failed_at, tuple(result.violations))
    return Hunt(m, budget)


def hunt_all(
    mutations: Iterable[Mutation] = CATALOGUE,
    *,
    budget: int = DEFAULT_BUDGET,
    first_seed: int = 0,
    steps: int = DEFAULT_STEPS,
    progress: Callable[[Hunt], None] | None = None,
) -> list[Hunt]:
    """:func:`hunt` each mutation in turn (the catalogue by default)."""
    found = []
    for m in mutations:
        h = hunt(m, budget=budget, first_seed=first_seed, steps=steps)
        if progress is not None:
            progress(h)
        found.append(h)
    return found
