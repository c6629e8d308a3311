"""The mutation catalogue: planted bugs that show the simulation bites.

Each :class:`~effectgate._sim.actor.Mutation` names one production function or method
(``"package.module:Class.method"`` or ``"package.module:function"``) and how to replace it for
one run; :func:`applied` patches it with :func:`unittest.mock.patch.object` and puts the
original back however the block ends. Production code reads no switch and imports nothing
from here (``lint-imports`` and ``tests/test_layout.py`` check it): every bug is applied from
outside. ``effectgate simulate --mutations`` runs each until a checker catches it
(:mod:`effectgate._sim.mutations.hunt`); docs/simulation.md lists them with their checkers.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from effectgate._sim.actor import Mutation
from effectgate._sim.mutations.capabilities import CAPABILITIES
from effectgate._sim.mutations.doors import DOORS
from effectgate._sim.mutations.evidence import EVIDENCE
from effectgate._sim.mutations.gate import GATE
from effectgate._sim.mutations.gateway import GATEWAY
from effectgate._sim.mutations.operator import OPERATOR
from effectgate._sim.mutations.reconcile import RECONCILE
from effectgate._sim.mutations.runs import RUNS
from effectgate._sim.mutations.tenants import TENANTS
from effectgate._sim.mutations.venues import VENUES

__all__ = ["CATALOGUE", "applied", "by_name", "expected_invariant", "resolve"]

CATALOGUE: tuple[Mutation, ...] = (
    *GATE,
    *RECONCILE,
    *CAPABILITIES,
    *VENUES,
    *DOORS,
    *GATEWAY,
    *OPERATOR,
    *TENANTS,
    *EVIDENCE,
    *RUNS,
)

_NAMES = [m.name for m in CATALOGUE]
if len(set(_NAMES)) != len(_NAMES):  # pragma: no cover - a name used twice
    raise RuntimeError("mutation names must be unique")


def by_name(name: str) -> Mutation:
    """The catalogue's mutation ``name``; ValueError naming the known ones otherwise."""
    for m in CATALOGUE:
        if m.name == name:
            return m
    raise ValueError(f"unknown mutation {name!r}; known: {', '.join(_NAMES)}")


def expected_invariant(m: Mutation) -> frozenset[int]:
    """The numbers of the invariants whose checkers may catch ``m`` (``invariant``'s first
    word, comma-separated: ``"1,7 at_most_one_dispatch"``)."""
    return frozenset(int(n) for n in m.invariant.split()[0].split(","))


def resolve(target: str) -> tuple[Any, str]:
    """``(owner, attribute)`` for a target ``"package.module:Name"`` or ``"...:Class.attr"``."""
    module_name, sep, path = target.partition(":")
    if not sep or not path:
        raise ValueError(f"target {target!r} is not 'package.module:name'")
    owner: Any = importlib.import_module(module_name)
    *outer, attr = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    if attr not in vars(owner):
        raise ValueError(f"{target}: {attr!r} is not defined there")
    return owner, attr


@contextmanager
def applied(m: Mutation) -> Iterator[None]:
    """Replace ``m.target`` by ``m.replace(original)`` for the block; undo it however it ends."""
    owner, attr = resolve(m.target)
    original = vars(owner)[attr]
    with mock.patch.object(owner, attr, m.replace(original)):
        yield
