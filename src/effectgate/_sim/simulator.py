"""One seed of the simulation: a workload and a fault schedule drawn from one ``random.Random``.

The real :class:`Gate`, :class:`Reconciler` and :class:`Operator` run over a real SQLite ledger (a
temporary folder per seed) against a :class:`PaperVenue` on a :class:`ManualClock`. Each step is
drawn, run and written to the history as one line; the shared checkers of
:mod:`effectgate._evidence.invariants` run after every step, and after a final phase in which faults
stop, the clock jumps past every horizon and the reconciler runs once more. A step is drawn from the
generator *before* it runs and its draws never depend on the planned number of steps, so a run of
``k`` steps is exactly the first ``k`` steps of a longer one: shrinking is re-running with fewer
steps.

Nothing in the history comes from the wall clock, uuid4, the host or set iteration order: the
same seed gives the same history, byte for byte.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from effectgate._core.controls import ApprovalRules, BreakerConfig
from effectgate._core.intent import Registry
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.states import State
from effectgate._evidence.invariants import (
    Violation,
    at_most_one_dispatch,
    audit_chain_verifies,
    duplicates_reported,
    no_dispatch_while_held,
    no_write_off_inside_horizon,
    uncertain_rows_settled,
)
from effectgate._execute.crashpoints import CRASH_POINTS, SimulatedCrash, disarm
from effectgate._execute.executor import Gate
from effectgate._execute.operator import Operator
from effectgate._execute.reconciler import Reconciler, ReconcileReport
from effectgate._sim import checks, tally
from effectgate._sim.actor import Actor
from effectgate._sim.faults import LOSABLE, LossyStore
from effectgate._sim.stores import SimLedger, sim_ledger
from effectgate._sim.watch import LedgerWatch
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import (
    ApprovalFingerprintMismatch,
    CommitOutcomeUnknown,
    EffectgateError,
    IdempotencyConflict,
    StoreError,
)
from effectgate.examples import default_registry
from effectgate.store.base import Operation
from effectgate.store.roles import Store
from effectgate.testing import ManualClock, crash_at

__all__ = ["DEFAULT_STEPS", "SeedResult", "run_seed"]

DEFAULT_STEPS = 120
ACTIONS = ("cancel_order", "submit_order")
#: The venue lists the first two; an order for the third is refused there (a not_applied
#: receipt with proof), or, with its reply lost, left uncertain until written off.
INSTRUMENTS = ("ABC", "XYZ-PERP", "DELISTED")
LISTED = frozenset(INSTRUMENTS[:2])
#: Approvals left open this long are denied by the "expire" step (clock jumps pass it).
APPROVAL_TTL = 300.0
#: Notional = quantity (1-9) * price: some under the approval line, some above, some refused.
PRICES = ("20.00", "60.00", "150.00")
LIMIT, APPROVE_ABOVE = Decimal("1000"), Decimal("500")
#: Read lag stays well inside the 60 s horizon of the example classes, as a venue must.
READ_LAGS = (0.0, 5.0, 20.0)
#: Past every horizon and read lag, and past the approval TTL: every bounded wait has ended.
FINAL_JUMP = max(60.0 + max(READ_LAGS), APPROVAL_TTL) + 1.0
AUDIT_EVERY = 10  # the chain (new entries) and the venue-truth checks of every settled row

#: (step kind, weight). Order matters for determinism: never build this from a set.
STEPS: tuple[tuple[str, int], ...] = (
    ("new", 22),
    ("retry", 10),
    ("twin", 4),
    ("conflict", 3),
    ("approve", 5),
    ("approve-stale", 2),
    ("refuse", 2),
    ("expire", 1),
    ("dispatch-held", 4),
    ("kill", 2),
    ("release", 3),
    ("reset-breaker", 4),
    ("shadow-on", 1),
    ("shadow-off", 2),
    ("reconcile", 8),
    ("tick", 8),
    ("jump", 2),
    ("crash", 6),
    ("lose-reply", 4),
    ("lose-commit", 4),
    ("read-lag", 2),
    ("honour-key", 2),
    ("inject", 4),
    ("ledger-fault", 5),
)
_KINDS = tuple(k for k, _ in STEPS)
_WEIGHTS = tuple(w for _, w in STEPS)
#: Steps that may lift a hold: dispatches during them are not judged against the old one.
_LIFTS = frozenset({"release", "reset-breaker", "shadow-off"})
#: Terminal states of rows the boundary never sent (a record under their key is not its own).
_NEVER_SENT = (State.REJECTED, State.DENIED, State.SHADOWED)
OPERATOR = "sim-operator"


@dataclass
class SeedResult:
    """One seed's run: its history (one line per step), and the violations that stopped it.

    ``failed_at``: the step (1-based) after which a violation was seen; ``steps + 1`` for the
    final phase; None when every check held.
    """

    seed: int
    steps: int
    history: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    failed_at: int | None = None
    #: Steps per capability or door, and faults injected per kind (``_sim/tally.py``); the
    #: ledger's faults that fired count as ``ledger_busy``, ``ledger_lost``, ...
    drove: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.history).encode()).hexdigest()

    @property
    def replay(self) -> str:
        return f"effectgate simulate --seeds 1 --seed {self.seed} --steps {self.steps}"


def _policies() -> dict[str, Any]:
    return {
        # Above 500 needs an approver, above 1000 is refused: all three paths occur.
        "submit_order": LimitPolicy(LIMIT, approve_above=APPROVE_ABOVE),
        "cancel_order": LimitPolicy(),
    }


@dataclass
class _Spec:
    """A :class:`~effectgate._sim.actor.ProcessSpec`: what each process is built from."""

    registry: Registry
    policies: dict[str, Any]
    adapters: dict[str, Any]
    clock: Callable[[], float]
    store: Store
    gate_kwargs: dict[str, Any] = field(default_factory=dict)
    reconciler_kwargs: dict[str, Any] = field(default_factory=dict)


def _quiet(_: object) -> None:
    """Alert sink: the simulator judges outcomes itself; alarms are expected here."""


class _World:
    """What lives across a crash (the ledger file, the venue, the clock, what reached the
    adapter, what the simulator knows as ground truth) and what a crash abandons (the gates,
    reconciler and operator objects)."""

    def __init__(self, ledger: SimLedger, actors: Sequence[Actor] = ()) -> None:
        self.ledger = ledger
        self.actors = tuple(actors)
        # Whether the last reconcile pass ran to its end and swept: a pass a ledger fault broke
        # may have listed a venue without recording what it saw (the actors' sweep checks).
        self.last_pass_swept = False
        self.clock = ManualClock()
        self.venue = PaperVenue(clock=self.clock, instruments=LISTED)
        # What reached the venue, and the state its row was in when it did (invariant 3).
        self.adapter = checks.Witness(PaperAdapter(self.venue), lambda: self.store)
        self.injected_at: Counter[str] = Counter()  # records made outside the boundary, by key
        self.approved: set[str] = set()  # operation keys an operator approved
        # The operator's and the checks' store; each gate and the reconciler open their own.
        self.store: Store = ledger.connect("sim-operator")
        self._build()

    def reconcile(self) -> ReconcileReport:
        """One reconcile pass; :attr:`last_pass_swept` says whether it ended and swept."""
        self.last_pass_swept = False
        report = self.reconciler.run_once()
        self.last_pass_swept = report.swept
        return report

    def _build(self) -> None:
        """Build one process from the ledger alone: each actor adds to its spec first."""
        spec = _Spec(
            default_registry(), _policies(), {"paper": self.adapter}, self.clock, self.store
        )
        for actor in self.actors:
            actor.configure(spec)
        self.registry, self.policy = spec.registry, PolicySet(spec.policies)
        self.lossy = LossyStore(self.ledger.connect("sim-process-1"))
        self.adapters = adapters = spec.adapters

        def gate(store: Store, process_id: str) -> Gate:
            return Gate(
                store=store,
                registry=self.registry,
                adapters=adapters,
                policy=self.policy,
                clock=self.clock,
                # One payload under many ids trips the breaker: the twin steps exercise it.
                breakers={"submit_order": BreakerConfig(max_repeats=3)},
                approvals=ApprovalRules(ttl=APPROVAL_TTL),
                alerts=_quiet,
                process_id=process_id,  # the default names the host and pid
                **spec.gate_kwargs,
            )

        self.gate = gate(cast(Store, self.lossy), "sim-process-1")
        # A second executor on the same ledger (continuations need a dispatcher that did not
        # work on the original).
        self.peer = gate(self.ledger.connect("sim-process-2"), "sim-process-2")
        self.reconciler = Reconciler(
            store=self.ledger.connect("sim-reconciler"),
            registry=self.registry,
            adapters=adapters,
            clock=self.clock,
            page_size=7,  # small pages: the merge-join crosses page boundaries often
            owner="sim-reconciler",  # the default names the host and pid
            # A sweeper that died (or whose unlock failed) holds the sweep lock this long:
            # past it inside the final jump, so the final pass sweeps (invariant 5).
            sweep_ttl=FINAL_JUMP / 2,
            alerts=_quiet,
            **spec.reconciler_kwargs,
        )
        self.operator = Operator(
            store=self.store, registry=self.registry, alerts=_quiet, clock=self.clock
        )

    def crash(self) -> None:
        """The process died: abandon the objects, reopen the ledger from its file."""
        disarm()
        self.ledger.crash()
        self.store = self.ledger.connect("sim-operator")
        self._build()

    def close(self) -> None:
        self.ledger.close()


class _Run:
    def __init__(self, seed: int, steps: int, world: _World) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret
        self.result = SeedResult(seed, steps)
        self.w = world
        self.ops: list[tuple[str, str, dict[str, object]]] = []  # (id, action, intent)
        self.serial = 0
        self.injected = 0
        self.watch = LedgerWatch()
        self.swept = False
        self.step_violations: list[Violation] = []  # what a step saw itself (its answer)
        self.by_kind = {kind: a for a in world.actors for kind, _ in a.steps()}
        kinds = [*_KINDS, *(k for a in world.actors for k, _ in a.steps())]
        if len(set(kinds)) != len(kinds):
            raise ValueError("step kinds must be unique across the actors")
        self.kinds = tuple(kinds)
        self.weights = (*_WEIGHTS, *(w for a in world.actors for _, w in a.steps()))

    # --- the workload -------------------------------------------------------------------

    def _intent(self) -> tuple[str, dict[str, object]]:
        rng = self.rng
        instrument = rng.choice(INSTRUMENTS[:2]) if rng.random() < 0.9 else INSTRUMENTS[2]
        if rng.random() < 0.8:
            return "submit_order", {
                "intent_version": "1",
                "action": "submit_order",
                "instrument": instrument,
                "side": rng.choice(("buy", "sell")),
                "order_type": "limit",
                "quantity": str(rng.randint(1, 9)),
                "limit_price": rng.choice(PRICES),
            }
        return "cancel_order", {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": instrument,
            "order_ref": f"ref-{rng.randint(1, 40)}",
        }

    def _new_id(self) -> str:
        self.serial += 1
        return f"op-{self.serial:04d}"

    def _submit(self, op_id: str, action: str, intent: dict[str, object]) -> str:
        return self._gate(lambda: self.w.gate.submit(action, op_id, intent))

    def _new(self) -> str:
        action, intent = self._intent()
        op_id = self._new_id()
        self.ops.append((op_id, action, intent))
        return f"{op_id} {action} {_brief(intent)} -> {self._submit(op_id, action, intent)}"

    def _gate(self, call: Callable[[], Operation]) -> str:
        """Run a gate call; a simulated crash abandons the process's objects."""
        try:
            row = call()
        except SimulatedCrash as crash:
            self.w.crash()
            return f"crashed at {crash.point}"
        except EffectgateError as exc:
            return f"error {exc.code}"
        return _outcome(row)

    def _rows(self, state: State) -> list[Operation]:
        # The core workload's own scope: the actors' rows are theirs to approve and dispatch.
        rows = self.w.store.list_operations(state=state, scope="default", limit=100_000)
        return sorted(rows, key=lambda r: r.op_key)

    def step(self, kind: str) -> str:
        rng, w = self.rng, self.w
        if kind == "new":
            return self._new()
        if kind in ("retry", "twin", "conflict"):
            if not self.ops:
                return self._new()
            op_id, action, intent = self.ops[rng.randrange(len(self.ops))]
            if kind == "twin":
                op_id = self._new_id()
                self.ops.append((op_id, action, intent))
            elif kind == "conflict":
                return self._conflict(op_id, action, intent)
            return f"{op_id} -> {self._submit(op_id, action, intent)}"
        if kind == "approve-stale":
            return self._approve_stale()
        if kind in ("approve", "refuse"):
            pending = self._rows(State.AWAITING_APPROVAL)
            if not pending:
                return "nothing pending"
            row = pending[rng.randrange(len(pending))]
            try:
                decide = w.operator.approve if kind == "approve" else w.operator.refuse
                out = decide(row.operation_id, fingerprint=row.fingerprint, approver=OPERATOR)
            except EffectgateError as exc:
                return f"{row.operation_id} -> error {exc.code}"
            if kind == "approve":
                w.approved.add(row.op_key)
            if kind == "refuse":
                return f"{row.operation_id} -> {out.operation.state.value}"
            return f"{row.operation_id} -> {out.operation.state.value}, dispatch -> " + self._gate(
                lambda: w.gate.dispatch(row.operation_id)
            )
        if kind == "expire":
            expired = w.operator.expire_approvals()
            return "denied [" + " ".join(sorted(r.operation_id for r in expired)) + "]"
        if kind == "dispatch-held":
            validated = self._rows(State.VALIDATED)
            if not validated:
                return "nothing validated"
            row = validated[rng.randrange(len(validated))]
            return f"{row.operation_id} -> {self._gate(lambda: w.gate.dispatch(row.operation_id))}"
        if kind in ("kill", "release", "reset-breaker", "shadow-on", "shadow-off"):
            action = rng.choice(ACTIONS)
            if kind == "kill":
                c = w.operator.kill(action, operator=OPERATOR)
            elif kind == "release":
                c = w.operator.release(action, operator=OPERATOR)
            elif kind == "reset-breaker":
                c = w.operator.reset_breaker(action, operator=OPERATOR)
            else:
                c = w.operator.set_shadow(action, kind == "shadow-on", operator=OPERATOR)
            return f"{action} killed={c.killed} breaker_open={c.breaker_open} shadow={c.shadow}"
        if kind == "reconcile":
            report = w.reconcile()
            self._tripped(report)
            self.swept = report.swept  # a dead sweeper's lock may still hold (its ttl)
            return _report(report)
        if kind in ("tick", "jump"):
            seconds = rng.randint(1, 15) if kind == "tick" else rng.randint(40, 150)
            w.clock.advance(seconds)
            return f"+{seconds}s"
        if kind == "crash":
            point = rng.choice(CRASH_POINTS)
            with crash_at(point, mode="raise"):
                return f"armed {point}; {self._new()}"
        if kind == "lose-reply":
            after = rng.random() < 0.5
            w.venue.fail_next(1, after_apply=after)
            return f"after_apply={after}; {self._new()}"
        if kind == "lose-commit":
            what = rng.choice(LOSABLE)
            wrote = rng.random() < 0.5
            w.lossy.arm(what, wrote=wrote)
            if what == "dispatch":
                return f"{what} wrote={wrote}; " + self.step("dispatch-held")
            return f"{what} wrote={wrote}; {self._new()}"
        if kind == "read-lag":
            lag = rng.choice(READ_LAGS)
            w.venue.set_read_lag(lag)
            return f"{lag:g}s"
        if kind == "honour-key":
            honour = rng.random() < 0.6
            w.venue.set_honour_key(honour)
            return f"honour={honour}"
        if kind == "inject":
            return self._inject()
        if kind == "ledger-fault":
            return self._ledger_fault()
        if kind in self.by_kind:
            try:
                return self.by_kind[kind].step(kind, w, rng)
            except SimulatedCrash as crash:  # the process died mid-step: restart it
                w.crash()
                return f"crashed at {crash.point}"
        raise ValueError(f"unknown step kind {kind!r}")

    def _inject(self) -> str:
        """A record made outside the boundary: an orphan, or under a ledger row's key."""
        rng = self.rng
        # Some records go under a row the boundary never sent (refused, denied, shadowed): the
        # venue's word against a terminal row, which the sweep may not move (a refused repair).
        unsent = (
            [r for st in _NEVER_SENT for r in self._rows(st) if r.op_key.startswith("default:")]
            if self.ops and rng.random() < 0.3
            else []
        )
        if unsent:
            key = unsent[rng.randrange(len(unsent))].op_key
        elif not self.ops or rng.random() < 0.4:
            self.injected += 1
            key = f"default:ext-{self.injected:04d}"
        else:
            key = f"default:{self.ops[rng.randrange(len(self.ops))][0]}"
        times = rng.choice((1, 2) if unsent else (1, 1, 2))
        ids = [self.w.venue.inject_record(key) for _ in range(times)]
        self.w.injected_at[key] += times
        return f"{key} x{times} ({', '.join(ids)})"

    def _ledger_fault(self) -> str:
        """A statement or commit of the ledger fails as the driver would, during a submission,
        a held dispatch or a reconcile pass: the gate retries or fails cleanly, and what it left
        uncertain is reconciled (the checks after every step and at the end judge it)."""
        rng, faults = self.rng, self.w.ledger.faults
        kind, skip = rng.choice(faults.kinds), rng.randrange(4)
        then = rng.choice(("new", "new", "dispatch-held", "reconcile"))
        faults.arm(kind, skip)
        try:
            line = self.step(then)
        except (StoreError, CommitOutcomeUnknown) as exc:  # a pass stops; the next one resumes
            line = f"error {exc.code}"
        finally:
            fired = faults.disarm()
        return f"{kind} skip={skip} {'fired' if fired else 'missed'}; {then}: {line}"

    def _conflict(self, op_id: str, action: str, intent: dict[str, object]) -> str:
        """Invariant 2: a changed payload under a journalled id is refused."""
        changed = "order_ref" if action == "cancel_order" else "quantity"
        new = ("ref-99", "ref-98") if changed == "order_ref" else ("11", "12")
        # Another value than the id's journalled one (a conflict that journalled afresh, when the
        # first submit of the id failed, made that the first value).
        intent = dict(intent, **{changed: new[intent.get(changed) == new[0]]})
        known = self.w.store.get("default", op_id) is not None and self.w.lossy.armed is None
        try:
            row = self.w.gate.submit(action, op_id, intent)
        except IdempotencyConflict as exc:
            return f"{op_id} -> error {exc.code}"
        except SimulatedCrash as crash:  # pragma: no cover - nothing is armed on this path
            self.w.crash()
            return f"crashed at {crash.point}"
        except EffectgateError as exc:
            out = f"error {exc.code}"
        else:
            out = _outcome(row)
            if not known:  # the id was never journalled (its first submit failed): it is now
                self.ops = [(i, a, intent if i == op_id else p) for i, a, p in self.ops]
        if known:
            self.step_violations.append(
                Violation(2, f"{op_id}: a changed payload under a used id answered {out}")
            )
        return f"{op_id} -> {out}"

    def _approve_stale(self) -> str:
        """An approval naming another payload than the row carries must be refused."""
        pending = self._rows(State.AWAITING_APPROVAL)
        if not pending:
            return "nothing pending"
        row = pending[self.rng.randrange(len(pending))]
        try:
            out = self.w.operator.approve(row.operation_id, fingerprint="0" * 64, approver=OPERATOR)
        except ApprovalFingerprintMismatch as exc:
            return f"{row.operation_id} -> error {exc.code}"
        self.step_violations.append(
            Violation(2, f"{row.op_key}: an approval of another payload was accepted")
        )
        return f"{row.operation_id} -> {out.operation.state.value}"

    def _tripped(self, report: ReconcileReport) -> None:
        """Invariant 7: a duplicate effect opens its class's breaker in the same pass."""
        for kind, key, _, _ in report.new_divergences:
            if kind != "duplicate-effect":
                continue
            row = self.w.store.get(*key.split(":", 1))
            if row is not None and not self.w.store.controls(row.action).breaker_open:
                self.step_violations.append(
                    Violation(7, f"duplicate effect under {key} left {row.action}'s breaker shut")
                )

    # --- the checks ---------------------------------------------------------------------

    def check(
        self, *, index: int, held: frozenset[str], before: int, swept: bool, final: bool
    ) -> list[Violation]:
        w = self.w
        found, self.step_violations = self.step_violations, []
        found += at_most_one_dispatch(w.adapter.requests)
        new = w.adapter.requests[before:]
        found += no_dispatch_while_held(new, held)
        found += checks.journalled_before_dispatch(new, w.adapter.states[before:])
        found += checks.dispatched_as_authorised(
            new, w.approved, limit=LIMIT, approve_above=APPROVE_ABOVE
        )
        # Invariants 1, 10 on every row and 4 on the rows that changed: _sim/watch.py.
        found += self.watch.check(w.store, w.registry)
        if swept:
            # Only right after a pass, on the read view it saw (the clock has not moved).
            seen = [(r.operation_key, r.venue_id) for r in w.venue.visible_records()]
            # The rows as the watch read them just now (nothing ran since): no read per key.
            rows = self.watch.entries
            found += duplicates_reported(w.store, [k for k, _ in seen], ledger_keys=rows.keys())
            found += checks.venue_records_accounted(w.store, seen, rows)
        if final:
            found += no_write_off_inside_horizon(w.store, w.registry)  # every row, once more
            found += uncertain_rows_settled(w.store, w.registry, w.clock())
            found += checks.approvals_expire(w.store, w.clock(), APPROVAL_TTL)
        if final or index % AUDIT_EVERY == 0:
            # The chain: new entries, linked to the last checked (_sim/watch.py); all at the end.
            found += audit_chain_verifies(w.store) if final else self.watch.audit(w.store)
            found += checks.failed_only_with_proof(w.store, w.venue, w.injected_at, ACTIONS)
            found += checks.acknowledged_at_the_venue(w.store, w.venue, ACTIONS)
        for actor in w.actors:
            found += actor.check(w, final=final)
        return found

    def _held(self) -> frozenset[str]:
        # One read of every class's controls (a class with no row has the defaults: not held).
        return frozenset(
            c.action
            for c in self.w.store.list_controls()
            if c.action in ACTIONS and (c.killed or c.breaker_open or c.shadow)
        )

    def run(self) -> SeedResult:
        res = self.result
        for index in range(1, res.steps + 1):
            kind = self.rng.choices(self.kinds, self.weights)[0]
            held = frozenset() if kind in _LIFTS else self._held()
            before = len(self.w.adapter.requests)
            try:
                line = self.step(kind)
            except EffectgateError as exc:
                # A reconcile pass (or an operator control) must never abort.
                line = f"aborted: {type(exc).__name__} {exc.code}"
                res.violations.append(Violation(11, f"step {index} {kind} {line}"))
            res.history.append(f"{index:04d} {kind}: {line}")
            tally.count_step(res.drove, res.faults, kind, self.by_kind.get(kind))
            res.violations += self.check(
                index=index,
                held=held,
                before=before,
                swept=kind == "reconcile" and self.swept,
                final=False,
            )
            if res.violations:
                res.failed_at = index
                break
        else:
            self._final()
        tally.count_final(res.drove, res.faults, self.w.actors)
        return res

    def _final(self) -> None:
        """Faults stop; the clock passes every horizon; one more pass must settle everything."""
        res, w = self.result, self.w
        index = res.steps + 1
        w.lossy.armed = None
        w.venue.fail_next(0, after_apply=False)
        w.clock.advance(FINAL_JUMP)
        before = len(w.adapter.requests)
        try:
            expired = len(w.operator.expire_approvals())
            report = w.reconcile()
            self._tripped(report)
            line = f"{_report(report)} expired={expired}"
        except EffectgateError as exc:
            line = f"aborted: {type(exc).__name__} {exc.code}"
            res.violations.append(Violation(11, f"final reconcile {line}"))
        res.history.append(f"final +{FINAL_JUMP:g}s reconcile: {line}")
        res.violations += self.check(
            index=index, held=self._held(), before=before, swept=True, final=True
        )
        if res.violations:
            res.failed_at = index
        counts = w.store.count_by_state()
        res.history.append(
            "ledger "
            + " ".join(f"{a}/{s}={n}" for (a, s), n in sorted(counts.items()))
            + f"; venue effects={w.venue.effect_count} dispatches={len(w.adapter.requests)}"
        )


def _brief(intent: dict[str, object]) -> str:
    keys = ("instrument", "side", "quantity", "limit_price", "order_ref")
    return "/".join(str(intent[k]) for k in keys if k in intent)


def _outcome(row: Operation) -> str:
    out = row.state.value + (" (replayed)" if row.replayed else "")
    if row.venue_id:
        out += f" {row.venue_id}"
    if row.state is State.VALIDATED and row.detail:
        out += f" [{row.detail.split(' (')[0]}]"  # why it is held, without the long tail
    return out


def _report(r: ReconcileReport) -> str:
    new = " ".join(f"{kind}:{key}" for kind, key, _, _ in r.new_divergences)
    return (
        f"swept={r.swept} confirmed={r.confirmed} written_off={r.written_off} "
        f"quarantined={r.quarantined} uncertain={r.still_uncertain} new=[{new}]"
    )


def run_seed(
    seed: int,
    steps: int = DEFAULT_STEPS,
    actors: Sequence[Actor] | None = None,
    store: str | None = None,
) -> SeedResult:
    """Run one seed for ``steps`` steps and the final phase, with ``actors`` (default:
    :func:`effectgate._sim.actors.default_actors`, fresh for the seed), on a temporary SQLite
    ledger or, with ``store`` a ``postgresql://`` URL, a fresh schema there
    (:func:`effectgate._sim.stores.sim_ledger`)."""
    if actors is None:
        from effectgate._sim.actors import default_actors

        actors = default_actors()
    if steps < 0:
        raise ValueError("steps must be non-negative")
    # The reconciler and gate log every alarm at ERROR; here alarms are the workload.
    logger = logging.getLogger("effectgate")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        ledger = sim_ledger(store, seed)
        try:
            world = _World(ledger, actors)
            result = _Run(seed, steps, world).run()
            result.faults.update({f"ledger_{k}": n for k, n in ledger.faults.fired.items()})
            return result
        finally:
            disarm()
            ledger.close()
    finally:
        logger.setLevel(level)
