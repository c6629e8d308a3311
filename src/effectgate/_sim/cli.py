"""``effectgate simulate``: the deterministic simulation from the command line."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from effectgate._sim.simulator import DEFAULT_STEPS

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        seeds: Annotated[int, typer.Option("--seeds", min=1, help="How many seeds to run.")] = 20,
        seed: Annotated[int, typer.Option("--seed", help="The first seed.")] = 0,
        steps: Annotated[
            int, typer.Option("--steps", min=0, help="Steps per seed.")
        ] = DEFAULT_STEPS,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    ) -> None:
        """Run the boundary against a faulty paper venue, seed by seed; check every invariant.

        Exit 1 if any invariant broke: each failing seed is printed with its shortest failing
        prefix of steps and the command that replays it.
        """
        from effectgate._sim.runner import simulate as run

        summary = run(seeds, first_seed=seed, steps=steps)
        if as_json:
            print(json.dumps(summary.to_dict(), indent=2))
        else:
            for failure in summary.failures:
                print(f"seed {failure.seed} failed after {failure.steps} step(s):")
                for line in failure.history:
                    print(f"  {line}")
                for violation in failure.violations:
                    print(f"  VIOLATION {violation}")
                print(f"  replay: {failure.replay}")
            print(summary.line())
        if summary.failures:
            raise typer.Exit(1)
