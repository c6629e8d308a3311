"""Runs: a harness journalling run calls, binding effects to tool calls, sealing runs, taking
and restoring recovery snapshots, and spending run budgets (seed 004), through the real store.

The actor plays a trusted harness in its own scope (``runs``) with a class, ``run_order``, on
its own paper venue. A run gets no budget, a budget of its own, or one from a leaf reservation
of the scope's plan account (``admit_run``). Steps:

- ``run-call``: a model call (a step charged first, then the call journalled, its return and
  reported tokens recorded; sometimes no usage reported) or a tool call left open;
- ``run-effect``: an order proposed inside an open tool call (``Gate.submit(run_call=...)``):
  admitted exactly when the call is unfinished, the run unsealed and unsettled and a tool slot
  left; one in eight with a crash armed (the process restarts from the ledger alone); then,
  sometimes, the tool call's return;
- ``run-replay``: a recorded call recorded again, a bound order proposed again, a return
  recorded again: each answered from the journal (never "new", never sent twice);
- ``run-seal``: a seal, then the same seal asked again; a run under a leaf is then settled;
- ``run-snapshot``: a recovery snapshot of a sealed run (of an open one: refused);
- ``run-restore``: the process restarts, and from the ledger alone the harness reads every
  kept snapshot back, verifies it and rebuilds the run's journal, which must be the one the
  snapshot digests;
- ``run-hostile``: a call or an effect after the seal, a changed call in a used slot, a
  tampered snapshot (its seal's reason, its last call's digest or its last effect's state
  changed, its digest kept), a leaf settled a second time, or a leaf settled while its run is
  open and then an effect of that run (refused: a settled run spends nothing more).

An admission's crash (``after_journal``, ``after_venue_call``, ``after_receipt``) leaves the
order unknown to the harness; the next step reads the ledger alone (``run_binding``) to learn
whether it was admitted, as a recovering harness would.

Checked after each of its steps, on the runs it touched (every run at the end):

- 1: at most one request per key reached the venue, and no slot was answered "new" twice (a
  replayed call is answered from the journal, not made again);
- 3: every request found its row ``submitted``;
- 12: a run's stored usage is the actor's own count (steps, tokens; tool calls: one per
  admitted order) and never past its limits; the plan account shows exactly its leaves' holds
  (an open leaf its allocation, a settled one what its run used) within its limits, and at
  the end every leaf of a sealed run is settled (none left charged but unreleased);
- 13: a sealed run admits nothing (calls, effects, replays included), keeps its first seal,
  and its journal no longer grows; a snapshot holds exactly the sealed journal the harness
  recorded (every call, its return, every bound effect) and is kept byte for byte across a
  restart, where the journal read back from the ledger alone is the harness's own. (No
  invariant names snapshots yet: the content is counted under 13, the sealed run's record.)
- 8: a snapshot verifies, and one whose content no longer matches its digest is refused
  (tamper evidence, as for the audit chain: the closest numbered invariant).

The restore step is a real restart: the world's processes are abandoned and rebuilt from the
ledger file (``world.crash()``), as after a crash point.
"""

from __future__ import annotations

import json
import random
from typing import Any

from effectgate._core import run_snapshot
from effectgate._core.runs import RunCall
from effectgate._evidence.invariants import Violation, at_most_one_dispatch
from effectgate._sim import checks
from effectgate._sim.actor import Steps
from effectgate._sim.actors.run_steps import (
    HARNESS,
    PLAN,
    PLAN_LIMITS,
    RUN_ACTION,
    SCOPE,
    SEALER,
    RunModel,
    RunSteps,
    digest_of,
    fields_of,
    tools_of,
)
from effectgate.errors import (
    RunCallConflict,
    RunCallNotOpen,
    RunNotSealed,
    RunSealed,
    RunSnapshotInvalid,
)

__all__ = ["RUN_ACTION", "SCOPE", "Runs"]

#: What a tampered snapshot has changed: its seal's reason, its last call, its last effect.
EDITS = ("reason", "call", "effect")


class Runs(RunSteps):
    """The run steps and the checks of invariants 1, 3, 8, 12 and 13 on runs."""

    name = "runs"

    def steps(self) -> Steps:
        return (
            ("run-call", 2), ("run-effect", 2), ("run-replay", 1), ("run-seal", 1),
            ("run-snapshot", 1), ("run-restore", 1), ("run-hostile", 1),
        )  # fmt: skip

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        # One draw of the world's stream per step, whatever the step does inside: how this
        # actor branches never shifts what the other actors draw after it.
        rng = random.Random(rng.getrandbits(64))  # noqa: S311 - a reproducible schedule
        self._resolve(world)
        if kind == "run-call":
            return self._call(world, rng)
        if kind == "run-effect":
            return self._effect(world, rng)
        if kind == "run-replay":
            return self._replay(world, rng)
        if kind == "run-seal":
            return self._seal(world, rng)
        if kind == "run-snapshot":
            return self._snapshot(world, rng)
        if kind == "run-restore":
            return self._restore(world, rng)
        return self._hostile(world, rng)

    def _snapshot(self, world: Any, rng: random.Random) -> str:
        run = self._pick(rng, sealed=rng.random() < 0.85)
        if run is None:  # nothing sealed yet: the harness seals a run first
            return f"{self._seal(world, rng)}; {self._snapshot(world, rng)}"
        self.touched.add(run.run_id)
        try:
            document, digest, stored = world.store.snapshot_run(
                SCOPE, run.run_id, now=world.clock(), actor=SEALER
            )
        except RunNotSealed:
            if run.seal is not None:
                self._bad(13, f"{run.run_id}: a sealed run's snapshot refused as unsealed")
            return f"{run.run_id} (open) snapshot -> run_not_sealed"
        if run.seal is None:
            self._bad(13, f"{run.run_id}: an open run was snapshotted")
        self._judge(run, document, digest, "taken")
        run.snapshots.setdefault(digest, (document, self._expected(run)))
        # The harness's copy, edited on its way to the archive, must not verify.
        edited = self._forged(run, digest, EDITS[len(run.snapshots) % len(EDITS)])
        return f"{run.run_id} snapshot {digest[:12]} stored={stored}; {edited}"

    def _expected(self, run: RunModel) -> dict[str, object]:
        """The journal as the harness recorded it: what a snapshot must hold."""
        return {
            "calls": [(s, run.calls[s].digest(), s in run.done) for s in sorted(run.calls)],
            "effects": sorted(run.effects),
        }

    def _judge(self, run: RunModel, document: bytes, digest: str, how: str) -> None:
        try:
            summary = run_snapshot.verify(document)
        except RunSnapshotInvalid as exc:
            self._bad(8, f"{run.run_id}: a {how} snapshot does not verify ({exc})")
            return
        doc = json.loads(document)
        got = {
            "calls": [
                (c["call"]["slot"], c["record_digest"], c["completion"] is not None)
                for c in doc["calls"]
            ],
            "effects": [e["operation_id"] for e in doc["effects"]],
        }
        want = run.snapshots[digest][1] if digest in run.snapshots else self._expected(run)
        if summary["digest"] != digest or got != want:
            self._bad(13, f"{run.run_id}: a {how} snapshot is not the journal it digests")
        seal = doc["seal"]
        if run.seal is None or (seal["actor"], seal["reason"]) != (run.seal.actor, run.seal.reason):
            self._bad(13, f"{run.run_id}: a {how} snapshot names another seal")

    def _restore(self, world: Any, rng: random.Random) -> str:
        if not any(r.snapshots for r in self.runs.values()):  # something to restore first
            return f"{self._snapshot(world, rng)}; {self._restore(world, rng)}"
        world.crash()  # the harness's process dies; everything below reads the ledger alone
        self._resolve(world)
        journal = self._journal(world)
        kept = 0
        for run_id, run in sorted(self.runs.items()):
            restored = list(journal.calls(run_id, page=7))
            if [(r.call, r.completion) for r in restored] != [
                (run.calls[s], run.done.get(s)) for s in sorted(run.calls)
            ]:
                self._bad(13, f"{run_id}: the journal read back after a restart is not its own")
            for digest, (document, _) in sorted(run.snapshots.items()):
                back = world.store.get_run_snapshot(SCOPE, run_id, digest)
                if back != document:
                    self._bad(13, f"{run_id}: snapshot {digest[:12]} not kept byte for byte")
                    continue
                self._judge(run, back, digest, "restored")
                kept += 1
        return f"restarted; {len(self.runs)} run(s) read back, {kept} snapshot(s) restored"

    def _hostile(self, world: Any, rng: random.Random) -> str:
        what = rng.randrange(6)
        sealed = self._pick(rng, sealed=True)
        if what >= 4:
            return self._hostile_budget(world, rng, settle_early=what == 5)
        if sealed is None or what == 0:  # a changed call in a used slot
            run = self._pick(rng)
            if run is None or not run.calls:
                return f"{self._call(world, rng)}; {self._hostile(world, rng)}"
            self.touched.add(run.run_id)
            slot = sorted(run.calls)[rng.randrange(len(run.calls))]
            old = run.calls[slot]
            changed = RunCall(
                **{**fields_of(old), "request_digest": digest_of(f"{old.slot}/other")}
            )
            try:
                self._journal(world).record(changed)
            except (RunCallConflict, RunSealed) as exc:
                return f"{run.run_id}/{slot} changed call -> {exc.code}"
            self._bad(13, f"{run.run_id}/{slot}: a changed call was recorded in a used slot")
            return f"{run.run_id}/{slot} changed call -> recorded"
        self.touched.add(sealed.run_id)
        if what == 1:  # a late worker records a new call in the sealed run
            return self._late_call(world, sealed)
        if what == 2:  # a late worker's effect against a tool call of a sealed run
            line = ""
            pool = [r for _, r in sorted(self.runs.items()) if r.seal is not None and tools_of(r)]
            if not pool:  # seal a run that has a tool call first (record one if none has)
                pool = [r for _, r in sorted(self.runs.items()) if tools_of(r)]
                if not pool:
                    line = self._call(world, rng, tool=True) + "; "
                    pool = [r for _, r in sorted(self.runs.items()) if tools_of(r)]
                sealed = pool[rng.randrange(len(pool))]
                line += self._do_seal(world, sealed) + "; "
            else:
                sealed = pool[rng.randrange(len(pool))]
            self.touched.add(sealed.run_id)
            if sealed.effects and rng.random() < 0.5:  # a bound order, replayed late
                return line + self._replay_effect(world, sealed, rng)
            tools = tools_of(sealed)
            self.ops += 1
            op_id = f"ro-{self.ops:04d}"
            slot = tools[rng.randrange(len(tools))]
            try:
                row = self._submit(world, sealed, slot, op_id, self._intent(rng))
            except (RunSealed, RunCallNotOpen) as exc:
                return f"{line}{sealed.run_id}/{slot} {op_id} after the seal -> {exc.code}"
            sealed.effects[op_id] = slot
            self._bad(13, f"{sealed.run_id}: {op_id} admitted after the seal ({row.state.value})")
            return f"{line}{sealed.run_id}/{slot} {op_id} after the seal -> {row.state.value}"
        # A snapshot edited after it was taken, its digest kept: a restore must refuse it.
        if not sealed.snapshots:
            document, digest, _ = world.store.snapshot_run(
                SCOPE, sealed.run_id, now=world.clock(), actor=SEALER
            )
            self._judge(sealed, document, digest, "taken")
            sealed.snapshots.setdefault(digest, (document, self._expected(sealed)))
        digest = sorted(sealed.snapshots)[rng.randrange(len(sealed.snapshots))]
        return self._forged(sealed, digest, rng.choice(EDITS))

    def _forged(self, run: RunModel, digest: str, edit: str) -> str:
        """A kept snapshot edited (its seal's reason, last call or last effect), its digest
        kept: verifying it must refuse it (invariant 8)."""
        doc = json.loads(run.snapshots[digest][0])
        if edit == "call" and doc["calls"]:
            doc["calls"][-1]["record_digest"] = digest_of("another call")
        elif edit == "effect" and doc["effects"]:
            # Another state than the one it has (an effect already failed must change too).
            last = doc["effects"][-1]
            last["state"] = "acknowledged" if last["state"] == "failed" else "failed"
        else:
            edit, doc["seal"]["reason"] = "reason", "rewritten"
        forged = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        try:
            run_snapshot.verify(forged)
        except RunSnapshotInvalid:
            return f"{run.run_id} snapshot with its {edit} edited -> refused"
        self._bad(8, f"{run.run_id}: a snapshot whose {edit} no longer matches verified")
        return f"{run.run_id} snapshot with its {edit} edited -> verified"

    def _hostile_budget(self, world: Any, rng: random.Random, *, settle_early: bool) -> str:
        """A leaf settled twice; or settled before its run ends, then an effect against it."""
        store, now = world.store, world.clock()
        pool = [
            r for _, r in sorted(self.runs.items())
            if r.leaf is not None
            and (r.seal is None and not r.settled if settle_early else r.settled)
        ]  # fmt: skip
        line = ""
        if not pool:  # a sub-agent's run under a leaf of its own first
            self.serial += 1
            run = self.runs[f"run-{self.serial:03d}"] = RunModel(f"run-{self.serial:03d}")
            self._under_leaf(world, run, rng)
            if run.leaf is None:
                return f"{run.run_id}: the plan has no room for a leaf"
            line = f"{run.run_id} under {run.leaf.reservation_id}; "
            if not settle_early:
                store.settle_run(SCOPE, run.run_id, now=now, actor=HARNESS)
                run.settled = True
                line += "settled; "
        else:
            run = pool[rng.randrange(len(pool))]
        self.touched.add(run.run_id)
        if not settle_early:
            _, new = store.settle_run(SCOPE, run.run_id, now=now, actor=HARNESS)
            if new:
                self._bad(12, f"{run.run_id}: its leaf settled a second time")
            return f"{line}{run.run_id} settled again -> new={new}"
        store.settle_run(SCOPE, run.run_id, now=now, actor=HARNESS)
        run.settled = True  # the sub-agent ended early: its run may spend nothing more
        return f"{line}{run.run_id} settled while open; {self._effect(world, rng, run=run)}"

    # --- checks ---------------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.adapter is None or not (self.touched or final):
            return found
        self._resolve(world)  # a crash in the step left its order to the ledger
        requests = self.adapter.requests
        found += at_most_one_dispatch(requests)
        found += checks.journalled_before_dispatch(
            requests[self.checked :], self.adapter.states[self.checked :]
        )
        self.checked = len(requests)
        names = sorted(self.runs) if final else sorted(self.touched)
        self.touched = set()
        store = world.store
        for run_id in names:
            found += self._check_run(store, self.runs[run_id], final=final)
        # The account changes only with a leaf's run: read it after a step that touched one.
        if self.plan_open and any(self.runs[n].leaf is not None for n in names):
            found += self._check_plan(store)
        return found

    def _check_run(self, store: Any, run: RunModel, *, final: bool) -> list[Violation]:
        found: list[Violation] = []
        summary = store.get_run(SCOPE, run.run_id)
        if run.seal is not None:
            if summary is None or summary.seal != run.seal:
                found.append(Violation(13, f"{run.run_id}: its seal is not the first one"))
            elif summary.calls != run.sealed_calls:
                found.append(Violation(13, f"{run.run_id}: its journal grew after the seal"))
            if final and run.leaf is not None and not run.settled:
                found.append(Violation(12, f"{run.run_id}: sealed, its leaf left unsettled"))
        if summary is not None and summary.effects != run.tool_calls():
            found.append(
                Violation(13, f"{run.run_id}: {summary.effects} effect(s) bound, the harness "
                              f"admitted {run.tool_calls()}")
            )  # fmt: skip
        if run.budget is None:
            return found
        state = store.run_budget(SCOPE, run.run_id)
        used = state.usage
        mine = (run.steps, run.tokens, run.tool_calls(), run.estimated)
        if (used.steps, used.tokens, used.tool_calls, used.estimated) != mine:
            found.append(Violation(12, f"{run.run_id}: usage {used} is not the harness's {mine}"))
        b = run.budget
        if (b.max_steps and used.steps > b.max_steps) or (
            b.max_tool_calls and used.tool_calls > b.max_tool_calls
        ):
            found.append(Violation(12, f"{run.run_id}: usage {used} past its budget {b}"))
        return found

    def _check_plan(self, store: Any) -> list[Violation]:
        """The account holds each open leaf's allocation and each settled one its run's use."""
        want = {"steps": 0, "tokens": 0, "tool_calls": 0, "fan_out": 0}
        for run in self.runs.values():
            if run.leaf is None:
                continue
            a = run.leaf.allocation.with_fan_out()
            if run.settled:
                tokens = max(a.tokens, run.tokens) if run.estimated else run.tokens
                hold = (run.steps, tokens, run.tool_calls(), a.fan_out)
            else:
                hold = (a.steps, a.tokens, a.tool_calls, a.fan_out)
            for d, n in zip(want, hold, strict=True):
                want[d] += n
        used = store.plan_account(SCOPE, PLAN).used
        found = []
        for d, n in want.items():
            if getattr(used, d) != n:
                found.append(Violation(12, f"{PLAN} {d}: shows {getattr(used, d)}, holds {n}"))
            # Reported tokens may overrun (kept, never clamped); the rest are enforced.
            if d != "tokens" and getattr(used, d) > getattr(PLAN_LIMITS, d):
                found.append(Violation(12, f"{PLAN} {d}: used past its limit"))
        return found
