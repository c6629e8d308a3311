"""Operators: quarantine and release, policy versions installed mid-seed, and an operator acting
while a dispatch is in flight.

The actor runs a fifth executor (``sim-process-5``, scope ``ops``, the grant authoriser) for its
class ``op_charge`` (a money field ``amount``, value-measured) on its own venue, behind
:class:`_InFlight`: a wrapper that notes what each request found when it arrived (its row's
state, the kill switch, a live grant, the actor's record of the queue) and then runs the
operator action armed for it (kill switch on, a policy change, or a revocation of the agent's
grants) before the venue applies it. The gate follows the store's active policy through the real
:class:`~effectgate._service._policy_gov.PolicyFollower` (refreshed before each proposal, as its
poll would).

Steps: ``op-act`` (the agent proposes a charge, one in three with an operator action armed for
the dispatch); ``op-control`` (kill switch on or off, or a new policy version loaded);
``op-quarantine`` (an operator takes a non-terminal row over); ``op-release`` (a release of a
quarantined row: a never-dispatched one goes back where it came from and is dispatched again,
a dispatched one must be refused and is resolved applied from the venue's record);
``op-dispatch`` (a validated row of the scope sent again, as the standing dispatcher would).

Checked: a quarantined row is dispatched only after its release, and a release puts it back in
the state it came from (invariant 10); an intent decided under policy version v records v; no
request arrives while the kill switch is on or with no live grant (7, 6), and the request in
flight when the switch went on ends in a state the state table allows from ``submitted``.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any, Literal

from effectgate._core.governed_policy import canonical_text, document_of, policy_hash
from effectgate._core.grants import GrantSpec
from effectgate._core.intent import ActionClass, EffectClass, IntentBase, PositiveDecimal, Registry
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._core.states import TRANSITIONS, State
from effectgate._evidence.invariants import Violation
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.executor import Gate
from effectgate._execute.quarantine import QuarantineService
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import process_gate
from effectgate._sim.venues import adapters as va
from effectgate._sim.venues import models
from effectgate.adapters._counting import CountingAdapter
from effectgate.errors import EffectgateError, ResolutionRefused

__all__ = ["OperatorActor"]

ACTION, ADAPTER, SCOPE = "op_charge", "sim-ops", "ops"
AGENT, OPERATOR, ENV = "sim-ops-agent", "sim-ops-operator", "sim"
TTL, APPROVAL_TTL = 300.0, 300.0
MID = ("kill", "policy", "revoke")
#: The policy versions an operator installs in turn: the ceiling moves. (No approval line: the
#: core workload's approval steps take every awaiting row for one of its own.)
VERSIONS = tuple(
    document_of({ACTION: LimitPolicy(max_value=Decimal(top))}) for top in ("800", "300", "1000")
)


class OpCharge(IntentBase):
    account: Literal["acct-1", "acct-2"]
    amount: PositiveDecimal
    currency: Literal["usd", "eur"]


_CLASS = ActionClass(
    name=ACTION,
    model=OpCharge,
    adapter=ADAPTER,
    effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
    visibility_horizon=60.0,
    key_retention=models.KEY_WINDOW,
    value_of=lambda e: Decimal(str(e["amount"])),
    target_field="account",
    venue=va.LaggingAdapter.contract,
)


class _Adapter(va.LaggingAdapter):
    name = ADAPTER


class _InFlight(CountingAdapter):
    """Notes each request's arrival, then runs the operator action armed for it."""

    def __init__(self, actor: OperatorActor, inner: va.SimAdapter) -> None:
        super().__init__(inner)
        self.actor = actor
        self.arrivals: list[tuple[str, str, bool, bool, bool]] = []
        self.armed: tuple[str, Any] | None = None

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        a = self.actor
        scope, _, op_id = request.operation_key.partition(":")
        row = a.store.get(scope, op_id)
        state = "none" if row is None else row.state.value
        now = a.clock()
        live = any(start <= now < end for start, end in a.spans)
        queued = request.operation_key in a.queued
        self.arrivals.append((request.operation_key, state, a.killed, live, queued))
        armed, self.armed = self.armed, None
        if armed is not None:
            a.act_now(armed[0], armed[1], request.operation_key)
        return super().execute(request, timeout=timeout)


class OperatorActor:
    """The operator's steps beyond the core workload's, and their checks."""

    name = "operator"

    def __init__(self) -> None:
        self.venue: models.LaggingVenue | None = None
        self.wrapper: _InFlight | None = None
        self.store: Any = None
        self.clock: Any = None
        self.gate: Gate | None = None
        self.follower: Any = None
        self.built_for: Any = None
        self.killed = False
        self.spans: list[list[float]] = []
        self.queued: dict[str, State] = {}  # in the queue: key -> the state it came from
        self.in_flight: list[str] = []  # keys in flight when the switch went on
        self.version = 0  # index in VERSIONS of the active policy (-1: none loaded yet)
        self.loaded = False
        self.serial = 0
        self.checked = 0
        self.step_violations: list[Violation] = []

    def steps(self) -> Steps:
        return (("op-act", 5), ("op-control", 2), ("op-quarantine", 2), ("op-release", 2),
                ("op-dispatch", 1))  # fmt: skip

    def configure(self, spec: ProcessSpec) -> None:
        self.store, self.clock = spec.store, spec.clock
        if self.wrapper is None:
            self.venue = models.LaggingVenue(spec.clock)
            self.wrapper = _InFlight(self, _Adapter(self.venue))
        if ACTION not in spec.registry.names():
            names = spec.registry.names()
            spec.registry = Registry([*(spec.registry.get(n) for n in names), _CLASS])
        spec.policies[ACTION] = LimitPolicy()
        spec.adapters[ADAPTER] = self.wrapper

    def _gate(self, world: Any) -> Gate:
        if self.gate is None or self.built_for is not world.store:
            from effectgate._service._policy_gov import PolicyFollower

            self.gate = process_gate(
                world,
                "sim-process-5",
                policy=PolicySet({ACTION: LimitPolicy()}),
                authorise=grant_authoriser(environment=ENV),
            )
            self.follower = PolicyFollower(world.store, self.gate, world.registry)
            self.built_for = world.store
        self.follower.refresh()  # the follower's poll
        return self.gate

    # --- operator actions ---------------------------------------------------------------

    def _load(self, world: Any, index: int) -> str:
        doc = VERSIONS[index]
        world.store.load_policy(canonical_text(doc), policy_hash(doc), by=OPERATOR,
                                now=world.clock())  # fmt: skip
        self.version, self.loaded = index, True
        if self.follower is not None:
            self.follower.refresh()
        return f"policy v{index}"

    def act_now(self, what: str, world: Any, key: str) -> None:
        """An operator action done while ``key``'s request is in flight."""
        now = world.clock()
        if what == "kill":
            world.operator.kill(ACTION, operator=OPERATOR)
            self.killed = True
            self.in_flight.append(key)
        elif what == "policy":
            self._load(world, (self.version + 1) % len(VERSIONS))
        else:
            world.store.revoke_grants(by=OPERATOR, now=now, holder=AGENT)
            for span in self.spans:
                span[1] = min(span[1], now)

    def _grant(self, world: Any) -> None:
        now = world.clock()
        spec = GrantSpec(
            actions=frozenset({ACTION}),
            targets=frozenset({"acct-1", "acct-2"}),
            environments=frozenset({ENV}),
            scope=SCOPE,
            expires_at=now + TTL,
        )
        world.store.create_grant(AGENT, spec, created_by=OPERATOR, now=now)
        self.spans.append([now, now + TTL])

    # --- steps --------------------------------------------------------------------------

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        if not self.loaded:
            self._load(world, 0)
        gate = self._gate(world)
        if kind == "op-act":
            return self._act(world, gate, rng)
        if kind == "op-control":
            pick = rng.random()
            if pick < 0.3:
                return self._load(world, (self.version + 1) % len(VERSIONS))
            if pick < 0.6:
                world.operator.kill(ACTION, operator=OPERATOR)
                self.killed = True
                return "kill on"
            world.operator.release(ACTION, operator=OPERATOR)
            self.killed = False
            return "kill off"
        if kind == "op-quarantine":
            return self._quarantine(world, rng)
        if kind == "op-release":
            return self._release(world, gate, rng)
        rows = self._rows(world, State.VALIDATED)
        if not rows:
            return "nothing validated"
        row = rows[rng.randrange(len(rows))]
        return f"{row.operation_id} -> {self._dispatch(gate, row.operation_id)}"

    def _act(self, world: Any, gate: Gate, rng: random.Random, *, send: bool = True) -> str:
        now = world.clock()
        if not any(s <= now < e for s, e in self.spans) and rng.random() < 0.8:
            self._grant(world)
        self.serial += 1
        op_id = f"ox-{self.serial:04d}"
        account, amount = rng.choice(("acct-1", "acct-2")), f"{rng.randint(1, 600)}.00"
        intent = {"intent_version": "1", "action": ACTION, "account": account,
                  "amount": amount, "currency": "usd"}  # fmt: skip
        mid = rng.choice(MID) if rng.random() < 0.35 else None
        lost = rng.choice(("before", "after")) if rng.random() < 0.2 else None
        if self.wrapper is not None and mid is not None:
            self.wrapper.armed = (mid, world)
        if self.venue is not None:
            self.venue.fail_next(lost)  # the request or its reply lost: the row stays uncertain
        expected = policy_hash(VERSIONS[self.version])
        send = send and (mid is not None or lost is not None or rng.random() < 0.6)
        try:
            row = gate.submit(ACTION, op_id, intent, scope=SCOPE, principal=AGENT, dispatch=send)
        except EffectgateError as exc:
            return f"{op_id} mid={mid} -> error {exc.code}"
        finally:
            if self.wrapper is not None and self.venue is not None:
                self.wrapper.armed = None
                self.venue.fail_next(None)
        if row.policy_version != expected:
            self.step_violations.append(Violation(
                6, f"{row.op_key} was decided under {expected} but records {row.policy_version}"
            ))  # fmt: skip
        line = f"{op_id} {amount} v{self.version} mid={mid} lost={lost} send={send}"
        return f"{line} -> {_out(row)}"

    def _dispatch(self, gate: Gate, op_id: str) -> str:
        try:
            return _out(gate.dispatch(op_id, scope=SCOPE))
        except EffectgateError as exc:
            return f"error {exc.code}"

    def _quarantine(self, world: Any, rng: random.Random) -> str:
        rows = [r for st in (State.VALIDATED, State.AWAITING_APPROVAL, State.SUBMITTED)
                for r in self._rows(world, st)]  # fmt: skip
        line = ""
        if not rows:  # a row journalled for it (never dispatched), as a harness may leave one
            line = self._act(world, self._gate(world), rng, send=False) + "; "
            rows = self._rows(world, State.VALIDATED)
            if not rows:
                return line + "nothing to take over"
        row = rows[rng.randrange(len(rows))]
        service = QuarantineService(world.store, clock=world.clock, approval_ttl=APPROVAL_TTL)
        try:
            service.take_over(SCOPE, row.operation_id, by=OPERATOR, reason="sim: operator review")
        except EffectgateError as exc:
            return f"{line}{row.operation_id} -> error {exc.code}"
        self.queued[row.op_key] = row.state
        return f"{line}{row.operation_id} {row.state.value} -> quarantined"

    def _release(self, world: Any, gate: Gate, rng: random.Random) -> str:
        rows = self._rows(world, State.QUARANTINED)
        if not rows:
            return "nothing quarantined"
        row = rows[rng.randrange(len(rows))]
        came_from = self.queued.get(row.op_key)
        service = QuarantineService(world.store, clock=world.clock, approval_ttl=APPROVAL_TTL)
        never = Proof(EvidenceKind.NEVER_DISPATCHED)
        release = Resolution(ResolutionOutcome.RELEASED, OPERATOR, never, "sim: released")
        try:
            moved = service.resolve(SCOPE, row.operation_id, release)
        except ResolutionRefused as exc:
            if row.submitted_at is None:
                self.step_violations.append(Violation(10, f"{row.op_key}: release refused"))
            return f"{row.operation_id} release -> error {exc.code}; " + self._settle(service, row)
        if row.submitted_at is not None or moved.state is not came_from:
            self.step_violations.append(Violation(
                10, f"{row.op_key} (dispatched={row.submitted_at is not None}) was released "
                f"to {moved.state.value}, from {came_from}"
            ))  # fmt: skip
        self.queued.pop(row.op_key, None)
        out = f"{row.operation_id} released -> {moved.state.value}"
        if moved.state is State.VALIDATED:
            out += f", dispatch -> {self._dispatch(gate, row.operation_id)}"
        return out

    def _settle(self, service: QuarantineService, row: Any) -> str:
        """A dispatched row leaves the queue only with evidence: the venue's record."""
        ids = [e.venue_id for e in self.venue.effects_for(row.op_key)] if self.venue else []
        if not ids:
            return "left in the queue"
        proof = Proof(EvidenceKind.VENUE_RECORD, reference=ids[0])
        applied = Resolution(ResolutionOutcome.APPLIED, OPERATOR, proof, "sim: venue record")
        moved = service.resolve(SCOPE, row.operation_id, applied)
        self.queued.pop(row.op_key, None)
        return f"resolved {moved.state.value} {moved.venue_id}"

    def _rows(self, world: Any, state: State) -> list[Any]:
        rows = world.store.list_operations(state=state, scope=SCOPE, limit=1_000_000)
        return sorted((r for r in rows if r.action == ACTION), key=lambda r: r.op_key)

    # --- the checks ---------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.wrapper is None:
            return found
        new = self.wrapper.arrivals[self.checked :]
        self.checked = len(self.wrapper.arrivals)
        for key, state, killed, live, queued in new:
            if state != State.SUBMITTED.value:
                found.append(Violation(3, f"{key} reached the venue while its row was {state}"))
            if killed:
                found.append(Violation(7, f"{key} reached the venue while {ACTION} was killed"))
            if not live:
                found.append(Violation(6, f"{key} reached the venue with no live grant"))
            if queued:
                found.append(Violation(10, f"{key} was dispatched from the quarantine queue"))
        allowed = {State.SUBMITTED, *TRANSITIONS[State.SUBMITTED]}
        for key in self.in_flight:
            row = world.store.get(*key.split(":", 1))
            if row is None or row.state not in allowed:
                ended = "gone" if row is None else row.state.value
                found.append(Violation(7, f"{key}, in flight at the kill, ended {ended}"))
        self.in_flight = []
        return found


def _out(row: Any) -> str:
    out = str(row.state.value) + (f" {row.venue_id}" if row.venue_id else "")
    if row.state in (State.VALIDATED, State.REJECTED) and row.detail:
        out += f" [{row.detail.split(' (')[0]}]"
    return out
