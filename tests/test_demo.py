"""`effectgate demo` is a product surface: every scenario must hold, and the CLI says so."""

from __future__ import annotations

import subprocess
import sys

from effectgate._checks.demo import run_demo


def test_every_demo_scenario_holds_on_sqlite() -> None:
    """Invariants 1-5 as the demo shows them, including the SIGKILLed subprocess."""
    results = run_demo()
    assert len(results) >= 12
    assert [r.number for r in results if not r.held] == []


def test_cli_demo_exits_zero_and_prints_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "effectgate", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all 14 guarantees held" in proc.stdout
    assert "SIGKILL" in proc.stdout
