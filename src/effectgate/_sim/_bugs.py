"""Test-only switches that re-introduce known bugs, so the simulator's tests can show it finds them.

The executor and the reconciler each read one flag at one line. Every flag is off at import and
nothing in ``src`` turns one on: :func:`reintroduced` is the only setter, and it refuses unless
pytest is running, so no command, config file or environment variable can reach them
(``tests/test_sim.py`` checks both). This module imports nothing from effectgate, so production
modules can read it without a cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

__all__ = ["ACTIVE", "BUGS", "Bugs", "reintroduced"]


@dataclass
class Bugs:
    """One flag per bug; all False outside a simulator test."""

    #: (a) a replay of an uncertain (``submitted``) row dispatches it again (invariants 1, 9).
    redispatch_uncertain: bool = False
    #: (b) the reconciler writes an absent row off inside its visibility horizon (invariant 4).
    write_off_inside_horizon: bool = False
    #: (c) a repair the state table refuses aborts the whole reconcile pass.
    abort_pass_on_refused_move: bool = False


ACTIVE = Bugs()
BUGS = tuple(f.name for f in fields(Bugs))


@contextmanager
def reintroduced(name: str) -> Iterator[None]:
    """Turn bug ``name`` on for the block (pytest only), and off again however it ends."""
    if "pytest" not in sys.modules:
        raise RuntimeError("bug switches are for the simulator's tests only")
    if name not in BUGS:
        raise ValueError(f"unknown bug {name!r}; known: {', '.join(BUGS)}")
    setattr(ACTIVE, name, True)
    try:
        yield
    finally:
        setattr(ACTIVE, name, False)
