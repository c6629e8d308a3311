"""Envelopes and staged authority: a class's ceiling, allowlist, rate and exposure window hold
at the dispatch, and an operator moves them only by recorded steps, widening only on evidence
the boundary recomputes.

The actor adds a class, ``env_order`` (its value is its quantity), on its own paper venue, in
scope ``envelope``, proposed through a seventh executor (``sim-process-7``). Steps:
``env-propose`` (one to four orders of 1-300 on either instrument: each sent, or held by
the envelope),
``env-retry`` (a held order dispatched again: sent once the window has room),
``env-tighten`` (an operator narrows one axis, naming a note: a ceiling of 100-250, an
allowlist of one instrument, 2-4 dispatches per 60 s, an exposure of 300-600 per 120 s),
``env-widen`` (an operator lifts one axis, naming the evidence ``Operator.step_evidence``
measured over the last ten minutes; refused when the window holds nothing to judge by) and,
one widening in three, hostile: the measured figures under an invented digest, which must be
refused.

Checked, every step (invariant 12: what an envelope allows is never overdrawn): every order
of the class that reached the venue was within the envelope in force (the store's, which only
the actor's steps change) as the actor's own record of earlier sends counts it: its value at
most the ceiling, its instrument on the allowlist, no more sends in the rate interval than
the limit, no more value in the exposure window than the limit; and no invented evidence
widened an axis.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any, Literal

from effectgate._core.controls import Envelope
from effectgate._core.intent import IntentBase, Registry
from effectgate._core.policy import LimitPolicy
from effectgate._core.states import State
from effectgate._evidence.invariants import Violation
from effectgate._execute.adapter import OutboundRequest
from effectgate._execute.executor import Gate
from effectgate._execute.operator import Operator
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import Tap, order_class, process_gate, quantity_value
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import EffectgateError, StepEvidenceRefused
from effectgate.examples import InstrumentId
from effectgate.store.base import Operation

__all__ = ["ENV_ACTION", "Envelopes"]

ENV_ACTION, SCOPE, ADAPTER, OPERATOR = "env_order", "envelope", "paper-envelope", "sim-steward"
INSTRUMENTS = ("ABC", "XYZ-PERP")
AXES = ("max_value", "allowed_targets", "rate", "exposure")


class EnvOrder(IntentBase):
    """An order of the envelope's class: ``quantity`` is its value."""

    action: Literal["env_order"]
    instrument: InstrumentId
    side: Literal["buy", "sell"]
    quantity: int


def _tighter(axis: str, rng: random.Random) -> object:
    if axis == "max_value":
        return str(rng.choice((100, 150, 250)))
    if axis == "allowed_targets":
        return [rng.choice(INSTRUMENTS)]
    if axis == "rate":
        return {"limit": rng.randint(2, 4), "interval": 60}
    return {"limit": str(rng.choice((300, 450, 600))), "window": 120}


class Envelopes:
    """The ``env-*`` steps and the envelope's check."""

    name = "envelopes"

    def __init__(self) -> None:
        self.tap: Tap[float] | None = None  # the clock as each request arrived
        self.gate: Gate | None = None
        self.operator: Operator | None = None
        self.built_for: Any = None
        self.sent: list[tuple[float, Decimal]] = []  # (when, value) of every send of the class
        self.checked = 0
        self.serial = 0
        self.step_violations: list[Violation] = []

    def steps(self) -> Steps:
        return (("env-propose", 3), ("env-retry", 1), ("env-tighten", 2), ("env-widen", 1))

    def configure(self, spec: ProcessSpec) -> None:
        if self.tap is None:  # the venue is outside the process: it outlives every crash
            venue = PaperVenue(clock=spec.clock, instruments=frozenset(INSTRUMENTS))
            clock = spec.clock
            self.tap = Tap(PaperAdapter(venue), lambda _: clock())
        if ENV_ACTION not in spec.registry.names():
            classes = [spec.registry.get(n) for n in spec.registry.names()]
            own = order_class(ENV_ACTION, EnvOrder, ADAPTER, value_of=quantity_value)
            spec.registry = Registry([*classes, own])
        spec.policies[ENV_ACTION] = LimitPolicy(Decimal(1000))
        spec.adapters[ADAPTER] = self.tap
        self.built_for = None  # a new process: the seventh executor is rebuilt on first use

    def _build(self, world: Any) -> tuple[Gate, Operator]:
        if self.gate is None or self.operator is None or self.built_for is not world.store:
            self.gate = process_gate(world, "sim-process-7")
            self.operator = Operator(store=world.store, registry=world.registry, clock=world.clock)
            self.built_for = world.store
        return self.gate, self.operator

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        gate, operator = self._build(world)
        try:
            if kind == "env-propose":  # a burst, so the rate and exposure windows fill
                return "; ".join(self._propose(gate, rng) for _ in range(rng.randint(1, 4)))
            if kind == "env-retry":
                held = world.store.list_operations(
                    scope=SCOPE, state=State.VALIDATED, action=ENV_ACTION, limit=10_000
                )
                if not held:
                    return "nothing held"
                row = sorted(held, key=lambda r: r.op_key)[rng.randrange(len(held))]
                return (
                    f"{row.operation_id} -> {_shown(gate.dispatch(row.operation_id, scope=SCOPE))}"
                )
            if kind == "env-widen":
                env = operator.envelope(ENV_ACTION)
                narrowed = [a for a in AXES if env.axis(a) is not None]
                if not narrowed:
                    return "nothing to widen"
                return self._widen(world, operator, rng.choice(narrowed), rng)
            axis = rng.choice(AXES)
            if kind == "env-tighten":
                step = operator.step(
                    ENV_ACTION, axis, _tighter(axis, rng), evidence={"note": "sim"},
                    operator=OPERATOR,
                )  # fmt: skip
                return f"{axis} -> {step.new}"
            return f"unknown step {kind}"
        except EffectgateError as exc:
            return f"error {exc.code}"

    def _propose(self, gate: Gate, rng: random.Random) -> str:
        self.serial += 1
        op_id = f"env-{self.serial:04d}"
        intent = {
            "intent_version": "1",
            "action": ENV_ACTION,
            "instrument": rng.choice(INSTRUMENTS),
            "side": rng.choice(("buy", "sell")),
            "quantity": rng.randint(1, 300),
        }
        row = gate.submit(ENV_ACTION, op_id, intent, scope=SCOPE)
        return f"{op_id} {intent['instrument']}/{intent['quantity']} -> {_shown(row)}"

    def _widen(self, world: Any, operator: Operator, axis: str, rng: random.Random) -> str:
        now = world.clock()
        evidence = operator.step_evidence(
            ENV_ACTION, axis, kind="operations", since=max(0.0, now - 600.0), until=now
        )
        hostile = rng.random() < 1 / 3
        if hostile:  # the figures as measured, under a digest the boundary never gave
            evidence = {**evidence, "digest": "sha256:" + "0" * 64}
        try:
            operator.step(ENV_ACTION, axis, None, evidence=evidence, operator=OPERATOR)
        except StepEvidenceRefused as exc:
            if not hostile:
                return f"{axis} widening refused {exc.code}"
            return f"{axis} widening on invented evidence -> refused {exc.code}"
        if hostile:
            self.step_violations.append(
                Violation(12, f"{axis} was widened on evidence the boundary never measured")
            )
            return f"{axis} widening on invented evidence -> accepted"
        return f"{axis} -> open"

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.tap is None:
            return found
        new, self.checked = self.tap.seen[self.checked :], len(self.tap.seen)
        if not new:
            return found
        env = world.store.controls(ENV_ACTION).envelope
        for request, at in new:
            value = quantity_value(request.effect)
            found += _outside(env, request, value, at, self.sent)
            self.sent.append((at, value))
        return found


def _outside(
    env: Envelope, request: OutboundRequest, value: Decimal, at: float, sent: list[Any]
) -> list[Violation]:
    """Why this send was outside ``env``, given the earlier sends (window edges counted
    inclusively on the store's side, so an edge never makes a false finding here)."""
    key, why = request.operation_key, []
    if env.max_value is not None and value > env.max_value:
        why.append(f"value {value} over the ceiling {env.max_value}")
    if env.allowed_targets is not None and request.effect["instrument"] not in env.allowed_targets:
        why.append(f"{request.effect['instrument']} is off the allowlist")
    if env.rate_limit is not None and env.rate_interval is not None:
        count = sum(1 for t, _ in sent if t > at - env.rate_interval)
        if count + 1 > env.rate_limit:
            why.append(f"send {count + 1} in {env.rate_interval:g}s, limit {env.rate_limit}")
    if env.exposure_limit is not None and env.exposure_window is not None:
        used = sum((v for t, v in sent if t > at - env.exposure_window), Decimal(0))
        if used + value > env.exposure_limit:
            why.append(f"exposure {used} + {value} over {env.exposure_limit}")
    return [Violation(12, f"{key} sent outside its envelope: {w}") for w in why]


def _shown(row: Operation) -> str:
    return row.state.value + (" [held]" if (row.detail or "").startswith("held:") else "")
