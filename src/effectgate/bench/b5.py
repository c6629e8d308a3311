"""B5: the HTTP API under concurrent load from a separate process (16 and 64 clients).

Runs only when the build has the HTTP front door (``effectgate.frontends.http``); until then the
workload reports itself as skipped, with the reason.
"""

from __future__ import annotations

import importlib.util

from effectgate.bench.common import Figure, Target

__all__ = ["available", "run"]


def available() -> bool:
    return importlib.util.find_spec("effectgate.frontends.http") is not None


def run(target: Target, n: int, *, smoke: bool = False) -> list[Figure] | str:
    if not available():
        return "this build has no HTTP API (effectgate.frontends.http) yet"
    return "the HTTP API exists but its load generator is not written yet"
