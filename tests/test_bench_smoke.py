"""The bench command's smoke mode: it runs every workload this build has and prints ratios.

Never a timed assertion: the real figures come from the full runs in docs/benchmarks.md.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app


def test_bench_smoke_runs_and_prints_ratios(tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--smoke",
            "--store",
            f"sqlite:///{tmp_path / 'ledger.db'}",
            "--workload",
            "B1,B2,B3,B4,B5",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "ratio" in result.output
    report = json.loads(out.read_text())
    workloads = {f["workload"] for f in report["figures"]}
    assert {"B1", "B3", "B4", "B5"} <= workloads
    assert "B2" in report["skipped"]  # needs PostgreSQL
    b1 = [f for f in report["figures"] if f["workload"] == "B1"]
    assert all(f["ratio"] is not None and f["ratio"] > 0 for f in b1)
    assert all(f["notes"]["effectgate"]["commits_per_action"] == 2 for f in b1)
    # Each side's process CPU is reported beside its wall time (the library's own cost).
    assert all(
        f["notes"][side]["cpu_us_per_action"] > 0 for f in b1 for side in ("effectgate", "floor")
    )
    off = next(f for f in b1 if "synchronous=OFF" in f["variant"])
    notes = off["notes"]
    assert notes["cpu_overhead_us_per_action"] == round(
        notes["effectgate"]["cpu_us_per_action"] - notes["floor"]["cpu_us_per_action"], 1
    )
    b3 = next(f for f in report["figures"] if f["workload"] == "B3" and f["unit"] == "calls")
    assert b3["effectgate"] == b3["floor"]  # venue calls == operation ids after recovery
    b5 = [f for f in report["figures"] if f["workload"] == "B5"]
    assert [(f["variant"], f["notes"]["clients"]) for f in b5] == [
        ("HTTP, 16 clients", 16),
        ("MCP (streamable HTTP), 16 clients", 16),
        ("HTTP, 64 clients", 64),
    ]
    # Every request answered (201 or a tools/call result) with an acknowledged operation, and
    # each door figure carries its ratio to in-process B1 on the same store, same run.
    assert all(f["effectgate"] > 0 and f["floor"] > 0 and f["ratio"] > 0 for f in b5)
    # the bench leaves nothing beside the given path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


@pytest.mark.postgres
def test_b2_alternates_both_sides_on_postgresql(tmp_path) -> None:
    """B2 runs both sides in every worker, in alternating rounds, and counts every action."""
    from conftest import require_pg

    out = tmp_path / "b2.json"
    url = require_pg()
    result = CliRunner().invoke(
        app, ["bench", "--smoke", "--store", url, "--workload", "B2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())["figures"]
    assert [f["notes"]["workers"] for f in figures] == [1, 2]
    for f in figures:
        notes = f["notes"]
        assert notes["rounds"] >= 2 and f["effectgate"] > 0 and f["floor"] > 0
        # both sides ran the same number of actions, every worker its share of every round
        assert notes["actions"] == notes["floor_actions"]
        assert notes["actions"] % (notes["workers"] * notes["rounds"]) == 0


class TestWindowSortBench:
    def test_it_sorts_both_ways_and_times_the_store_alternative(self) -> None:
        """The figures behind spilling to files (docs/adapters.md); the bench itself checks
        the order and the count of what it sorted, so a wrong sort fails here."""
        from effectgate.bench.window_sort import run, sqlite_scratch

        got = run(2_000, 300)
        assert got["spilled"]["runs"] == 6 and got["in_memory"]["runs"] == 0
        assert got["spilled"]["peak_heap_mib"] > 0
        scratch = sqlite_scratch(2_000, 300)
        assert scratch["write_lock_max_ms"] > 0


class TestRatioTargets:
    """The ratio plot draws a target line only where issue 21 sets a ratio target."""

    def test_each_figure_gets_its_workloads_target_or_none(self) -> None:
        from effectgate.bench.common import ratio_target

        def fig(workload: str, variant: str, **notes: int) -> dict[str, object]:
            return {"workload": workload, "variant": variant, "notes": notes}

        assert ratio_target(fig("B1", "SQLite WAL synchronous=FULL"), 2) == 0.7
        assert ratio_target(fig("B1", "SQLite WAL synchronous=OFF"), 2) is None
        assert ratio_target(fig("B2", "PostgreSQL, 2 worker processes", workers=2), 2) == 0.7
        assert ratio_target(fig("B2", "PostgreSQL, 4 worker processes", workers=4), 2) is None
        assert ratio_target(fig("B5", "HTTP, 16 clients", clients=16), 2) == 0.5
        assert ratio_target(fig("B5", "HTTP, 64 clients", clients=64), 2) is None
        assert ratio_target(fig("B5", "MCP (streamable HTTP), 16 clients", clients=16), 2) is None


def test_b6_fleet_reports_both_doors_against_the_ideal(tmp_path) -> None:
    """B6 runs in process and over HTTP, each figure against the ideal agents / latency."""
    out = tmp_path / "b6.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--store",
            f"sqlite:///{tmp_path / 'ledger.db'}",
            "--workload",
            "B6",
            "--agents",
            "3",
            "--latency-ms",
            "20",
            "--n",
            "12",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())["figures"]
    assert [f["variant"] for f in figures] == [
        "SQLite WAL FULL, in-process, agents=3",
        "SQLite WAL FULL, HTTP, agents=3",
    ]
    for f in figures:
        assert f["workload"] == "B6" and f["floor"] == 3 / 0.020
        notes = f["notes"]
        assert notes["n"] == 12 and notes["agents"] == 3
        # every action waited for the venue: no end-to-end latency below it
        assert notes["p50_ms"] >= 20 and notes["p99_added_ms"] >= 0
        # the server's CPU is read from /proc in 10 ms ticks: a tiny HTTP run may round to zero
        assert notes["cpu_us_per_action"] > 0 or "HTTP" in f["variant"]
        # 3 agents can never beat 3 / 20 ms: a ratio above 1 would mean the wait was skipped
        assert 0 < f["ratio"] <= 1.0
    assert 0 < figures[0]["notes"]["commits_per_action"] <= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b6.json"]


def test_b6_refuses_a_fleet_of_none(tmp_path) -> None:
    result = CliRunner().invoke(app, ["bench", "--workload", "B6", "--agents", "0"])
    assert result.exit_code != 0 and "fleet sizes must be >= 1" in result.output
