"""Venue models with real key contracts (:mod:`effectgate._sim.venues`), one action class each.

The actor adds a charge class per venue model (``vm_window``, ``vm_token``, ``vm_mail``,
``vm_keyless``, ``vm_lagging``), each declaring its adapter's venue contract, and proposes
charges of them through the first process in its own scope (``venues``). Its steps:

* ``venue-send``: a new charge (sometimes a retry of one under the same id) to a model drawn
  at random, the request or its reply sometimes lost; for the lagging venue, the delay before
  the effect shows in its listing is drawn (inside the 60 s horizon, or past it);
* ``venue-redeliver``: the network delivers a copy of a request the boundary sent before (a
  proxy's retry), sometimes after the clock jumped past the Stripe-like key window (24 h):
  the window and token venues absorb it inside their contract, mail and the keyless venue make
  a second effect, which the sweep must report;
* ``venue-sweep``: 20-90 s pass, then a reconcile pass (the lagging listing catches up);
* ``venue-reset``: an operator closes a model's breaker (a duplicate opens it).

Checked, from the venues' ground truth: at most one dispatch per key and each journalled first
(invariants 1, 3); no dispatch of a held class (7); no key ever reached a venue with two
payloads (2); after every sweep of a model, every key it shows more than once is a
``duplicate-effect`` and every key shown once the acknowledged row or a divergence (5), no row
was written off while its record was visible (4), and no divergence is recorded twice;
every acknowledged row names a record made under its own key and no row the venue refused
holds an effect (3, 4).
"""

from __future__ import annotations

import importlib.util
import random
from collections import Counter
from typing import Any, Literal

from effectgate._core.intent import ActionClass, EffectClass, IntentBase, PositiveDecimal, Registry
from effectgate._core.policy import LimitPolicy
from effectgate._core.states import State
from effectgate._core.venue import VenueContract
from effectgate._evidence.invariants import Violation, duplicates_reported
from effectgate._execute.adapter import Adapter
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.venues import adapters as va
from effectgate._sim.venues import models
from effectgate.errors import EffectgateError

__all__ = ["MODELS", "VenueModels"]

SCOPE, OPERATOR = "venues", "sim-venue-operator"
HORIZON = 60.0
#: Delays before the lagging venue lists an effect: inside the horizon, and past it.
LAGS = (0.0, 10.0, 40.0, 120.0, 250.0)
#: (class name, venue model, adapter) per key contract.
MODELS: tuple[tuple[str, type[models.SimVenue], type[va.SimAdapter]], ...] = (
    ("vm_window", models.WindowVenue, va.WindowAdapter),
    ("vm_token", models.TokenVenue, va.TokenAdapter),
    ("vm_mail", models.MailVenue, va.MailAdapter),
    ("vm_keyless", models.KeylessVenue, va.KeylessAdapter),
    ("vm_lagging", models.LaggingVenue, va.LaggingAdapter),
)


class Charge(IntentBase):
    """A charge at one of the venue models (``action`` names the class)."""

    account: Literal["acct-1", "acct-2", "acct-closed"]
    amount: PositiveDecimal
    currency: Literal["usd", "eur"]


#: The sixth model, where the ``server`` extra is installed: the MCP gateway's real upstream
#: adapter in front of a simulated upstream tool that honours its key argument for 24 h.
GATEWAY = "vm_gateway"
_HAS_GATEWAY = all(importlib.util.find_spec(m) is not None for m in ("mcp", "mcp_types"))


def charge_class(name: str, adapter: str, contract: VenueContract) -> ActionClass:
    return ActionClass(
        name=name,
        model=Charge,
        adapter=adapter,
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=HORIZON,
        key_retention=models.KEY_WINDOW,
        venue=contract,
    )


class _Model:
    """One venue model as the actor holds it across process builds."""

    def __init__(
        self, action: str, venue: models.SimVenue, adapter: Adapter, contract: VenueContract
    ) -> None:
        self.action, self.venue, self.adapter, self.contract = action, venue, adapter, contract
        self.witness: checks.Witness | None = None
        self.checked = 0  # requests already judged
        self.listed = 0  # venue listings already judged
        self.mismatches = 0


class VenueModels:
    """The ``venue-send``, ``venue-redeliver`` and ``venue-reset`` steps and their checks."""

    name = "venues"

    def __init__(self) -> None:
        self.models: list[_Model] = []
        self.store: Any = None
        self.sent: list[tuple[str, str, dict[str, object]]] = []  # (action, id, intent)
        self.serial = 0
        self.calls = 0
        self.sent_keys: Counter[str] = Counter()
        self.step_violations: list[Violation] = []
        self.audit_seq = 0
        self.actions = frozenset([*(name for name, _, _ in MODELS), GATEWAY])
        self.classes: list[ActionClass] = []
        self.reported: Counter[tuple[str, str, str]] = Counter()

    def steps(self) -> Steps:
        return (("venue-send", 4), ("venue-redeliver", 2), ("venue-sweep", 2), ("venue-reset", 1))

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store
        if not self.models:  # the venues are outside the process: they outlive every crash
            for action, venue_cls, adapter_cls in MODELS:
                venue = venue_cls(spec.clock)
                adapter = adapter_cls(venue)
                self.models.append(_Model(action, venue, adapter, adapter_cls.contract))
            if _HAS_GATEWAY:
                upstream = models.WindowVenue(spec.clock)
                gateway = va.upstream_adapter(upstream)
                self.models.append(_Model(GATEWAY, upstream, gateway, va.WindowAdapter.contract))
            for m in self.models:
                m.witness = checks.Witness(m.adapter, lambda: self.store)
        names = spec.registry.names()
        if MODELS[0][0] not in names:
            if not self.classes:  # built once per seed, not on every process build
                self.classes = [
                    charge_class(m.action, m.adapter.name, m.contract) for m in self.models
                ]
            spec.registry = Registry([*(spec.registry.get(n) for n in names), *self.classes])
        for m in self.models:
            spec.policies[m.action] = LimitPolicy()
            spec.adapters[m.adapter.name] = m.witness

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        if kind == "venue-reset":
            m = self.models[rng.randrange(len(self.models))]
            c = world.operator.reset_breaker(m.action, operator=OPERATOR)
            return f"{m.action} breaker_open={c.breaker_open}"
        if kind == "venue-redeliver":
            return self._redeliver(world, rng)
        if kind == "venue-sweep":
            # Time passes while the lagging listing catches up; the reconciler reads it.
            wait = rng.randint(20, 90)
            world.clock.advance(wait)
            r = world.reconcile()
            new = " ".join(f"{k}:{key}" for k, key, _, _ in r.new_divergences)
            return f"+{wait}s confirmed={r.confirmed} written_off={r.written_off} new=[{new}]"
        return self._send(world, rng)

    def _send(self, world: Any, rng: random.Random) -> str:
        if self.sent and rng.random() < 0.2:
            action, op_id, intent = self.sent[rng.randrange(len(self.sent))]
            m = next(m for m in self.models if m.action == action)
            note, fault = "retry", None  # a replay: nothing reaches the venue to lose
        else:
            # The lagging venue twice as often: its late records need a sweep at the right age.
            m = rng.choices(self.models, (1, 1, 1, 1, 2, 1)[: len(self.models)])[0]
            self.serial += 1
            op_id = f"vm-{self.serial:04d}"
            intent = {
                "intent_version": "1",
                "action": m.action,
                "account": "acct-closed"
                if rng.random() < 0.1
                else rng.choice(("acct-1", "acct-2")),
                "amount": f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}",
                "currency": rng.choice(("usd", "eur")),
            }
            self.sent.append((m.action, op_id, intent))
            note = str(intent["amount"])
            pick = rng.random()
            fault = "before" if pick < 0.1 else "after" if pick < 0.4 else None
            if isinstance(m.venue, models.LaggingVenue):
                m.venue.next_lag = rng.choice(LAGS)
                note += f" lag={m.venue.next_lag:g}s"
        m.venue.fail_next(fault)
        c = world.store.controls(m.action)
        held = c.killed or c.breaker_open or c.shadow
        before = len(m.witness.requests) if m.witness else 0
        try:
            row = world.gate.submit(m.action, op_id, intent, scope=SCOPE)
        except EffectgateError as exc:
            out = f"error {exc.code}"
        else:
            out = row.state.value + (f" {row.venue_id}" if row.venue_id else "")
        finally:
            m.venue.fail_next(None)  # a fault the gate never reached the venue with ends here
        if held and m.witness is not None and len(m.witness.requests) > before:
            self.step_violations.append(Violation(7, f"{m.action} dispatched while held"))
        return f"{m.action} {op_id} {note} fault={fault} -> {out}"

    def _redeliver(self, world: Any, rng: random.Random) -> str:
        sent = [(m, r) for m in self.models if m.witness for r in m.witness.requests]
        if not sent:
            return "nothing sent yet"
        m, request = sent[rng.randrange(len(sent))]
        line = ""
        if rng.random() < 0.35:
            jump = models.KEY_WINDOW + rng.randint(1, 3600)
            world.clock.advance(jump)
            line = f"+{jump:g}s; "
        try:
            # The network's copy, not the boundary's call (the gateway's: the upstream call again).
            if isinstance(m.adapter, va.SimAdapter):
                receipt = m.adapter.deliver(request)
            else:
                receipt = m.adapter.execute(request, timeout=10.0)
        except EffectgateError as exc:
            return f"{line}{request.operation_key} again at {m.action} -> error {exc.code}"
        return f"{line}{request.operation_key} again at {m.action} -> {receipt.outcome.value}" + (
            f" {receipt.venue_id}" if receipt.venue_id else ""
        )

    # --- the checks ---------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        self.calls += 1
        swept = False
        seen: list[tuple[str, str]] = []
        for m in self.models:
            if m.witness is None:
                continue
            new = m.witness.requests[m.checked :]
            found += checks.journalled_before_dispatch(new, m.witness.states[m.checked :])
            m.checked = len(m.witness.requests)
            for r in new:
                self.sent_keys[r.operation_key] += 1
                if self.sent_keys[r.operation_key] == 2:
                    found.append(Violation(1, f"{r.operation_key} was dispatched twice"))
            if len(m.venue.mismatches) > m.mismatches:
                tags = m.venue.mismatches[m.mismatches :]
                m.mismatches = len(m.venue.mismatches)
                found += [Violation(2, f"{t} reached {m.action} with two payloads") for t in tags]
            # A listing counts once a pass ran to its end after it (a broken pass is retried).
            if (m.venue.listings != m.listed and world.last_pass_swept) or final:
                m.listed = m.venue.listings
                swept = True
                seen += [(e.key, e.venue_id) for e in m.venue.visible()]
        if swept:
            # One read of the divergences for every model listed (their keys never overlap).
            found += duplicates_reported(world.store, [k for k, _ in seen])
            found += checks.venue_records_accounted(world.store, seen)
            found += self._settled_right(world.store)
        if final or self.calls % 10 == 0:
            found += self._ground_truth(world.store)
        return found

    def _rows(self, store: Any, state: State) -> list[Any]:
        # Only this actor's scope: the core workload's rows are most of the ledger.
        rows = store.list_operations(state=state, scope=SCOPE, limit=1_000_000)
        return [r for r in rows if r.action in self.actions]

    def _model(self, action: str) -> _Model:
        return next(m for m in self.models if m.action == action)

    def _settled_right(self, store: Any) -> list[Violation]:
        """Invariants 4 and 5: nothing written off while its record was listed, and no
        divergence of these classes recorded twice."""
        out: list[Violation] = []
        for row in self._rows(store, State.FAILED):
            if not (row.detail or "").startswith(checks.WRITE_OFF):
                continue
            shown = [
                e.venue_id
                for e in self._model(row.action).venue.effects_for(row.op_key)
                # Strictly before: a copy redelivered in the instant of the write-off (the
                # clock has not moved) may have landed after the pass that wrote it off.
                if e.visible_at < row.updated_at
            ]
            if shown:
                out.append(Violation(4, f"{row.op_key} written off while the venue listed {shown}"))
        for d in store.list_divergences_in(SCOPE, limit=1_000_000):
            if d.kind != "missing-at-venue":
                continue
            action = store.get(SCOPE, d.op_key.partition(":")[2])
            if action is None:
                continue
            effects = self._model(action.action).venue.effects_for(d.op_key)
            if any(e.visible_at <= d.first_seen for e in effects):
                out.append(Violation(5, f"{d.op_key} reported missing while the venue listed it"))
        # Reported once: each divergence's audit entry (its alarm) is written once, however
        # many sweeps see it again (read incrementally from the chain).
        for event in store.iter_audit(self.audit_seq):
            self.audit_seq = event.seq
            if event.kind != "divergence" or event.scope != SCOPE:
                continue
            fact = (str(event.detail.get("kind")), str(event.operation_id),
                    str(event.detail.get("venue_ids")))  # fmt: skip
            self.reported[fact] += 1
            if self.reported[fact] == 2:
                out.append(Violation(5, f"{fact[0]} of {SCOPE}:{fact[1]} reported twice"))
        return out

    def _ground_truth(self, store: Any) -> list[Violation]:
        """Invariants 3 and 4: an acknowledged row names a record made under its own key; a
        row the venue refused (failed, not written off) holds no effect there."""
        out: list[Violation] = []
        for row in self._rows(store, State.ACKNOWLEDGED):
            ids = [e.venue_id for e in self._model(row.action).venue.effects_for(row.op_key)]
            if row.venue_id not in ids:
                out.append(
                    Violation(4, f"{row.op_key} is acknowledged as {row.venue_id}, not its own")
                )
        for row in self._rows(store, State.FAILED):
            if (row.detail or "").startswith(checks.WRITE_OFF):
                continue
            if self._model(row.action).venue.effects_for(row.op_key):
                out.append(Violation(3, f"{row.op_key} is failed but the venue applied it"))
        return out
