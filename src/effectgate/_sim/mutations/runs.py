"""Mutations of run-call journals, seals, recovery snapshots and run budgets
(:mod:`effectgate._sim.actors.runs`). Each replaces one named production function or method
for a run; a function the store imports by name is patched where the store calls it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from effectgate._core.budgets import RunUsage
from effectgate._core.runs import canonical_json, sha256_hex
from effectgate._sim.actor import Mutation
from effectgate.errors import RunSealed

__all__ = ["RUNS"]

F = Callable[..., Any]


def _replay_answered_new(original: F) -> F:
    # An identical replay of a recorded call is answered "new": the harness, told it has no
    # record of making the call, makes it a second time.
    def record_run_call(self: Any, scope: str, call: Any, *, now: float, actor: str) -> Any:
        record, _ = original(self, scope, call, now=now, actor=actor)
        return record, True

    return record_run_call


def _seal_unread(original: F) -> F:
    # Recording a call never reads the run's seal: a late worker's call goes into a sealed
    # run as into an open one (the seal is put back afterwards, so it still reads as sealed).
    def record_run_call(self: Any, scope: str, call: Any, *, now: float, actor: str) -> Any:
        try:
            return original(self, scope, call, now=now, actor=actor)
        except RunSealed:
            pass
        key = (scope, call.run_id)
        seal = self._rows(
            "SELECT sealed_at, sealed_by, seal_reason FROM runs WHERE scope = ? AND run_id = ?",
            key,
            "read a seal",
        )[0]

        def put(values: tuple[Any, ...]) -> None:
            self._run(
                lambda tx, _: tx.write(
                    "UPDATE runs SET sealed_at = ?, sealed_by = ?, seal_reason = ? "
                    "WHERE scope = ? AND run_id = ?",
                    (*values, *key),
                ),
                "the seal",
            )

        put((None, None, None))
        try:
            return original(self, scope, call, now=now, actor=actor)
        finally:
            put(tuple(seal))

    return record_run_call


def _last_call_dropped(original: F) -> F:
    # The snapshot's digest does not cover the journal's last call: it is left out.
    def build(seal: Any, calls: Any, receipts: Any, effects: Any) -> Any:
        return original(seal, calls[:-1], receipts, effects)

    return build


def _digest_unchecked(original: F) -> F:
    # A snapshot is checked against a digest recomputed from its own content, so an edited
    # document restores as if it were the one taken.
    def verify(document: bytes) -> Any:
        try:
            doc = json.loads(document)
        except ValueError:
            return original(document)
        if isinstance(doc, dict) and "digest" in doc:
            doc["digest"] = sha256_hex(
                canonical_json({k: v for k, v in doc.items() if k != "digest"})
            )
            document = canonical_json(doc)
        return original(document)

    return verify


def _settled_on_allocation(original: F) -> F:
    # A run's leaf is settled from what the leaf allocated, not from what its run used: the
    # unused capacity is never refunded, an overrun never charged.
    def run_settlement(request: Any, usage: Any, **kw: Any) -> Any:
        a = request.allocation
        asked = RunUsage(steps=a.steps, tokens=a.tokens, tool_calls=a.tool_calls)
        return original(request, asked, **kw)

    return run_settlement


def _tool_slots_unchecked(original: F) -> F:
    # An admission charges a tool slot without checking that one is left.
    def check_tool(budget: Any, usage: Any, now: float) -> Any:
        short = original(budget, usage, now)
        return None if short == "tool_calls" else short

    return check_tool


_R = "effectgate.store._runs:RunRoles.record_run_call"

RUNS: tuple[Mutation, ...] = (
    Mutation("run_replay_answered_new", "1 run_journal_replayed", _R, _replay_answered_new),
    Mutation("sealed_run_records_call", "13 sealed_run_admits_nothing", _R, _seal_unread),
    Mutation(
        "snapshot_drops_last_call",
        "13,8 snapshot_is_the_journal",
        "effectgate._core.run_snapshot:build",
        _last_call_dropped,
    ),
    Mutation(
        "snapshot_digest_unchecked",
        "8 tampered_snapshot_refused",
        "effectgate._core.run_snapshot:verify",
        _digest_unchecked,
    ),
    Mutation(
        "run_leaf_settled_on_allocation",
        "12 run_budget_exact",
        "effectgate.store._run_plans:run_settlement",
        _settled_on_allocation,
    ),
    Mutation(
        "run_tool_slots_unchecked",
        "12 run_budget_exact",
        "effectgate.store._run_budgets:check_tool",
        _tool_slots_unchecked,
    ),
)
