"""The run actor's harness model and its everyday steps (journal, effects, replays, seals);
the snapshot, restore and hostile steps and the checks are :mod:`effectgate._sim.actors.runs`.

What the harness knows of a run is its own record (:class:`RunModel`), never the store's: the
checks compare the store's answers against it."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from effectgate._core.budgets import Resources, RunBudget
from effectgate._core.intent import ActionClass, IntentBase, Registry
from effectgate._core.plan_values import PlanPolicy, ReservationKind, ReservationRequest
from effectgate._core.policy import LimitPolicy
from effectgate._core.runs import RunCall, RunCallKind, RunCompletion, RunSeal, sha256_hex
from effectgate._evidence.invariants import Violation
from effectgate._execute.crashpoints import CRASH_POINTS
from effectgate._execute.runs import RunJournal
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec
from effectgate._sim.actors._kit import order_class
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import BudgetExceeded, EffectgateError, RunSealed
from effectgate.examples import InstrumentId
from effectgate.testing import crash_at

__all__ = ["RUN_ACTION", "SCOPE", "RunModel", "RunSteps", "digest_of", "fields_of", "tools_of"]


SCOPE, RUN_ACTION, ADAPTER = "runs", "run_order", "paper-runs"
HARNESS, SEALER, PLAN, PLAN_DIGEST = "sim-harness", "sim-sealer", "runs-plan", "e" * 64
#: Room for about a dozen leaves, so admissions meet the limits within a seed.
PLAN_LIMITS = Resources(steps=40, tokens=6000, tool_calls=24, fan_out=12, replans=1)


class RunOrder(IntentBase):
    """An order a run's tool proposes."""

    action: Literal["run_order"]
    instrument: InstrumentId
    quantity: int


def run_class() -> ActionClass:
    return order_class(RUN_ACTION, RunOrder, ADAPTER)


def digest_of(text: str) -> str:
    return sha256_hex(text.encode())


@dataclass
class RunModel:
    """What the harness itself knows of one run: its own record, never the store's."""

    run_id: str
    budget: RunBudget | None = None
    leaf: ReservationRequest | None = None
    calls: dict[str, RunCall] = field(default_factory=dict)  # slot -> the call as recorded
    done: dict[str, RunCompletion] = field(default_factory=dict)
    effects: dict[str, str] = field(default_factory=dict)  # admitted op id -> its slot
    pending: dict[str, str] = field(default_factory=dict)  # op id a crash left unknown -> slot
    seal: RunSeal | None = None
    settled: bool = False
    steps: int = 0
    tokens: int = 0
    estimated: bool = False
    #: digest -> (the document, what the harness had recorded when it was taken)
    snapshots: dict[str, tuple[bytes, dict[str, object]]] = field(default_factory=dict)
    sealed_calls: int = 0  # the journal's size when the seal committed

    def tool_calls(self) -> int:
        return len(self.effects)


class RunSteps:
    """A trusted harness's run steps through the real store and gate (the base of ``Runs``)."""

    def __init__(self) -> None:
        self.venue: PaperVenue | None = None
        self.adapter: checks.Witness | None = None
        self.store: Any = None
        self.runs: dict[str, RunModel] = {}
        self.serial = 0
        self.ops = 0
        self.leaves = 0
        self.plan_open = False
        self.intents: dict[str, dict[str, object]] = {}  # op id -> the intent proposed
        self.new_answers: Counter[tuple[str, str]] = Counter()  # (run, slot) answered new
        self.step_violations: list[Violation] = []
        self.touched: set[str] = set()
        self.checked = 0
        self.counts: Counter[str] = Counter()

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store
        if self.adapter is None:  # the venue is outside the process: it outlives every crash
            self.venue = PaperVenue(clock=spec.clock, instruments=frozenset({"ABC", "XYZ-PERP"}))
            self.adapter = checks.Witness(PaperAdapter(self.venue), lambda: self.store)
        if RUN_ACTION not in spec.registry.names():
            classes = [spec.registry.get(n) for n in spec.registry.names()]
            spec.registry = Registry([*classes, run_class()])
        spec.policies[RUN_ACTION] = LimitPolicy()
        spec.adapters[ADAPTER] = self.adapter

    # --- choosing -------------------------------------------------------------------------

    def _pick(self, rng: random.Random, *, sealed: bool | None = None) -> RunModel | None:
        pool = [
            r
            for _, r in sorted(self.runs.items())
            if sealed is None or (r.seal is not None) == sealed
        ]
        return pool[rng.randrange(len(pool))] if pool else None

    def _open_run(self, world: Any, rng: random.Random) -> RunModel:
        self.serial += 1
        run = RunModel(f"run-{self.serial:03d}")
        self.runs[run.run_id] = run
        store, now = world.store, world.clock()
        how = rng.random()
        if how < 0.3:
            run.budget = RunBudget(max_steps=rng.randint(1, 4), max_tokens=rng.randint(200, 900),
                                   max_tool_calls=rng.randint(1, 2))  # fmt: skip
            store.set_run_budget(SCOPE, run.run_id, run.budget, now=now, actor=HARNESS)
        elif how < 0.75:
            self._under_leaf(world, run, rng)
        return run

    def _under_leaf(self, world: Any, run: RunModel, rng: random.Random) -> None:
        store, now = world.store, world.clock()
        if not self.plan_open:
            policy = PlanPolicy(PLAN, PLAN_DIGEST, PLAN_LIMITS, deadline=now + 1e9, token_only=True)
            store.open_plan_account(SCOPE, policy, now=now, actor=HARNESS)
            self.plan_open = True
        self.leaves += 1
        rid = f"leaf-{self.leaves:03d}"
        allocation = Resources(steps=rng.randint(1, 4), tokens=rng.randint(200, 900),
                               tool_calls=rng.randint(1, 2), fan_out=1)  # fmt: skip
        request = ReservationRequest(
            rid, PLAN, PLAN_DIGEST, f"task-{rid}", run.run_id, ReservationKind.LEAF, allocation,
            deadline=now + 1e8,
        )  # fmt: skip
        try:
            store.reserve(SCOPE, request, now=now, actor=HARNESS)
        except BudgetExceeded:
            return  # the plan is spent: the run goes without a budget
        store.admit_run(SCOPE, run.run_id, PLAN, rid, now=now, actor=HARNESS)
        run.leaf = request
        run.budget = RunBudget(allocation.steps, allocation.tokens, allocation.tool_calls,
                               deadline=request.deadline)  # fmt: skip

    # --- steps ----------------------------------------------------------------------------

    def _journal(self, world: Any) -> RunJournal:
        return RunJournal(world.store, actor=HARNESS, scope=SCOPE, clock=world.clock)

    def _resolve(self, world: Any) -> None:
        """Orders a crash left unknown: the ledger alone says whether each was admitted."""
        for run in self.runs.values():
            for op_id, slot in sorted(run.pending.items()):
                if world.store.run_binding(SCOPE, op_id) is not None:
                    run.effects[op_id] = slot
                del run.pending[op_id]

    def _call(
        self,
        world: Any,
        rng: random.Random,
        *,
        tool: bool | None = None,
        run: RunModel | None = None,
    ) -> str:
        open_runs = [r for _, r in sorted(self.runs.items()) if r.seal is None]
        if run is not None:
            pass
        elif not open_runs or rng.random() < 0.3:
            run = self._open_run(world, rng)
        else:
            run = open_runs[rng.randrange(len(open_runs))]
        self.touched.add(run.run_id)
        slot = f"s{len(run.calls) + 1:02d}"
        tool = rng.random() < 0.5 if tool is None else tool
        if not tool and run.budget is not None:  # a model step is charged before the call
            left = (
                not run.settled
                and run.steps < run.budget.max_steps
                and run.tokens < run.budget.max_tokens
            )
            try:
                world.store.begin_run_step(SCOPE, run.run_id, now=world.clock())
            except BudgetExceeded as exc:
                if left:
                    self._bad(12, f"{run.run_id}: a step refused ({exc.code}) with budget left")
                return f"{run.run_id} step -> refused {exc.dimension}"
            if not left:
                self._bad(12, f"{run.run_id}: a step charged past its budget")
            run.steps += 1
        call = RunCall(
            run.run_id, slot, f"c-{run.run_id}-{slot}",
            RunCallKind.TOOL if tool else RunCallKind.MODEL,
            digest_of(f"{run.run_id}/{slot}/request"), rng.randint(10, 4000),
            provider=None if tool else "sim-llm", model=None if tool else "sim-large",
            tool="place_order" if tool else None, agent="sim-agent",
        )  # fmt: skip
        self._record(world, run, call)
        if rng.random() < 0.3:  # the harness lost track and records it again: a replay
            self._record(world, run, call)
        if tool:
            return f"{run.run_id}/{slot} tool recorded"
        reported = rng.randint(20, 400) if rng.random() < 0.9 else None
        completion = RunCompletion(digest_of(f"{run.run_id}/{slot}/result"), rng.randint(1, 9000),
                                   reported_tokens=reported)  # fmt: skip
        self._journal(world).complete(call.ref, completion)
        run.done[slot] = completion
        if run.budget is not None:
            world.store.record_run_tokens(SCOPE, run.run_id, reported, now=world.clock())
            if reported is None:
                run.tokens, run.estimated = max(run.tokens, run.budget.max_tokens), True
            else:
                run.tokens += reported
        return f"{run.run_id}/{slot} model recorded, returned tokens={reported}"

    def _record(self, world: Any, run: RunModel, call: RunCall) -> None:
        record, new = self._journal(world).record(call)
        if new:
            self.new_answers[(run.run_id, call.slot)] += 1
            if self.new_answers[(run.run_id, call.slot)] > 1:
                self._bad(1, f"{run.run_id}/{call.slot}: answered new twice (made twice)")
        run.calls[call.slot] = call
        if record.call != call:
            self._bad(13, f"{run.run_id}/{call.slot}: the journal answered another call")

    def _intent(self, rng: random.Random) -> dict[str, object]:
        return {
            "intent_version": "1",
            "action": RUN_ACTION,
            "instrument": rng.choice(("ABC", "XYZ-PERP")),
            "quantity": rng.randint(1, 99),
        }

    def _submit(self, world: Any, run: RunModel, slot: str, op_id: str, intent: Any) -> Any:
        ref = run.calls[slot].ref
        return world.gate.submit(RUN_ACTION, op_id, intent, scope=SCOPE, run_call=ref)

    def _effect(self, world: Any, rng: random.Random, *, run: RunModel | None = None) -> str:
        open_tools = [
            (r, s) for _, r in sorted(self.runs.items()) for s, c in sorted(r.calls.items())
            if c.kind is RunCallKind.TOOL and s not in r.done and r.seal is None
            and (run is None or r is run)
        ]  # fmt: skip
        if not open_tools:  # the agent's tool starts first: its call is journalled
            return (
                f"{self._call(world, rng, tool=True, run=run)}; {self._effect(world, rng, run=run)}"
            )
        run, slot = open_tools[rng.randrange(len(open_tools))]
        self.touched.add(run.run_id)
        # One order, or a few in the same call (the agent's tool may place several): each
        # takes a tool slot, so a run meets its budget within a seed.
        lines = []
        for n in range(rng.randint(1, 3)):
            self.ops += 1
            op_id = f"ro-{self.ops:04d}"
            budget = run.budget
            fits = not run.settled and not (
                budget and budget.max_tool_calls and run.tool_calls() >= budget.max_tool_calls
            )
            intent = self.intents[op_id] = self._intent(rng)
            run.pending[op_id] = slot  # until the answer: a crash leaves it to the ledger
            if n == 0 and rng.random() < 0.125:
                point = rng.choice(CRASH_POINTS)
                with crash_at(point, mode="raise"):
                    self.counts["fault:run_crash"] += 1
                    lines.append(self._admit(world, run, slot, op_id, intent, fits))
            else:
                lines.append(self._admit(world, run, slot, op_id, intent, fits))
        line = ", ".join(lines)
        if rng.random() < 0.4:  # the tool returns: its call admits nothing more
            completion = RunCompletion(digest_of(f"{run.run_id}/{slot}/result"), 64)
            self._journal(world).complete(run.calls[slot].ref, completion)
            run.done[slot] = completion
            line += "; tool returned"
        return line

    def _admit(
        self, world: Any, run: RunModel, slot: str, op_id: str, intent: Any, fits: bool
    ) -> str:
        try:
            row = self._submit(world, run, slot, op_id, intent)
        except BudgetExceeded as exc:
            del run.pending[op_id]
            if fits:
                self._bad(12, f"{run.run_id}: {op_id} refused ({exc.dimension}) with slots left")
            return f"{run.run_id}/{slot} {op_id} -> refused {exc.dimension}"
        except EffectgateError as exc:
            del run.pending[op_id]
            return f"{run.run_id}/{slot} {op_id} -> error {exc.code}"
        del run.pending[op_id]
        run.effects[op_id] = slot
        if not fits:
            self._bad(12, f"{run.run_id}: {op_id} admitted past its tool budget or settlement")
        return f"{run.run_id}/{slot} {op_id} -> {row.state.value}"

    def _replay(self, world: Any, rng: random.Random) -> str:
        what = rng.random()
        bound = [r for _, r in sorted(self.runs.items()) if r.effects]
        if what < 0.4 and bound:  # a recovering harness proposes a bound order again
            owner = bound[rng.randrange(len(bound))]
            self.touched.add(owner.run_id)
            return self._replay_effect(world, owner, rng)
        # Mostly open runs (a replay answered from the journal), else sealed ones (refused).
        run = self._pick(rng, sealed=False) if rng.random() < 0.7 else None
        run = run or self._pick(rng)
        if run is None or not run.calls:
            return "nothing to replay"
        self.touched.add(run.run_id)
        slot = sorted(run.calls)[rng.randrange(len(run.calls))]
        if what < 0.7 and slot in run.done:
            _, new = self._journal(world).complete(run.calls[slot].ref, run.done[slot])
            if new:
                self._bad(1, f"{run.run_id}/{slot}: a return recorded twice")
            return f"{run.run_id}/{slot} return again -> new={new}"
        try:
            self._record(world, run, run.calls[slot])
        except RunSealed:
            if run.seal is None:
                self._bad(13, f"{run.run_id}: an open run refused a replay as sealed")
            return f"{run.run_id}/{slot} recorded again after the seal -> run_sealed"
        if run.seal is not None:
            self._bad(13, f"{run.run_id}/{slot}: a replay recorded into a sealed run")
        return f"{run.run_id}/{slot} recorded again -> from the journal"

    def _replay_effect(self, world: Any, run: RunModel, rng: random.Random) -> str:
        """An admitted order proposed again: the stored row, nothing sent (invariant 1); after
        the seal, refused with the stored row (invariant 13)."""
        op_id = sorted(run.effects)[rng.randrange(len(run.effects))]
        before = len(self.adapter.requests) if self.adapter else 0
        try:
            row = self._submit(world, run, run.effects[op_id], op_id, self.intents[op_id])
        except RunSealed as exc:
            if run.seal is None:
                self._bad(13, f"{run.run_id}: an open run answered run_sealed")
            if exc.row is None:
                self._bad(13, f"{op_id}: a sealed replay carries no stored row")
            return f"{run.run_id} {op_id} replayed after the seal -> run_sealed"
        if run.seal is not None:
            self._bad(13, f"{run.run_id}: {op_id} replayed into a sealed run ({row.state})")
        if not row.replayed or (self.adapter and len(self.adapter.requests) != before):
            self._bad(1, f"{op_id}: a replay was not answered from the ledger")
        return f"{run.run_id} {op_id} replayed -> {row.state.value} (replayed)"

    def _seal(self, world: Any, rng: random.Random) -> str:
        busy = [r for _, r in sorted(self.runs.items()) if r.seal is None and r.calls]
        if rng.random() < 0.1:  # a delayed worker's run, sealed before it starts
            self.serial += 1
            run = self.runs.setdefault(f"run-{self.serial:03d}", RunModel(f"run-{self.serial:03d}"))
        elif busy:
            run = busy[rng.randrange(len(busy))]
        else:  # a run does some work before the harness seals it
            line = self._effect(world, rng)
            busy = [r for _, r in sorted(self.runs.items()) if r.seal is None and r.calls]
            return f"{line}; {self._do_seal(world, busy[rng.randrange(len(busy))])}"
        return self._do_seal(world, run)

    def _do_seal(self, world: Any, run: RunModel) -> str:
        self.touched.add(run.run_id)
        store, now = world.store, world.clock()
        seal, new = store.seal_run(SCOPE, run.run_id, actor=SEALER, reason="sim done", now=now)
        again, twice = store.seal_run(SCOPE, run.run_id, actor="sim-late", reason="late", now=now)
        if not new or twice or again != seal:
            self._bad(13, f"{run.run_id}: the seal was not permanent (new={new}, again={twice})")
        run.seal, run.sealed_calls = seal, len(run.calls)
        line = f"{run.run_id} sealed with {len(run.calls)} call(s), {run.tool_calls()} effect(s)"
        line += f"; {self._late_call(world, run)}"  # a delayed worker wakes up at once
        if run.leaf is not None and not run.settled:
            store.settle_run(SCOPE, run.run_id, now=now, actor=HARNESS)
            run.settled = True
            line += f"; leaf {run.leaf.reservation_id} settled"
        return line

    def _late_call(self, world: Any, run: RunModel) -> str:
        """A late worker records a new call in the sealed run: refused (invariant 13)."""
        slot = f"s{len(run.calls) + 1:02d}"
        late = RunCall(
            run.run_id, slot, f"c-late-{slot}", RunCallKind.TOOL,
            digest_of(f"{run.run_id}/{slot}/late"), 5, tool="place_order",
        )  # fmt: skip
        try:
            self._journal(world).record(late)
        except RunSealed:
            return f"{run.run_id}/{slot} call after the seal -> run_sealed"
        run.calls[slot] = late
        self._bad(13, f"{run.run_id}/{slot}: a call recorded after the seal")
        return f"{run.run_id}/{slot} call after the seal -> recorded"

    def _bad(self, invariant: int, message: str) -> None:
        self.step_violations.append(Violation(invariant, message))


def tools_of(run: RunModel) -> list[str]:
    return sorted(s for s, c in run.calls.items() if c.kind is RunCallKind.TOOL)


def fields_of(call: RunCall) -> dict[str, Any]:
    names = ("run_id", "slot", "call_id", "kind", "request_digest", "request_bytes", "provider",
             "model", "tool", "deadline", "agent", "parent_run_id")  # fmt: skip
    return {n: getattr(call, n) for n in names}
