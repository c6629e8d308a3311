"""Approvals bound to preconditions: an approved order goes out only against the venue state
its approver saw.

The actor adds a class, ``pc_order``, on its own paper venue (whose adapter reads the
precondition: the instrument's net position and order count), in scope ``precond``, and runs
a sixth executor (``sim-process-6``) whose pipeline has the precondition stage, with an
operator whose approvals bind the precondition (``Operator.on_approved``, as the service
wires it). Orders above 50 need an approver. Steps: ``pc-propose`` (a large order: it waits
for approval), ``pc-approve`` (an approver approves a waiting one and the state is bound;
then it is dispatched at once, or a small order of its instrument goes first and then it is
dispatched, or it is left approved), ``pc-move`` (a small order on either instrument,
sent at once: the position moves under any approval of that instrument) and
``pc-dispatch`` (an approved order is dispatched: sent if its instrument did not move since,
else sent back for a new approval, ``reapprove``).

Checked, every step (invariant 6: nothing reaches the adapter but what was authorised): each
large order reached the venue while the venue's state of its instrument was the one the
actor saw when its last approval was given, and only after an approval.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any, Literal

from effectgate._core.controls import ApprovalRules
from effectgate._core.intent import ActionClass, IntentBase, Registry
from effectgate._core.policy import LimitPolicy
from effectgate._core.states import State
from effectgate._evidence.invariants import Violation
from effectgate._execute.executor import Gate
from effectgate._execute.operator import Operator
from effectgate._execute.preconditions import bind_precondition, precondition_check
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import Tap, order_class, process_gate, quantity_value
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import EffectgateError
from effectgate.examples import InstrumentId

__all__ = ["PC_ACTION", "Preconditions"]

PC_ACTION, SCOPE, ADAPTER, APPROVER = "pc_order", "precond", "paper-precond", "sim-approver"
APPROVE_ABOVE = 50
#: The world's approval window (the core workload's gates use the same).
APPROVAL_TTL = 300.0
INSTRUMENTS = ("ABC", "XYZ-PERP")


class PcOrder(IntentBase):
    """An order of the preconditions class: ``quantity`` is its value."""

    action: Literal["pc_order"]
    instrument: InstrumentId
    side: Literal["buy", "sell"]
    quantity: int


def pc_class() -> ActionClass:
    return order_class(PC_ACTION, PcOrder, ADAPTER, value_of=quantity_value)


class Preconditions:
    """The ``pc-*`` steps and the precondition check."""

    name = "preconditions"

    def __init__(self) -> None:
        self.venue: PaperVenue | None = None
        # The venue's state (position, orders) of each request's instrument as it arrived.
        self.tap: Tap[tuple[Decimal, int]] | None = None
        self.gate: Gate | None = None
        self.operator: Operator | None = None
        self.built_for: Any = None
        self.bound: dict[str, tuple[Decimal, int]] = {}  # op key -> the state last approved at
        self.serial = 0
        self.checked = 0

    def steps(self) -> Steps:
        return (("pc-propose", 2), ("pc-approve", 2), ("pc-move", 2), ("pc-dispatch", 2))

    def configure(self, spec: ProcessSpec) -> None:
        if self.tap is None:  # the venue is outside the process: it outlives every crash
            self.venue = PaperVenue(clock=spec.clock, instruments=frozenset(INSTRUMENTS))
            venue = self.venue
            self.tap = Tap(
                PaperAdapter(venue), lambda r: venue.position(str(r.effect["instrument"]))
            )
        if PC_ACTION not in spec.registry.names():
            classes = [spec.registry.get(n) for n in spec.registry.names()]
            spec.registry = Registry([*classes, pc_class()])
        spec.policies[PC_ACTION] = LimitPolicy(Decimal(1000), approve_above=Decimal(APPROVE_ABOVE))
        spec.adapters[ADAPTER] = self.tap
        self.built_for = None  # a new process: the sixth executor is rebuilt on first use

    def _build(self, world: Any) -> tuple[Gate, Operator]:
        if self.gate is None or self.operator is None or self.built_for is not world.store:
            self.gate = process_gate(
                world,
                "sim-process-6",
                preconditions=[precondition_check(world.adapters, world.registry)],
                approvals=ApprovalRules(ttl=APPROVAL_TTL),
            )
            operator = Operator(store=world.store, registry=world.registry, clock=world.clock)

            def bind(scope: str, operation_id: str, approver: str) -> None:
                bind_precondition(
                    world.store, world.adapters, world.registry, scope, operation_id,
                    approver=approver, now=world.clock(),
                )  # fmt: skip

            operator.on_approved = bind
            self.operator, self.built_for = operator, world.store
        return self.gate, self.operator

    def _rows(self, world: Any, state: State) -> list[Any]:
        rows = world.store.list_operations(scope=SCOPE, state=state, action=PC_ACTION, limit=10_000)
        return sorted(rows, key=lambda r: r.op_key)

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        gate, operator = self._build(world)
        try:
            if kind in ("pc-propose", "pc-move"):
                return self._propose(gate, rng, large=kind == "pc-propose")
            if kind == "pc-approve":
                return self._approve(world, gate, operator, rng)
            validated = self._rows(world, State.VALIDATED)
            if not validated:
                return "nothing approved"
            row = validated[rng.randrange(len(validated))]
            return f"{row.operation_id} -> {self._dispatch(gate, row.operation_id)}"
        except EffectgateError as exc:
            return f"error {exc.code}"

    def _propose(
        self, gate: Gate, rng: random.Random, *, large: bool, instrument: str | None = None
    ) -> str:
        self.serial += 1
        op_id = f"pc-{self.serial:04d}"
        quantity = rng.randint(APPROVE_ABOVE + 1, 200) if large else rng.randint(1, APPROVE_ABOVE)
        intent = {
            "intent_version": "1",
            "action": PC_ACTION,
            "instrument": instrument or rng.choice(INSTRUMENTS),
            "side": rng.choice(("buy", "sell")),
            "quantity": quantity,
        }
        row = gate.submit(PC_ACTION, op_id, intent, scope=SCOPE)
        return f"{op_id} {intent['instrument']}/{quantity} -> {row.state.value}"

    def _approve(self, world: Any, gate: Gate, operator: Operator, rng: random.Random) -> str:
        pending = self._rows(world, State.AWAITING_APPROVAL)
        if not pending or self.venue is None:
            return "nothing pending"
        row = pending[rng.randrange(len(pending))]
        # What the approver sees (the binding reads the same), noted before the approval.
        instrument = str(row.effect["instrument"])
        self.bound[row.op_key] = self.venue.position(instrument)
        out = operator.approve(
            row.operation_id, fingerprint=row.fingerprint, approver=APPROVER, scope=SCOPE
        )
        line = f"{row.operation_id} -> {out.operation.state.value}"
        pick = rng.random()
        if pick < 0.3:  # someone trades the instrument first: it must come back for approval
            moved = self._propose(gate, rng, large=False, instrument=instrument)
            line = f"{line}; {moved}"
        if pick < 0.7:
            return f"{line}; dispatch -> {self._dispatch(gate, row.operation_id)}"
        return line

    def _dispatch(self, gate: Gate, operation_id: str) -> str:
        try:
            row = gate.dispatch(operation_id, scope=SCOPE)
        except EffectgateError as exc:
            return f"error {exc.code}"
        return row.state.value + (f" [{row.detail.split(':')[0]}]" if row.detail else "")

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        if self.tap is None:
            return []
        new, self.checked = self.tap.seen[self.checked :], len(self.tap.seen)
        found = []
        for request, state in new:
            if int(request.effect["quantity"]) <= APPROVE_ABOVE:
                continue
            approved_at = self.bound.get(request.operation_key)
            if approved_at is None:
                found.append(Violation(6, f"{request.operation_key} sent with no approval"))
            elif approved_at != state:
                found.append(
                    Violation(6, f"{request.operation_key} sent at position {state} after its "
                                 f"approval at {approved_at}")
                )  # fmt: skip
        return found
