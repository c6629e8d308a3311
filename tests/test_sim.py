"""The deterministic simulation (issue 22): it holds on clean code, replays byte for byte, and
finds each re-introduced bug within a fixed number of seeds. Invariants 1, 4, 5, 7, 8, 11."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._sim import _bugs
from effectgate._sim.runner import shrink, simulate
from effectgate._sim.simulator import run_seed

#: CI's share: about 0.1 s a seed on one core. The nightly run is documented in
#: docs/simulation.md (``effectgate simulate --seeds 2000``).
CI_SEEDS = 100
#: Each bug must be found within this many seeds (docs/simulation.md lists how many it took).
BUG_BUDGET = 15
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


@pytest.mark.parametrize("bug", _bugs.BUGS)
def test_the_simulator_finds_each_reintroduced_bug(bug: str) -> None:
    with _bugs.reintroduced(bug):
        found = next(
            (r for r in (run_seed(seed) for seed in range(BUG_BUDGET)) if r.violations), None
        )
        assert found is not None, f"{bug} not found in {BUG_BUDGET} seeds"
        shrunk = shrink(found)
        assert shrunk.violations and shrunk.steps <= found.steps
        # The printed replay command reproduces it exactly.
        again = run_seed(shrunk.seed, shrunk.steps)
        assert again.digest == shrunk.digest and again.violations == shrunk.violations
    assert not getattr(_bugs.ACTIVE, bug)


def test_bug_switches_are_off_and_unreachable_outside_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not any(getattr(_bugs.ACTIVE, b) for b in _bugs.BUGS)
    monkeypatch.delitem(sys.modules, "pytest")
    with pytest.raises(RuntimeError), _bugs.reintroduced(_bugs.BUGS[0]):
        pass
    # Nothing in the package turns one on: each is read at exactly one line, never set.
    for path in SRC.rglob("*.py"):
        if path.name == "_bugs.py":
            continue
        text = path.read_text()
        assert "reintroduced" not in text, path
        assert not re.search(r"ACTIVE\.\w+\s*=[^=]", text), path


def test_cli_prints_the_summary_line() -> None:
    out = CliRunner().invoke(app, ["simulate", "--seeds", "2", "--steps", "15"])
    assert out.exit_code == 0, out.output
    assert re.fullmatch(
        r"seeds=2 violations=0 history_digest=[0-9a-f]{64} seeds_per_s=[0-9.]+\n", out.output
    )


def test_cli_prints_a_failing_seed_with_its_replay_command() -> None:
    with _bugs.reintroduced("write_off_inside_horizon"):
        out = CliRunner().invoke(app, ["simulate", "--seeds", "3", "--json"])
    assert out.exit_code == 1
    report = json.loads(out.output)
    assert report["violations"] >= 1
    failure = report["failures"][0]
    assert failure["replay"] == (
        f"effectgate simulate --seeds 1 --seed {failure['seed']} --steps {failure['steps']}"
    )
    assert failure["violations"][0]["invariant"] == 4
