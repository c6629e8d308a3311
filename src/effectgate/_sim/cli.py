"""``effectgate simulate``: the deterministic simulation from the command line."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from effectgate._sim.simulator import DEFAULT_STEPS
from effectgate.errors import StoreError

if TYPE_CHECKING:
    from effectgate._sim.simulator import SeedResult

__all__ = ["register"]

#: A long run (overnight) says how far it got, on stderr, every this many seeds.
PROGRESS_EVERY = 1000


class _Progress:
    """Every :data:`PROGRESS_EVERY` seeds, one stderr line: how many ran, which failed so far."""

    def __init__(self) -> None:
        self.done = 0
        self.failing: list[int] = []
        self.started = time.perf_counter()

    def __call__(self, result: SeedResult) -> None:
        self.done += 1
        if result.violations:
            self.failing.append(result.seed)
        if self.done % PROGRESS_EVERY == 0:
            failing = ", ".join(map(str, self.failing[:20])) or "none"
            print(
                f"progress: {self.done} seeds in {time.perf_counter() - self.started:.0f} s; "
                f"failing: {failing}",
                file=sys.stderr,
                flush=True,
            )


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        seeds: Annotated[int, typer.Option("--seeds", min=1, help="How many seeds to run.")] = 20,
        seed: Annotated[int, typer.Option("--seed", help="The first seed.")] = 0,
        steps: Annotated[
            int, typer.Option("--steps", min=0, help="Steps per seed.")
        ] = DEFAULT_STEPS,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
        jobs: Annotated[
            int | None,
            typer.Option(
                "--jobs", min=1, help="Worker processes (default: one per core); 1 runs here."
            ),
        ] = None,
        mutations: Annotated[
            bool,
            typer.Option(
                "--mutations", help="Hunt each planted bug of the catalogue instead (see docs)."
            ),
        ] = False,
        budget: Annotated[
            int, typer.Option("--budget", min=1, help="With --mutations: seeds per mutation.")
        ] = 50,  # hunt.DEFAULT_BUDGET (imported lazily, as the catalogue is)
        store: Annotated[
            str | None,
            typer.Option(
                "--store",
                help="Run on a fresh schema per seed of this postgresql:// URL (default SQLite).",
            ),
        ] = None,
        only: Annotated[
            list[str] | None,
            typer.Option("--mutation", help="With --mutations: hunt only this one (repeatable)."),
        ] = None,
    ) -> None:
        """Run the boundary against a faulty paper venue, seed by seed; check every invariant.

        Exit 1 if any invariant broke: each failing seed is printed with its shortest failing
        prefix of steps and the command that replays it. With ``--mutations``: exit 1 if any
        planted bug went uncaught within its seed budget.
        """
        if mutations:
            _hunt(budget=budget, first_seed=seed, steps=steps, only=only or [])
            return
        from effectgate._sim.runner import default_jobs, seed_runner
        from effectgate._sim.runner import simulate as run

        if store not in (None, "sqlite") and not store.startswith(("postgresql://", "postgres://")):
            raise typer.BadParameter("'sqlite' or a postgresql:// URL", param_hint="--store")
        try:
            summary = run(
                seeds,
                first_seed=seed,
                steps=steps,
                jobs=jobs or default_jobs(),
                run=seed_runner(store),
                progress=_Progress(),
            )
        except StoreError as exc:  # the server is unreachable or refused the schema
            raise typer.BadParameter(exc.message, param_hint="--store") from None
        if as_json:
            print(json.dumps(summary.to_dict(), indent=2))
        else:
            for failure in summary.failures:
                print(
                    f"seed {failure.seed} failed after {failure.steps} step(s), "
                    f"history_digest={failure.digest}:"
                )
                for line in failure.history:
                    print(f"  {line}")
                print(f"  first violation: {failure.violations[0]}")
                for violation in failure.violations[1:]:
                    print(f"  also: {violation}")
                print(
                    f"  replay: {failure.replay}"
                    + (f" --store '{_masked(store)}'" if store else "")
                )
            print("\n".join(summary.lines()))
        if summary.failures:
            raise typer.Exit(1)


def _hunt(*, budget: int, first_seed: int, steps: int, only: list[str]) -> None:
    """One line per mutation as it is hunted, then ``mutations=N caught=M``."""
    from effectgate._sim.mutations import CATALOGUE, by_name
    from effectgate._sim.mutations.hunt import Hunt, hunt_all

    try:
        chosen = [by_name(n) for n in only] if only else list(CATALOGUE)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--mutation") from None

    def show(h: Hunt) -> None:
        print(h.line(), flush=True)

    found = hunt_all(chosen, budget=budget, first_seed=first_seed, steps=steps, progress=show)
    caught = sum(h.caught for h in found)
    print(f"mutations={len(found)} caught={caught}")
    if caught < len(found):
        raise typer.Exit(1)


def _masked(url: str) -> str:
    """The store URL for a replay line, its password (if any) masked: output reaches CI logs."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()
