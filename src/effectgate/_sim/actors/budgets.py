"""A plan's shared account (seed 004): leaf reservations admitted against it and settled from
their usage, through the real store role.

The actor opens one token-only plan account and draws three steps: ``reserve`` (a leaf with a
small allocation; the store admits it or refuses it over budget), ``settle`` (an open leaf
with its known usage, never more than it was allocated) and ``resettle`` (a settled leaf
again with other usage: a settlement is final, so this must be refused). It keeps its own
account of what each reservation should hold (an open leaf its allocation, a settled one
exactly its known usage, the rest its allocation) and checks the store's against it.

Checked (invariant 12): the account never shows more used than its limits, it shows exactly
what the actor's arithmetic says, and a refusal over budget happened only when the leaf did
not fit.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from effectgate._core.budgets import Resources
from effectgate._core.plan_values import PlanPolicy, ReservationKind, ReservationRequest, Settlement
from effectgate._evidence.invariants import Violation
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate.errors import BudgetExceeded, EffectgateError, ReservationConflict

__all__ = ["Budgets"]

PLAN, DIGEST = "plan-1", "d" * 64
#: Small, so admissions meet the limits within a seed.
LIMITS = Resources(steps=12, tokens=1500, tool_calls=8, fan_out=6, replans=1)
#: The dimensions a settlement reports as known (the rest keep their allocation).
KNOWN = frozenset({"steps", "tokens", "tool_calls"})
JUDGED = ("steps", "tokens", "tool_calls", "fan_out")
ACTOR = "sim-planner"


class Budgets:
    """The ``reserve``, ``settle`` and ``resettle`` steps and invariant 12's check."""

    name = "budgets"

    def __init__(self) -> None:
        self.opened = False
        self.serial = 0
        self.requests: dict[str, ReservationRequest] = {}
        self.holds: dict[str, Resources] = {}  # what each admitted reservation should hold
        self.open: list[str] = []
        self.settled: list[str] = []
        self.step_violations: list[Violation] = []
        self.dirty = False

    def steps(self) -> Steps:
        return (("reserve", 3), ("settle", 2), ("resettle", 2))

    def configure(self, spec: ProcessSpec) -> None:
        return None  # the plan account is a store role: nothing to add to a process

    def _used(self) -> dict[str, int]:
        return {d: sum(getattr(h, d) for h in self.holds.values()) for d in JUDGED}

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        self.dirty = True  # only this actor's steps change the account: check after them
        store, now = world.store, world.clock()
        if not self.opened:
            policy = PlanPolicy(PLAN, DIGEST, LIMITS, deadline=now + 1e9, token_only=True)
            store.open_plan_account("default", policy, now=now, actor=ACTOR)
            self.opened = True
        if kind == "reserve":
            return self._reserve(store, now, rng)
        pool = self.open if kind == "settle" else self.settled
        if not pool:
            return "nothing to settle"
        rid = pool[rng.randrange(len(pool))]
        request = self.requests[rid]
        used = Resources(
            steps=rng.randint(0, request.allocation.steps),
            tokens=rng.randint(0, request.allocation.tokens),
            tool_calls=rng.randint(0, request.allocation.tool_calls),
        )
        s = Settlement(rid, request.digest(), usage=used, known=KNOWN)
        try:
            store.settle("default", PLAN, s, now=now, actor=ACTOR)
        except ReservationConflict as exc:
            return f"{rid} -> error {exc.code}"
        except EffectgateError as exc:
            return f"{rid} -> error {exc.code}"
        if kind == "resettle":
            self.step_violations.append(Violation(12, f"{rid} was settled a second time"))
            return f"{rid} settled again"
        self.open.remove(rid)
        self.settled.append(rid)
        charge = {d: getattr(used, d) for d in KNOWN}
        self.holds[rid] = dataclasses.replace(request.allocation.with_fan_out(), **charge)
        return f"{rid} settled {used.steps}/{used.tokens}/{used.tool_calls}"

    def _reserve(self, store: Any, now: float, rng: random.Random) -> str:
        self.serial += 1
        rid = f"leaf-{self.serial:03d}"
        allocation = Resources(
            steps=rng.randint(1, 8),
            tokens=rng.randint(100, 900),
            tool_calls=rng.randint(1, 4),
            fan_out=1,
        )
        request = ReservationRequest(
            rid, PLAN, DIGEST, f"task-{rid}", f"attempt-{rid}", ReservationKind.LEAF,
            allocation, deadline=now + 1e8,
        )  # fmt: skip
        fits = all(self._used()[d] + getattr(allocation, d) <= getattr(LIMITS, d) for d in JUDGED)
        try:
            store.reserve("default", request, now=now, actor=ACTOR)
        except BudgetExceeded as exc:
            if fits:
                self.step_violations.append(Violation(12, f"{rid} refused though it fits"))
            return f"{rid} -> refused {exc.code}"
        self.requests[rid] = request
        self.holds[rid] = allocation.with_fan_out()
        self.open.append(rid)
        return f"{rid} reserved {allocation.steps}/{allocation.tokens}/{allocation.tool_calls}"

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if not self.opened or not (self.dirty or final):
            return found
        self.dirty = False
        shown = world.store.plan_account("default", PLAN).used
        expected = self._used()
        for d in JUDGED:
            value = getattr(shown, d)
            if value > getattr(LIMITS, d):
                found.append(Violation(12, f"{PLAN} {d}: used {value} over {getattr(LIMITS, d)}"))
            if value != expected[d]:
                found.append(
                    Violation(12, f"{PLAN} {d}: the account shows {value}, its reservations "
                                  f"and settlements add to {expected[d]}")
                )  # fmt: skip
        return found
