"""The scratch world ``effectgate verify`` drives: a gate, reconciler and operator built from the
user's configuration over a scratch store, the paper venue standing in for every adapter."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from effectgate._checks.verify_intents import IntentSource
from effectgate._core.clock import ManualClock
from effectgate._core.intent import ActionClass, Registry, Tier
from effectgate._core.states import State
from effectgate._evidence.invariants import InvariantViolation, assert_invariants
from effectgate._execute.adapter import OutboundRequest
from effectgate._execute.authority import approver_role_check
from effectgate._execute.dispatcher import Dispatcher
from effectgate._execute.executor import Gate
from effectgate._execute.operator import Operator
from effectgate._execute.reconciler import Reconciler
from effectgate._service._config import ServiceConfig
from effectgate.adapters._counting import CountingAdapter
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["PROPOSER", "SCOPE", "World", "approve_all", "make_world", "needed", "scratch_approvers"]

SCOPE = "verify"
PROPOSER = "verify-agent"


def scratch_approvers(cfg: ServiceConfig, ac: ActionClass, store: Store, now: float) -> list[str]:
    """Create the proposer and the class's approvers as principals of the scratch ``store``;
    returns the approvers' names (one more than ``multi_approvers`` where no role limits them,
    so a duplicate can be told from a quorum)."""
    roles = cfg.authority.approver_roles
    if roles is not None and ac.name in roles.by_class:
        names = sorted(set().union(*(roles.members[r] for r in roles.by_class[ac.name])))
    else:
        names = [f"verify-approver-{i}" for i in range(1, cfg.approvals.multi_approvers + 2)]
    store.create_principal(PROPOSER, "agent", SCOPE, created_by="verify", now=now)
    for name in names:
        if name != PROPOSER:
            store.create_principal(name, "approver", SCOPE, created_by="verify", now=now)
    return [n for n in names if n != PROPOSER]


def needed(cfg: ServiceConfig, tier: Tier) -> int:
    return cfg.approvals.multi_approvers if tier is Tier.MULTI_APPROVE else 1


def approve_all(w: World, row_id: str) -> tuple[int, str]:
    """Approve ``row_id`` by distinct approvers until it leaves ``awaiting_approval``;
    ``(approvals given, the state it ended in)``."""
    given = 0
    answered = {a.approver for a in w.store.list_approvals(SCOPE, row_id)}
    for name in (n for n in w.approvers if n not in answered):
        row = w.gate.get(row_id, scope=SCOPE)
        if row.state is not State.AWAITING_APPROVAL:
            break
        w.operator.approve(
            row_id, fingerprint=row.fingerprint, approver=name, scope=SCOPE, reason="verify"
        )
        given += 1
    return given, w.gate.get(row_id, scope=SCOPE).state.value


@dataclass
class World:
    store: Store
    venue: PaperVenue
    counting: dict[str, CountingAdapter]
    gate: Gate
    reconciler: Reconciler
    clock: ManualClock
    cfg: ServiceConfig
    operator: Operator
    #: Scratch principals who may approve the class (docs/evidence.md).
    approvers: list[str] = field(default_factory=list)
    source: IntentSource | None = None

    def gate_with(self, adapters: dict[str, PaperAdapter]) -> Gate:
        gate = Gate(
            store=self.store,
            registry=self.gate.registry,
            adapters=adapters,
            policy=self.cfg.policy,
            clock=self.clock,
            breakers=self.cfg.breakers,
            approvals=self.cfg.approvals,
        )
        gate.pipeline = self.gate.pipeline
        return gate

    def submit(
        self, ac: ActionClass, op: str, raw: dict[str, object], gate: Gate | None = None
    ) -> Operation:
        """Propose as the scratch agent; a row that waits for a human is approved by the
        scratch approvers and sent by the standing dispatcher, as in a deployment."""
        gate = gate or self.gate
        row = gate.submit(ac.name, op, raw, scope=SCOPE, principal=PROPOSER)
        if row.state is State.AWAITING_APPROVAL:
            approve_all(self, op)
            Dispatcher(gate).run_once()
        return self.gate.get(op, scope=SCOPE)

    def requests(self) -> list[OutboundRequest]:
        return [r for a in self.counting.values() for r in a.requests]

    def invariants(self) -> str:
        try:
            assert_invariants(
                self.store,
                registry=self.cfg.registry,
                requests=self.requests(),
                venue_keys=[r.operation_key for r in self.venue.visible_records()],
            )
        except InvariantViolation as exc:
            return str(exc)
        return ""


def make_world(
    cfg: ServiceConfig, store: Store, ac: ActionClass, source: IntentSource | None = None
) -> World:
    clock = ManualClock()
    venue = PaperVenue(honour_key=True, clock=clock)
    counting = {name: CountingAdapter(PaperAdapter(venue)) for name in cfg.adapters}
    # The cases follow their rows by the ids they choose, so a class whose ids effectgate mints
    # runs them with caller ids: identity, once-only and the controls hold per id either way.
    registry = Registry(
        [replace(c, operation_ids="caller") for c in cfg.registry],
        max_bytes=cfg.registry.max_bytes,
        max_depth=cfg.registry.max_depth,
    )
    gate = Gate(
        store=store,
        registry=registry,
        adapters=dict(counting),
        policy=cfg.policy,
        clock=clock,
        breakers=cfg.breakers,
        approvals=cfg.approvals,
    )
    operator = Operator(store=store, registry=cfg.registry, clock=clock)
    roles = cfg.authority.approver_roles
    operator.approver_roles = roles
    if roles is not None:
        # As the service wires it: an approval by someone outside the class's roles is refused
        # when given and again before dispatch.
        gate.pipeline = replace(gate.pipeline, approved=(approver_role_check(roles),))
    rec = Reconciler(
        store=store,
        registry=cfg.registry,
        adapters={name: PaperAdapter(venue) for name in cfg.adapters},
        clock=clock,
    )
    approvers = scratch_approvers(cfg, ac, store, clock())
    return World(store, venue, counting, gate, rec, clock, cfg, operator, approvers, source)
