"""The simulator's runs actor (issue 38, "every capability with state"): a harness journalling run
calls, binding effects to tool calls, sealing runs, taking and restoring recovery snapshots and
spending run budgets, through the real store. Invariants 1, 8, 12 and 13, each test naming its
own."""

from __future__ import annotations

import pytest

from effectgate._sim.actors import default_actors
from effectgate._sim.actors.runs import Runs
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with

SEEDS = range(4)


def _lines(seeds: range) -> list[str]:
    return [line for s in seeds for line in run_seed(s, actors=[Runs()]).history if " run-" in line]


def test_clean_code_holds_every_invariant_of_runs_and_replays() -> None:
    """Invariants 1, 8, 12, 13 hold on a few seeds with the runs actor alone; the same seed
    gives the same history digest twice (no wall clock, no minted id, no socket)."""
    for seed in SEEDS:
        alone = run_seed(seed, actors=[Runs()])
        assert alone.violations == [], (seed, alone.violations)
        assert run_seed(seed, actors=[Runs()]).digest == alone.digest


def test_its_steps_happen_and_hostile_ones_are_refused() -> None:
    """Invariants 12, 13: across a few seeds every step kind runs and meets what it aims at:
    calls journalled and replayed from the journal, effects admitted and refused over budget,
    seals, snapshots taken and restored after a restart, and each hostile round refused."""
    text = " ".join(_lines(range(12)))
    for mark in (
        "model recorded",
        "tool recorded",
        "-> acknowledged",
        "-> refused tool_calls",
        "-> refused settled",
        "recorded again -> from the journal",
        "replayed -> acknowledged (replayed)",
        "replayed after the seal -> run_sealed",
        "sealed with",
        "settled",
        "stored=True",
        "(open) snapshot -> run_not_sealed",
        "snapshot(s) restored",
        "call after the seal -> run_sealed",
        "after the seal -> run_sealed",
        "changed call -> run_call_conflict",
        "edited -> refused",
        "settled again -> new=False",
        "crashed at",
    ):
        assert mark in text, mark
    assert "-> recorded" not in text and "-> verified" not in text and "new=True" not in text


def test_the_summary_counts_the_runs_actor() -> None:
    """The summary line names the capability: each run step counts under ``runs``, and the
    crashes it arms under the faults (``run_crash``)."""
    result = run_seed(0, actors=[Runs()])
    steps = sum(" run-" in line for line in result.history)
    assert result.drove["runs"] == steps > 0
    assert "runs" in {a.name for a in default_actors()}


RUN_MUTATIONS = [
    "run_replay_answered_new",
    "sealed_run_records_call",
    "snapshot_drops_last_call",
    "snapshot_digest_unchecked",
    "run_leaf_settled_on_allocation",
    "run_tool_slots_unchecked",
]


@pytest.mark.parametrize("name", RUN_MUTATIONS)
def test_its_mutations_are_caught_only_when_the_runs_actor_runs(name: str) -> None:
    """A planted bug of journals, seals, snapshots or run budgets goes unseen without the runs
    actor (nothing else records a run call) and is caught with it by the invariant it names;
    the failing seed replays to the same digest under the mutation."""
    assert_caught_only_with(name, Runs, clean_seeds=3)
