"""The contract between the simulator's scheduler and the parts of the world it drives.

An :class:`Actor` is one capability or door of the boundary seen from the simulated world: it
contributes to how each simulated process is built (:meth:`Actor.configure`), offers weighted step
kinds the seeded scheduler draws from, runs one drawn step against the real components, and checks
the invariants its capability promises. A :class:`Mutation` is a small change of one named
production function or method, applied from outside for one run, that a check must catch.

Rules every actor keeps, so a seed replays byte for byte:

- every draw comes from the ``rng`` passed in; nothing reads the wall clock, uuid4, the host or
  set iteration order (sort before choosing);
- a step returns one history line made only of seeded values and ledger/venue answers;
- per-step checks are cheap (incremental: remember what was checked); whole-ledger checks go in
  ``final`` or run every N steps;
- a simulated crash (:class:`effectgate._execute.crashpoints.SimulatedCrash`) raised inside a
  step is not caught by the actor: the scheduler restarts the process from the ledger alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from effectgate._core.intent import Registry
from effectgate._evidence.invariants import Violation

__all__ = ["Actor", "Mutation", "ProcessSpec", "Steps"]

#: (step kind, weight) pairs; order matters for determinism (never build this from a set).
Steps = Sequence[tuple[str, int]]


class ProcessSpec(Protocol):
    """What an actor may add to before each simulated process's Gate is built.

    ``registry`` holds the action classes (an actor may replace it with one holding its own
    classes, or the same classes declaring more, e.g. retries); ``gate_kwargs`` and
    ``reconciler_kwargs`` are passed to :class:`Gate` and :class:`Reconciler`; ``policies`` maps
    an action class to its policy; ``adapters`` maps an adapter name to the adapter instance
    (usually a venue model wrapped to count what reached it). ``clock`` is the world's clock
    and ``store`` the process's ledger connection. Called on every process build, so it must
    give the same answer each time (a venue model it adds lives across builds).
    """

    registry: Registry
    store: Any
    gate_kwargs: dict[str, Any]
    reconciler_kwargs: dict[str, Any]
    policies: dict[str, Any]
    adapters: dict[str, Any]

    @property
    def clock(self) -> Callable[[], float]: ...


class Actor(Protocol):
    """One capability or door, as the scheduler drives it."""

    #: The name in the summary line (``speculation=12``): a capability or a door.
    name: str

    def steps(self) -> Steps:
        """The step kinds this actor offers, with weights (kinds are unique across actors)."""

    def configure(self, spec: ProcessSpec) -> None:
        """Add this actor's classes, policies, adapters and options to a process being built."""

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        """Run one step of ``kind``; return its history line."""

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        """The invariants this actor owns, after a step (``final=False``) or at the end."""


@dataclass(frozen=True)
class Mutation:
    """A planted bug: ``target`` (``"package.module:Class.method"`` or ``"package.module:func"``)
    is replaced for one run by ``replace(original)``; ``invariant`` names what must catch it."""

    name: str
    invariant: str
    target: str
    replace: Callable[[Callable[..., Any]], Callable[..., Any]]
