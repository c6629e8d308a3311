"""What the simulator's per-actor tests share: a planted bug caught by one actor alone."""

from __future__ import annotations

from collections.abc import Collection

from effectgate._sim.actor import Actor
from effectgate._sim.actors import default_actors
from effectgate._sim.mutations import applied, by_name, expected_invariant
from effectgate._sim.mutations.hunt import DEFAULT_BUDGET, hunt
from effectgate._sim.simulator import run_seed

__all__ = ["assert_caught_only_with"]


def assert_caught_only_with(
    name: str,
    actor: type[Actor] | tuple[type[Actor], ...],
    *,
    clean_seeds: int,
    budget: int = DEFAULT_BUDGET,
    invariants: Collection[int] | None = None,
) -> None:
    """Mutation ``name`` goes unseen for ``clean_seeds`` seeds without ``actor`` (one class or
    several), is caught within ``budget`` seeds (default: the catalogue's, since where a bug is
    first caught moves whenever an actor is added) with every actor by one of ``invariants``
    (default: the catalogue's own), and its failing seed replays to the same digest."""
    m = by_name(name)
    wanted = set(expected_invariant(m) if invariants is None else invariants)

    def others() -> list[Actor]:  # fresh per seed: actors keep per-seed state
        return [a for a in default_actors() if not isinstance(a, actor)]

    with applied(m):
        seen = [s for s in range(clean_seeds) if run_seed(s, actors=others()).violations]
    if seen:
        raise AssertionError(f"{name}: caught without its actor at seeds {seen}")
    found = hunt(m, budget=budget)
    if not found.caught or not wanted & {v.invariant for v in found.violations}:
        raise AssertionError(f"{name}: not caught by invariant {sorted(wanted)}: {found.line()}")
    if found.seed is None:  # pragma: no cover - caught implies a seed
        raise AssertionError(f"{name}: caught with no seed")
    with applied(m):
        first, again = run_seed(found.seed).digest, run_seed(found.seed).digest
    if first != again:
        raise AssertionError(f"{name}: seed {found.seed} does not replay ({first} != {again})")
