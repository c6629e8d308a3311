"""Tenants: several scopes on one ledger, with the same operation ids, never seeing each other.

The actor adds a class, ``tenant_order``, on its own paper venue, and proposes orders of it
through the first process in five scopes whose names sort next to each other byte by byte
(``t``, ``t-x``, ``t0``, ``t_x``, ``tx``: a key-range or ``LIKE`` filter that is one character
off would let one into another's view), drawing operation ids from one small pool so that
the same id lives in several scopes with different payloads. Steps: ``tenant-propose`` (a new
id in a scope, a retry of the scope's own payload, or a changed payload under the scope's id,
which must be ``idempotency_conflict``), ``tenant-look`` (a ``get`` in one scope of an id
only another scope used, which must find nothing) and ``tenant-inject`` (a record made at the
venue outside the boundary under a scope's key: the reconciler's orphan, filed under that
scope).

Checked: a scope's listing, ``get`` and divergences hold its own records only, each with the
fingerprint that scope proposed (invariant 2: identity is ``(scope, operation_id)``, and no
payload is judged against another tenant's); the same id in two scopes reached the venue
under two keys, each at most once (invariant 1); every request found its row ``submitted``
(invariant 3); at the end, each injected orphan is among its own scope's divergences.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from effectgate._core.intent import ActionClass, IntentBase, Registry
from effectgate._core.policy import LimitPolicy
from effectgate._evidence.invariants import Violation, at_most_one_dispatch
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors._kit import order_class
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import EffectgateError, IdempotencyConflict
from effectgate.examples import InstrumentId

__all__ = ["SCOPES", "TENANT_ACTION", "Tenants"]

TENANT_ACTION = "tenant_order"
ADAPTER = "paper-tenants"
#: Byte-adjacent names: "t" < "t-x" < "t0" < "t:" (t's keys) < "t;" < "t_x" < "tx".
SCOPES = ("t", "t-x", "t0", "t_x", "tx")
#: One small pool of ids, shared by the scopes, so ids collide across tenants often.
IDS = tuple(f"ord-{n}" for n in range(1, 5))


class TenantOrder(IntentBase):
    """An order of the tenants' class."""

    action: Literal["tenant_order"]
    instrument: InstrumentId
    quantity: int


def tenant_class() -> ActionClass:
    return order_class(TENANT_ACTION, TenantOrder, ADAPTER)


class Tenants:
    """The ``tenant-propose`` and ``tenant-look`` steps and the per-scope checks."""

    name = "tenants"

    def __init__(self) -> None:
        self.venue: PaperVenue | None = None
        self.adapter: checks.Witness | None = None
        self.store: Any = None
        #: (scope, id) -> the fingerprint the scope proposed first under it (what it owns).
        self.proposed: dict[tuple[str, str], str] = {}
        self.intents: dict[tuple[str, str], dict[str, object]] = {}
        self.step_violations: list[Violation] = []
        self.orphans: list[tuple[str, str]] = []  # (scope, operation key) made outside
        self.checked = 0
        self.dirty = False

    def steps(self) -> Steps:
        return (("tenant-propose", 3), ("tenant-look", 1), ("tenant-inject", 1))

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store
        if self.adapter is None:  # the venue is outside the process: it outlives every crash
            self.venue = PaperVenue(clock=spec.clock, instruments=frozenset({"ABC", "XYZ-PERP"}))
            self.adapter = checks.Witness(PaperAdapter(self.venue), lambda: self.store)
        if TENANT_ACTION not in spec.registry.names():
            classes = [spec.registry.get(n) for n in spec.registry.names()]
            spec.registry = Registry([*classes, tenant_class()])
        spec.policies[TENANT_ACTION] = LimitPolicy()
        spec.adapters[ADAPTER] = self.adapter

    def _intent(self, rng: random.Random) -> dict[str, object]:
        return {
            "intent_version": "1",
            "action": TENANT_ACTION,
            "instrument": rng.choice(("ABC", "XYZ-PERP")),
            "quantity": rng.randint(1, 99),
        }

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        self.dirty = True
        scope = SCOPES[rng.randrange(len(SCOPES))]
        if kind == "tenant-look":
            return self._look(world, scope, rng)
        if kind == "tenant-inject" and self.venue is not None:
            key = f"{scope}:ext-{len(self.orphans) + 1}"
            self.orphans.append((scope, key))
            return f"{key} made at the venue outside the boundary: {self.venue.inject_record(key)}"
        op_id = IDS[rng.randrange(len(IDS))]
        owned = self.intents.get((scope, op_id))
        changed = owned is not None and rng.random() < 0.25
        intent = self._intent(rng) if owned is None or changed else owned
        mark = world.registry.parse(TENANT_ACTION, intent).fingerprint  # the boundary's own
        if changed and mark == self.proposed[(scope, op_id)]:
            changed = False
        try:
            row = world.gate.submit(TENANT_ACTION, op_id, intent, scope=scope)
        except IdempotencyConflict:
            if not changed:
                self.step_violations.append(
                    Violation(2, f"{scope}:{op_id}: its own payload refused as a conflict")
                )
            return f"{scope}:{op_id} changed -> idempotency_conflict"
        except EffectgateError as exc:  # a lost commit, a ledger fault: the row may exist
            self.intents.setdefault((scope, op_id), intent)
            self.proposed.setdefault((scope, op_id), mark)
            return f"{scope}:{op_id} -> error {exc.code}"
        if changed:
            self.step_violations.append(
                Violation(2, f"{scope}:{op_id}: a changed payload was accepted ({row.state.value})")
            )
        self.intents.setdefault((scope, op_id), intent)
        self.proposed.setdefault((scope, op_id), mark)
        return f"{scope}:{op_id} -> {row.state.value}"

    def _look(self, world: Any, scope: str, rng: random.Random) -> str:
        mine = {i for s, i in self.proposed if s == scope}
        others = sorted({i for s, i in self.proposed if s != scope} - mine)
        if not others:
            return f"{scope}: nothing of another tenant to look for"
        op_id = others[rng.randrange(len(others))]
        row = world.store.get(scope, op_id)
        if row is not None:
            self.step_violations.append(
                Violation(2, f"{scope}: get({op_id!r}) found {row.op_key}, another tenant's id")
            )
        return f"{scope}: get {op_id} of another tenant -> {'found' if row else 'none'}"

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.adapter is None or not (self.dirty or final):
            return found
        self.dirty = False
        requests = self.adapter.requests
        found += at_most_one_dispatch(requests)
        found += checks.journalled_before_dispatch(
            requests[self.checked :], self.adapter.states[self.checked :]
        )
        self.checked = len(requests)
        store = world.store
        for scope in SCOPES:
            rows = store.list_operations(scope=scope, action=TENANT_ACTION, limit=len(IDS) + 1)
            for row in rows:
                want = self.proposed.get((scope, row.operation_id))
                if row.scope != scope or not row.op_key.startswith(f"{scope}:"):
                    found.append(Violation(2, f"{scope}: its listing holds {row.op_key}"))
                elif want is None:
                    found.append(Violation(2, f"{row.op_key}: a row this tenant never proposed"))
                elif row.fingerprint != want:
                    found.append(Violation(2, f"{row.op_key}: another payload than its own"))
            filed = {d.op_key for d in store.list_divergences_in(scope)}
            for key in sorted(filed):
                if not key.startswith(f"{scope}:"):
                    found.append(Violation(2, f"{scope}: its divergences hold {key}"))
            if final and world.last_pass_swept:  # the final pass swept: every orphan is filed
                for s, key in self.orphans:
                    if s == scope and key not in filed:
                        found.append(Violation(5, f"{key}: an orphan not among {scope}'s"))
        return found
