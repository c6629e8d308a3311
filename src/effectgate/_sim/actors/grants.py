"""Grants and delegation (the authority axis): an agent acts only under a live grant chain
that covers the action.

The actor runs a third executor (``sim-process-3``) whose pre-dispatch pipeline has the grant
authoriser, in its own scope (``grants``), so the other processes never dispatch its rows.
Steps: ``grant`` (an operator grants the agent ``cancel_order`` for two instruments for five
minutes, delegable zero to two hops), ``delegate`` (the agent delegates a narrower grant, one
instrument and a shorter life, to a sub-agent; two in five are hostile: wider than its
parent on one axis, or made by someone who does not hold the parent, and must be refused
``grant_wider``), ``revoke`` (every live grant of the agent is revoked, and with them,
transitively, every delegation beneath them; or one sub-agent grant alone), and ``act`` /
``act-sub`` (the agent or the sub-agent proposes a cancellation through the third process,
for either instrument). Grant ids are random, so no history line names one.

Checked, every step: every request of the scope that reached the venue was made while the
actor's own record says its proposer held a grant whose whole chain was live (created, not
revoked, not expired) and that names its instrument; every grant beneath a revoked one is
revoked in the store; no hostile delegation was accepted (all invariant 6).
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from typing import Any

from effectgate._core.grants import GrantSpec
from effectgate._evidence.invariants import Violation
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.executor import Gate
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import process_gate
from effectgate.errors import EffectgateError, GrantWider

__all__ = ["Grants"]

SCOPE, AGENT, SUB, OPERATOR, ENV = "grants", "sim-agent", "sim-subagent", "sim-granter", "sim"
#: About a seed's span of simulated time: grants mostly end by revocation.
TTL = 300.0
INSTRUMENTS = ("ABC", "XYZ-PERP")


@dataclass
class _Held:
    """The actor's own record of one grant it saw made."""

    holder: str
    start: float
    end: float  # its expiry, or its revocation once revoked
    parent: str | None
    spec: GrantSpec


#: The hostile delegations, in turn: wider than the parent on one axis, or not its holder's.
HOSTILE = ("targets", "holder", "actions", "expires_at", "hops", "break_glass")


def _wider(parent: GrantSpec, axis: str) -> GrantSpec:
    """A delegation of ``parent`` wider than it on ``axis``."""
    wide: dict[str, dict[str, Any]] = {
        "targets": {"targets": parent.targets | {"ZZZ"}},
        "actions": {"actions": parent.actions | {"submit_order"}},
        "expires_at": {"expires_at": parent.expires_at + 60.0},
        "hops": {"hops": parent.hops},
        "break_glass": {"break_glass": True, "hops": 0},
    }
    return dataclasses.replace(parent, **wide[axis])


class Grants:
    """The grant and delegation steps and the grant axis's checks."""

    name = "grants"

    def __init__(self) -> None:
        self.grants: dict[str, _Held] = {}
        self.serial = 0
        self.hostile = self.first_axis = 0  # hostile delegations drawn, the first one's axis
        self.checked = 0
        self.refusals_missed: list[str] = []
        self.gate: Gate | None = None
        self.built_for: Any = None

    def steps(self) -> Steps:
        return (("grant", 1), ("delegate", 2), ("revoke", 1), ("act", 2), ("act-sub", 2))

    def configure(self, spec: ProcessSpec) -> None:
        self.built_for = None  # a new process: the third executor is rebuilt on first use

    def _gate(self, world: Any) -> Gate:
        if self.gate is None or self.built_for is not world.store:
            self.gate = process_gate(
                world, "sim-process-3", authorise=grant_authoriser(environment=ENV)
            )
            self.built_for = world.store
        return self.gate

    def _live(self, grant_id: str | None, now: float) -> bool:
        while grant_id is not None:
            g = self.grants[grant_id]
            if not g.start <= now < g.end:
                return False
            grant_id = g.parent
        return True

    def _covered(self, who: str, instrument: object, now: float) -> bool:
        return any(
            g.holder == who and instrument in g.spec.targets and self._live(gid, now)
            for gid, g in self.grants.items()
        )

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        now = world.clock()
        if kind == "grant":
            return self._grant(world, now, hops=rng.choice((0, 1, 2)))
        if kind == "delegate":
            return self._delegate(world, rng, now)
        if kind == "revoke":
            return self._revoke(world, rng, now)
        return self._act(world, rng, SUB if kind == "act-sub" else AGENT)

    def _grant(self, world: Any, now: float, *, hops: int) -> str:
        spec = GrantSpec(
            actions=frozenset({"cancel_order"}),
            targets=frozenset(INSTRUMENTS),
            environments=frozenset({ENV}),
            scope=SCOPE,
            expires_at=now + TTL,
            hops=hops,
        )
        made = world.store.create_grant(AGENT, spec, created_by=OPERATOR, now=now)
        self.grants[made.grant_id] = _Held(AGENT, now, now + TTL, None, spec)
        return f"granted cancel_order until +{TTL:g}s, {hops} hop(s)"

    def _delegate(self, world: Any, rng: random.Random, now: float) -> str:
        # In the order the actor made them: grant ids are random, so never sort by id.
        parents = [
            gid
            for gid, g in self.grants.items()
            if g.holder == AGENT and g.spec.delegable and self._live(gid, now)
        ]
        first = ""
        if not parents:  # an operator grants first, so a delegation is drawn every time
            first = f"{self._grant(world, now, hops=rng.choice((1, 2)))}; "
            parents = [next(reversed(self.grants))]
        parent_id = rng.choice(parents)
        parent = self.grants[parent_id].spec
        hostile = rng.random() < 0.4
        by, axis = AGENT, ""
        if hostile:  # each axis in turn from a drawn one, so a few seeds draw them all
            if not self.hostile:
                self.first_axis = rng.randrange(len(HOSTILE))
            axis = HOSTILE[(self.first_axis + self.hostile) % len(HOSTILE)]
            self.hostile += 1
        if axis == "holder":  # the sub-agent delegates a grant it does not hold
            by, spec = SUB, dataclasses.replace(parent, hops=0)
        elif hostile:
            spec = _wider(parent, axis)
        else:
            spec = dataclasses.replace(
                parent,
                targets=frozenset({rng.choice(INSTRUMENTS)}),
                expires_at=parent.expires_at - rng.choice((0.0, 30.0, 120.0)),
                hops=0,
            )
        try:
            made = world.store.delegate_grant(parent_id, SUB, spec, by=by, now=now)
        except GrantWider as exc:
            wanted = "" if hostile else " (a contained delegation)"
            if not hostile:
                self.refusals_missed.append(f"a contained delegation was refused: {exc.message}")
            return f"{first}delegate {axis or 'narrower'} -> refused {exc.field}{wanted}"
        if hostile:
            self.refusals_missed.append(f"a delegation wider on {axis} was accepted")
            return f"{first}delegate {axis} -> accepted"
        self.grants[made.grant_id] = _Held(SUB, now, spec.expires_at, parent_id, spec)
        line = (
            f"{first}delegated {'/'.join(sorted(spec.targets))} until +{spec.expires_at - now:g}s"
        )
        if rng.random() < 0.6:  # the sub-agent acts at once, on either instrument
            return f"{line}; act {self._act(world, rng, SUB)}"
        return line

    def _revoke(self, world: Any, rng: random.Random, now: float) -> str:
        subs = [gid for gid, g in self.grants.items() if g.holder == SUB and self._live(gid, now)]
        one = subs and rng.random() < 0.3
        try:
            if one:
                gone = world.store.revoke_grants(by=OPERATOR, now=now, grant_id=rng.choice(subs))
            else:
                gone = world.store.revoke_grants(by=OPERATOR, now=now, holder=AGENT)
        except EffectgateError as exc:
            return f"error {exc.code}"
        for g in gone:
            if g.grant_id in self.grants:
                held = self.grants[g.grant_id]
                held.end = min(held.end, now)
        line = f"revoked {len(gone)}" + (" (one delegation)" if one else "")
        if gone and rng.random() < 0.8:  # the agents, unaware, act at once: must be refused
            return f"{line}; act {self._act(world, rng, rng.choice((AGENT, SUB)))}"
        return line

    def _act(self, world: Any, rng: random.Random, who: str) -> str:
        self.serial += 1
        op_id = f"{'gr' if who == AGENT else 'sub'}-{self.serial:04d}"
        intent = {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": rng.choice(INSTRUMENTS),
            "order_ref": f"ref-{rng.randint(1, 40)}",
        }
        try:
            row = self._gate(world).submit(
                "cancel_order", op_id, intent, scope=SCOPE, principal=who
            )
        except EffectgateError as exc:
            return f"{op_id} -> error {exc.code}"
        # Grant ids are random: a refusal's detail names them, the history must not.
        detail = re.sub(r"\bgr_[0-9a-f]+", "gr_?", row.detail or "")
        return f"{op_id} -> {row.state.value}" + (f" [{detail}]" if detail else "")

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        requests = world.adapter.requests
        new, self.checked = requests[self.checked :], len(requests)
        now = world.clock()
        found = [Violation(6, why) for why in self.refusals_missed]
        self.refusals_missed = []
        for r in new:
            if not r.operation_key.startswith(f"{SCOPE}:"):
                continue
            who = SUB if r.operation_key.startswith(f"{SCOPE}:sub-") else AGENT
            if not self._covered(who, r.effect.get("instrument"), now):
                found.append(
                    Violation(6, f"{r.operation_key} dispatched with no live grant chain for "
                                 f"{who} covering {r.effect.get('instrument')}")
                )  # fmt: skip
        # Only a delegation can outlive its revoked parent: no read of the store until one exists.
        if any(g.parent is not None for g in self.grants.values()):
            stored = {g.grant_id: g for g in world.store.list_grants(include_revoked=True)}
            for g in stored.values():
                above = stored.get(g.parent_id) if g.parent_id else None
                if above is not None and above.revoked_at is not None and g.revoked_at is None:
                    found.append(
                        Violation(6, f"a delegation beneath revoked grant {above.holder}'s "
                                     "is still live")
                    )  # fmt: skip
        return found
