"""Speculation (seed 000): a dry run at a sandbox before the commit, under the ledger's key.

The actor adds a speculating class, ``spec_order``, on its own paper venue with a sandbox
(``paper-spec``), and proposes orders of it through the first process: each is journalled,
dry-run at the sandbox, then dispatched after the commit check (an order for an instrument
the venue does not list is denied by the sandbox and rejected). The reconciler sweeps the
class's venue like any other.

Checked: every request that reached the class's venue found its row ``submitted``
(invariant 3), no key reached it twice (invariant 1), and no speculation left a real effect:
the venue holds no more effects under a key than the boundary sent it (invariant 3).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Literal

from effectgate._core.intent import ActionClass, IntentBase, Registry
from effectgate._core.policy import LimitPolicy
from effectgate._core.speculation import Speculation
from effectgate._evidence.invariants import Violation, at_most_one_dispatch
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import order_class
from effectgate.adapters._paper_sandbox import PaperSandbox
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import EffectgateError
from effectgate.examples import InstrumentId

__all__ = ["SPEC_ACTION", "Speculating"]

SPEC_ACTION = "spec_order"
ADAPTER = "paper-spec"


class SpecOrder(IntentBase):
    """An order of the speculating class."""

    action: Literal["spec_order"]
    instrument: InstrumentId
    side: Literal["buy", "sell"]
    quantity: int


def spec_class() -> ActionClass:
    return order_class(
        SPEC_ACTION, SpecOrder, ADAPTER, speculation=Speculation(verdict_lifetime=60.0)
    )


class Speculating:
    """The ``speculate`` step and its checks."""

    name = "speculation"

    def __init__(self) -> None:
        self.venue: PaperVenue | None = None
        self.adapter: checks.Witness | None = None
        self.serial = 0
        self.checked = 0
        self.keys: list[str] = []
        self.store: Any = None
        self.dirty = False  # its own step ran since the last check

    def steps(self) -> Steps:
        return (("speculate", 3),)

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store  # this process's, for the witness's reads
        if self.adapter is None:
            # The venue and sandbox are outside the process: they outlive every crash.
            self.venue = PaperVenue(clock=spec.clock, instruments=frozenset({"ABC", "XYZ-PERP"}))
            sandbox = PaperSandbox(self.venue, lifetime=60.0, clock=spec.clock)
            adapter = PaperAdapter(self.venue, sandbox=sandbox)
            self.adapter = checks.Witness(adapter, lambda: self.store)
        classes = [spec.registry.get(n) for n in spec.registry.names()]
        if SPEC_ACTION not in spec.registry.names():
            spec.registry = Registry([*classes, spec_class()])
        spec.policies[SPEC_ACTION] = LimitPolicy()
        spec.adapters[ADAPTER] = self.adapter

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        self.dirty = True
        self.serial += 1
        op_id = f"sp-{self.serial:04d}"
        instrument = "DELISTED" if rng.random() < 0.15 else rng.choice(("ABC", "XYZ-PERP"))
        intent = {
            "intent_version": "1",
            "action": SPEC_ACTION,
            "instrument": instrument,
            "side": rng.choice(("buy", "sell")),
            "quantity": rng.randint(1, 9),
        }
        self.keys.append(f"default:{op_id}")
        try:
            row = world.gate.submit(SPEC_ACTION, op_id, intent)
        except EffectgateError as exc:
            return f"{op_id} {instrument} -> error {exc.code}"
        return f"{op_id} {instrument} -> {row.state.value}"

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        if self.adapter is None or self.venue is None:
            return []
        requests = self.adapter.requests
        if len(requests) == self.checked and not (self.dirty or final):
            return []  # nothing reached its venue or sandbox since the last check
        self.dirty = False
        found = at_most_one_dispatch(requests)
        found += checks.journalled_before_dispatch(
            requests[self.checked :], self.adapter.states[self.checked :]
        )
        self.checked = len(requests)
        sent = Counter(r.operation_key for r in requests)
        for key in self.keys:
            extra = self.venue.effects_for(key) - sent[key]
            if extra > 0:
                found.append(Violation(3, f"{key}: speculation left {extra} real effect(s)"))
        return found
