"""The deterministic simulation (issues 22, 38): it holds on clean code, replays byte for byte,
and catches every planted bug of the mutation catalogue within a small seed budget.
Invariants 1-8 and 11, each mutation naming the one whose checker must catch it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._sim.actor import Mutation
from effectgate._sim.mutations import CATALOGUE, applied, by_name, expected_invariant, resolve
from effectgate._sim.mutations.hunt import hunt
from effectgate._sim.runner import shrink, simulate
from effectgate._sim.simulator import run_seed

#: CI's share: about 0.1 s a seed on one core. The nightly run is documented in
#: docs/simulation.md (``effectgate simulate --seeds 2000``).
CI_SEEDS = 100
#: Each mutation must be caught within this many seeds (docs/simulation.md lists where).
BUDGET = 15
SRC = Path(__file__).resolve().parent.parent / "src" / "effectgate"


def test_clean_code_holds_every_invariant_on_the_ci_seeds() -> None:
    summary = simulate(CI_SEEDS)
    assert summary.violations == 0, [str(v) for f in summary.failures for v in f.violations]


def test_a_seed_replays_byte_for_byte() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.history == second.history and first.digest == second.digest
    assert run_seed(8).digest != first.digest


def test_a_shorter_run_is_a_prefix_of_a_longer_one() -> None:
    # What shrinking relies on: steps never depend on how many are planned.
    short, long = run_seed(3, 30), run_seed(3, 60)
    assert short.history[:30] == long.history[:30]


def test_the_catalogue_has_at_least_25_mutations_of_production_code() -> None:
    assert len(CATALOGUE) >= 25
    for m in CATALOGUE:
        owner, attr = resolve(m.target)
        # The target is production code, never the simulator itself.
        assert not m.target.startswith("effectgate._sim"), m.target
        assert callable(vars(owner)[attr]), m.target


@pytest.mark.parametrize("mutation", CATALOGUE, ids=lambda m: m.name)
def test_each_mutation_is_caught_by_its_invariant(mutation: Mutation) -> None:
    owner, attr = resolve(mutation.target)
    original = vars(owner)[attr]
    found = hunt(mutation, budget=BUDGET)
    assert found.caught, f"{mutation.name} not caught in {BUDGET} seeds"
    numbers = {v.invariant for v in found.violations}
    assert expected_invariant(mutation) & numbers, (mutation.invariant, found.line())
    # The patch is undone after the run: production code is the original again.
    assert vars(owner)[attr] is original
    # Under the mutation, the failing seed still replays to the same history.
    assert found.seed is not None
    with applied(mutation):
        again, twice = run_seed(found.seed), run_seed(found.seed)
    assert again.digest == twice.digest and again.violations == list(found.violations)


@pytest.mark.parametrize(
    "name", ["redispatch_uncertain", "write_off_inside_horizon", "abort_pass_on_refused_move"]
)
def test_a_caught_mutation_shrinks_and_its_replay_reproduces_it(name: str) -> None:
    m = by_name(name)
    found = hunt(m, budget=BUDGET)
    assert found.seed is not None
    with applied(m):
        failed = run_seed(found.seed)
        shrunk = shrink(failed)
        assert shrunk.violations and shrunk.steps <= failed.steps
        # The printed replay command reproduces it exactly.
        again = run_seed(shrunk.seed, shrunk.steps)
        assert again.digest == shrunk.digest and again.violations == shrunk.violations


def test_a_mutation_is_undone_when_its_run_raises() -> None:
    m = by_name("write_off_inside_horizon")
    owner, attr = resolve(m.target)
    original = vars(owner)[attr]
    with pytest.raises(RuntimeError, match="boom"), applied(m):
        assert vars(owner)[attr] is not original
        raise RuntimeError("boom")
    assert vars(owner)[attr] is original
    with pytest.raises(ValueError, match="unknown mutation"):
        by_name("no_such_bug")


def test_no_production_module_reads_a_switch_or_names_the_catalogue() -> None:
    # Bugs are planted from outside only: nothing outside the simulator mentions it.
    for path in SRC.rglob("*.py"):
        if "_sim" in path.parts or path.name == "main.py":
            continue
        text = path.read_text()
        assert "_sim.mutations" not in text and "_bugs" not in text, path


def test_cli_prints_the_summary_line() -> None:
    out = CliRunner().invoke(app, ["simulate", "--seeds", "2", "--steps", "15"])
    assert out.exit_code == 0, out.output
    assert re.fullmatch(
        r"seeds=2 violations=0 history_digest=[0-9a-f]{64} seeds_per_s=[0-9.]+\n", out.output
    )


def test_cli_prints_a_failing_seed_with_its_replay_command() -> None:
    with applied(by_name("write_off_inside_horizon")):
        out = CliRunner().invoke(app, ["simulate", "--seeds", "3", "--json"])
    assert out.exit_code == 1
    report = json.loads(out.output)
    assert report["violations"] >= 1
    failure = report["failures"][0]
    assert failure["replay"] == (
        f"effectgate simulate --seeds 1 --seed {failure['seed']} --steps {failure['steps']}"
    )
    assert failure["violations"][0]["invariant"] == 4


def test_cli_hunts_mutations_one_line_each_and_counts_them() -> None:
    args = ["simulate", "--mutations", "--budget", "3"]
    out = CliRunner().invoke(
        app, [*args, "--mutation", "audit_link_skipped", "--mutation", "kill_switch_ignored"]
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert re.fullmatch(
        r"audit_link_skipped: caught at seed \d+ step \d+ by invariant 8 .*", lines[0]
    )
    assert re.fullmatch(
        r"kill_switch_ignored: caught at seed \d+ step \d+ by invariant 7 .*", lines[1]
    )
    assert lines[-1] == "mutations=2 caught=2"


def test_cli_exits_nonzero_when_a_mutation_is_not_caught() -> None:
    # With no steps nothing is ever killed: ignoring the kill switch cannot show.
    one = ["simulate", "--mutations", "--budget", "1", "--steps", "0"]
    out = CliRunner().invoke(app, [*one, "--mutation", "kill_switch_ignored"])
    assert out.exit_code == 1
    assert out.output.splitlines() == [
        "kill_switch_ignored: NOT CAUGHT in 1 seed(s)",
        "mutations=1 caught=0",
    ]
    bad = CliRunner().invoke(app, ["simulate", "--mutations", "--mutation", "nope"])
    assert bad.exit_code != 0 and "unknown mutation" in bad.output
