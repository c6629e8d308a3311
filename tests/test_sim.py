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
from effectgate._sim.mutations.hunt import DEFAULT_BUDGET, hunt
from effectgate._sim.runner import shrink, simulate
from effectgate._sim.simulator import run_seed

#: CI's share: about 0.1 s a seed on one core. The nightly run is documented in
#: docs/simulation.md (``effectgate simulate --seeds 2000``).
CI_SEEDS = 100
#: Each mutation must be caught within this many seeds (docs/simulation.md lists where).
BUDGET = DEFAULT_BUDGET  # the CLI's default: more actors dilute each one's steps
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


def test_cli_prints_what_it_drove_the_faults_then_the_summary_line() -> None:
    out = CliRunner().invoke(app, ["simulate", "--seeds", "2", "--steps", "15", "--jobs", "1"])
    assert out.exit_code == 0, out.output
    drove, faults, last = out.output.splitlines()
    assert re.fullmatch(r"drove( [a-z_]+=\d+)+", drove) and " gate=" in drove
    assert re.fullmatch(r"faults( [a-z_]+=\d+)+", faults)
    assert re.fullmatch(
        r"seeds=2 violations=0 history_digest=[0-9a-f]{64} seeds_per_s=[0-9.]+ jobs=1", last
    )


def test_the_summary_names_every_actor_and_core_fault_and_an_actors_own_counters() -> None:
    """Item 8: counts are generic: each actor's steps count under its name, and what its
    ``counters()`` reports counts beside it (``fault:`` keys as faults), with no table to edit."""
    from effectgate._sim.actors import default_actors

    class Door:
        name = "http"

        def steps(self) -> tuple[tuple[str, int], ...]:
            return (("http-call", 5),)

        def configure(self, spec: object) -> None:
            return None

        def step(self, kind: str, world: object, rng: object) -> str:
            return "called"

        def check(self, world: object, *, final: bool) -> list[object]:
            return []

        def counters(self) -> dict[str, int]:
            return {"mcp": 2, "fault:venue_timeout": 1}

    actors = default_actors()
    result = run_seed(4, 120, actors=[*actors, Door()])  # type: ignore[list-item]
    assert not result.violations, result.violations
    assert result.drove["http"] == sum(1 for h in result.history if " http-call: " in h) > 0
    assert result.drove["mcp"] == 2 and result.faults["venue_timeout"] == 1
    summary = simulate(6, jobs=1)
    for name in [a.name for a in actors] + ["gate", "approvals", "reconcile", "kill"]:
        assert summary.drove[name] > 0, name
    for fault in ("crash", "lost_reply", "lost_commit", "injected_record", "clock_jump"):
        assert summary.faults[fault] > 0, fault
    # The counts come from the schedule: the same seeds count the same.
    again = simulate(6, jobs=1)
    assert (again.drove, again.faults) == (summary.drove, summary.faults)


def test_the_digest_is_the_same_for_one_worker_and_two() -> None:
    """Replay: seeds run in worker processes sum to the same history digest, in seed order,
    as in this process, with the same counts."""
    here = simulate(6, first_seed=20, steps=40, jobs=1)
    pooled = simulate(6, first_seed=20, steps=40, jobs=2)
    assert pooled.jobs == 2 and here.jobs == 1
    assert pooled.digest == here.digest
    assert (pooled.drove, pooled.faults) == (here.drove, here.faults)
    assert simulate(6, first_seed=21, steps=40, jobs=2).digest != here.digest


def test_cli_prints_a_failing_seed_with_its_replay_command() -> None:
    # --jobs 1: the mutation is patched in this process; worker processes start clean.
    with applied(by_name("write_off_inside_horizon")):
        out = CliRunner().invoke(app, ["simulate", "--seeds", "3", "--json", "--jobs", "1"])
        text = CliRunner().invoke(app, ["simulate", "--seeds", "3", "--jobs", "1"])
    assert out.exit_code == 1
    report = json.loads(out.output)
    assert report["violations"] >= 1
    failure = report["failures"][0]
    assert failure["replay"] == (
        f"effectgate simulate --seeds 1 --seed {failure['seed']} --steps {failure['steps']}"
    )
    assert failure["violations"][0]["invariant"] == 4
    assert failure["first_violation"] == failure["violations"][0]
    assert re.fullmatch(r"[0-9a-f]{64}", failure["history_digest"])
    # The text form names the digest, the first violated invariant and the replay command.
    assert text.exit_code == 1
    assert (
        f"seed {failure['seed']} failed after {failure['steps']} step(s), "
        f"history_digest={failure['history_digest']}:"
    ) in text.output
    assert "  first violation: invariant 4: " in text.output
    assert f"  replay: {failure['replay']}" in text.output


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


def test_cli_reports_progress_on_stderr_for_a_long_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # A long run (overnight) says how far it got, and which seeds failed so far, as it goes.
    from effectgate._sim import cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY", 2)
    args = ["simulate", "--seeds", "4", "--steps", "5", "--jobs", "1"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert re.search(r"^progress: 2 seeds in \d+ s; failing: none$", out.stderr, re.M)
    assert re.search(r"^progress: 4 seeds in \d+ s; failing: none$", out.stderr, re.M)
    assert "progress" not in out.stdout


def test_the_cli_hunts_as_far_as_the_tests() -> None:
    """``simulate --mutations`` without ``--budget`` tries as many seeds as these tests do."""
    out = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert f"[default: {DEFAULT_BUDGET}]" in out.output.split("--budget", 1)[1].split("\n", 1)[0]
