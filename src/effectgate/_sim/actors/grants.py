"""Grants (the authority axis): an agent acts only under a live grant covering the action.

The actor runs a third executor (``sim-process-3``) whose pre-dispatch pipeline has the grant
authoriser, in its own scope (``grants``), so the other processes never dispatch its rows. It
draws three steps: ``grant`` (an operator grants the agent ``cancel_order`` for the listed
instruments, for ten minutes), ``revoke`` (every live grant of the agent is revoked) and
``act`` (the agent proposes a cancellation through the third process). Grant ids are random,
so no history line names one.

Checked: every request of the scope that reached the venue was made while the actor's own
record says the agent held a live grant (created, not revoked, not expired).
"""

from __future__ import annotations

import random
from typing import Any

from effectgate._core.grants import GrantSpec
from effectgate._evidence.invariants import Violation
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.executor import Gate
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate.errors import EffectgateError

__all__ = ["Grants"]

SCOPE, AGENT, OPERATOR, ENV = "grants", "sim-agent", "sim-granter", "sim"
#: About a seed's span of simulated time: grants mostly end by revocation.
TTL = 300.0


class Grants:
    """The ``grant``, ``revoke`` and ``act`` steps and the grant axis's check."""

    name = "grants"

    def __init__(self) -> None:
        self.spans: list[list[float]] = []  # [created, ends]: revoked or expired
        self.serial = 0
        self.checked = 0
        self.gate: Gate | None = None
        self.built_for: Any = None

    def steps(self) -> Steps:
        return (("grant", 1), ("revoke", 1), ("act", 3))

    def configure(self, spec: ProcessSpec) -> None:
        self.built_for = None  # a new process: the third executor is rebuilt on first use

    def _gate(self, world: Any) -> Gate:
        if self.gate is None or self.built_for is not world.store:
            self.gate = Gate(
                store=world.store,
                registry=world.registry,
                adapters=world.adapters,
                policy=world.policy,
                clock=world.clock,
                authorise=grant_authoriser(environment=ENV),
                process_id="sim-process-3",
            )
            self.built_for = world.store
        return self.gate

    def _held(self, now: float) -> bool:
        return any(start <= now < end for start, end in self.spans)

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        now = world.clock()
        if kind == "grant":
            spec = GrantSpec(
                actions=frozenset({"cancel_order"}),
                targets=frozenset({"ABC", "XYZ-PERP"}),
                environments=frozenset({ENV}),
                scope=SCOPE,
                expires_at=now + TTL,
            )
            world.store.create_grant(AGENT, spec, created_by=OPERATOR, now=now)
            self.spans.append([now, now + TTL])
            return f"granted cancel_order until +{TTL:g}s"
        if kind == "revoke":
            try:
                gone = world.store.revoke_grants(by=OPERATOR, now=now, holder=AGENT)
            except EffectgateError as exc:
                return f"error {exc.code}"
            for span in self.spans:
                span[1] = min(span[1], now)
            if gone and rng.random() < 0.8:  # the agent, unaware, acts at once: must be refused
                return f"revoked {len(gone)}; act {self._act(world, rng)}"
            return f"revoked {len(gone)}"
        return self._act(world, rng)

    def _act(self, world: Any, rng: random.Random) -> str:
        self.serial += 1
        op_id = f"gr-{self.serial:04d}"
        intent = {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": rng.choice(("ABC", "XYZ-PERP")),
            "order_ref": f"ref-{rng.randint(1, 40)}",
        }
        try:
            row = self._gate(world).submit(
                "cancel_order", op_id, intent, scope=SCOPE, principal=AGENT
            )
        except EffectgateError as exc:
            return f"{op_id} -> error {exc.code}"
        return f"{op_id} -> {row.state.value}" + (f" [{row.detail}]" if row.detail else "")

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        requests = world.adapter.requests
        new, self.checked = requests[self.checked :], len(requests)
        now = world.clock()
        return [
            Violation(6, f"{r.operation_key} dispatched with no live grant for {AGENT}")
            for r in new
            if r.operation_key.startswith(f"{SCOPE}:") and not self._held(now)
        ]
