"""Test-only mutations that re-introduce known bugs, so the simulator's tests show it finds them.

Production code reads no switch: each bug is applied from outside, by replacing one small, named
decision of the executor or the reconciler for the duration of a :func:`reintroduced` block, and
putting the original back however the block ends. ``ACTIVE`` mirrors which mutation is applied so
tests can see it is off again. :func:`reintroduced` is the only setter, and it refuses unless
pytest is running, so no command, config file or environment variable can reach them
(``tests/test_sim.py`` checks both). Nothing in :mod:`effectgate._execute` imports this module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

from effectgate._core.states import State
from effectgate._execute.executor import Gate
from effectgate._execute.reconciler import Reconciler, _Pass
from effectgate.errors import InvalidTransition
from effectgate.store.base import LedgerEntry, Operation

__all__ = ["ACTIVE", "BUGS", "Bugs", "reintroduced"]


@dataclass
class Bugs:
    """One flag per bug; all False outside a simulator test (set only by :func:`reintroduced`)."""

    #: (a) a replay of an uncertain (``submitted``) row dispatches it again (invariants 1, 9).
    redispatch_uncertain: bool = False
    #: (b) the reconciler writes an absent row off inside its visibility horizon (invariant 4).
    write_off_inside_horizon: bool = False
    #: (c) a repair the state table refuses aborts the whole reconcile pass.
    abort_pass_on_refused_move: bool = False


ACTIVE = Bugs()
BUGS = tuple(f.name for f in fields(Bugs))


def _redispatch_uncertain(self: Gate, row: Operation) -> bool:
    return row.state is State.SUBMITTED


def _write_off_inside_horizon(self: Reconciler, age: float, horizon: float) -> bool:
    return True


def _abort_pass_on_refused_move(
    self: Reconciler, entry: LedgerEntry, target: State, run: _Pass, exc: InvalidTransition
) -> None:
    raise exc


#: bug name -> (class, method name, the buggy replacement).
_MUTATIONS: dict[str, tuple[type, str, Callable[..., object]]] = {
    "redispatch_uncertain": (Gate, "_replay_redispatches", _redispatch_uncertain),
    "write_off_inside_horizon": (Reconciler, "_past_horizon", _write_off_inside_horizon),
    "abort_pass_on_refused_move": (Reconciler, "_refused_move", _abort_pass_on_refused_move),
}
if set(_MUTATIONS) != set(BUGS):  # pragma: no cover - a bug added to one table only
    raise RuntimeError("every bug needs exactly one mutation")


@contextmanager
def reintroduced(name: str) -> Iterator[None]:
    """Apply bug ``name``'s mutation for the block (pytest only), and undo it however it ends."""
    if "pytest" not in sys.modules:
        raise RuntimeError("bug switches are for the simulator's tests only")
    if name not in BUGS:
        raise ValueError(f"unknown bug {name!r}; known: {', '.join(BUGS)}")
    owner, method, buggy = _MUTATIONS[name]
    original = owner.__dict__[method]
    setattr(owner, method, buggy)
    setattr(ACTIVE, name, True)
    try:
        yield
    finally:
        setattr(ACTIVE, name, False)
        setattr(owner, method, original)
