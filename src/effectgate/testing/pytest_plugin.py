"""The ``effectgate`` pytest plugin (entry point ``pytest11``): the conformance kit for adapter
authors. ``def test_my_adapter(effectgate_kit): effectgate_kit(MyAdapter(...), MyDriver())``
runs every check, prints the report, writes it to ``--effectgate-kit-report DIR`` when given,
and fails the test on any check the adapter fails (a promise the venue does not keep is
reported, not failed: see docs/adapters.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from effectgate.adapters.conformance.kit import ConformanceReport, run_conformance

__all__ = ["effectgate_kit", "pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--effectgate-kit-report",
        default=None,
        help="folder where the effectgate conformance kit writes its reports (JSON)",
    )


@pytest.fixture
def effectgate_kit(request: pytest.FixtureRequest) -> Callable[..., ConformanceReport]:
    folder = request.config.getoption("--effectgate-kit-report")

    def run(adapter: Any, driver: Any, **kwargs: Any) -> ConformanceReport:
        rep = run_conformance(adapter, driver, **kwargs)
        print(rep.render())
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            rep.write(Path(folder) / f"{rep.adapter}.json")
        if rep.failed:
            pytest.fail(f"conformance: failed checks {rep.failed}\n{rep.render()}")
        return rep

    return run
