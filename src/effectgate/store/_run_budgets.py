"""The run budgets role: one run's limits and cumulative usage, written once over the hooks.

A run budget lives on its own row, updated only after the run's ``runs`` row is locked (the row
every admission and the seal lock), so a tool slot charged at admission queues with every other
admission of that run. A run admitted under a plan's leaf reservation (store/_run_plans.py)
carries the leaf on this row; once the leaf has settled, the run admits nothing more.

Every change writes a chained audit entry in its transaction; a refusal rolls its transaction
back and writes one audit line (``budget_refused``) in its own, and no row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from effectgate._core.budgets import (
    RunBudget,
    RunBudgetState,
    RunUsage,
    charge_tokens,
    check_step,
    check_tool,
    output_limit,
)
from effectgate._core.runs import check_run_id, check_scope
from effectgate.errors import (
    BudgetError,
    BudgetExceeded,
    InvalidBudget,
    ReservationConflict,
    ReservationNotFound,
)
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker, dumps

__all__ = [
    "BUDGET_COLUMNS",
    "RunBudgetRoles",
    "admit_tool_slot",
    "budget_state",
    "run_hold",
    "write_usage",
]

T = TypeVar("T")

#: A run budget row as every reader selects it; the last column is the settlement of the leaf
#: the run was admitted under (NULL: none, or not settled).
BUDGET_COLUMNS = "limits, steps, tokens, reported_tokens, tool_calls, estimated, settled_at"


def budget_state(scope: str, run_id: str, r: Sequence[Any]) -> RunBudgetState:
    usage = RunUsage(int(r[1]), int(r[2]), int(r[3]), int(r[4]), bool(r[5]))
    return RunBudgetState(scope, run_id, RunBudget.from_dict(json.loads(r[0])), usage)


def _refuse_settled(run_id: str, r: Sequence[Any], what: str) -> None:
    if r[6] is not None:
        raise BudgetExceeded(
            f"run {run_id!r} has settled its reservation: no more {what}", dimension="settled"
        )


def run_hold(scope: str, run_id: str) -> Hold:
    return Hold(key=(scope, f"run/{run_id}"))


def ensure_locked_run(tx: SharedTx, scope: str, run_id: str, now: float) -> None:
    """Create the run's row if it is new, then lock it: budgets of one run are admitted one
    transaction at a time (a no-op UPDATE takes the row lock on PostgreSQL)."""
    tx.write(
        "INSERT INTO runs (scope, run_id, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING",
        (scope, run_id, now),
    )
    tx.one(
        "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ? RETURNING 1", (scope, run_id)
    )


def write_usage(tx: SharedTx, scope: str, run_id: str, u: RunUsage, now: float) -> None:
    tx.write(
        "UPDATE run_budgets SET steps = ?, tokens = ?, reported_tokens = ?, tool_calls = ?, "
        "estimated = ?, updated_at = ? WHERE scope = ? AND run_id = ?",
        (u.steps, u.tokens, u.reported_tokens, u.tool_calls, int(u.estimated), now, scope, run_id),
    )


def admit_tool_slot(
    tx: SharedTx, scope: str, run_id: str, operation_id: str, now: float
) -> RunBudgetState | None:
    """Consume one of the run's tool-call slots for ``operation_id``, in the caller's
    transaction (which holds the run's row). None: the run has no budget. Raises
    :class:`BudgetExceeded` naming the dimension; the caller rolls back and writes no row."""
    rows = tx.rows(
        f"SELECT {BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?", (scope, run_id)
    )
    if not rows:
        return None
    _refuse_settled(run_id, rows[0], "tool calls")
    state = budget_state(scope, run_id, rows[0])
    short = check_tool(state.budget, state.usage, now)
    if short is not None:
        raise BudgetExceeded(
            f"run {run_id!r} has no {short} left for operation {operation_id!r}", dimension=short
        )
    usage = RunUsage(
        state.usage.steps,
        state.usage.tokens,
        state.usage.reported_tokens,
        state.usage.tool_calls + 1,
        state.usage.estimated,
    )
    write_usage(tx, scope, run_id, usage, now)
    tx.audit(
        "budget_tool_slot",
        {"run_id": run_id, "operation_id": operation_id, "tool_calls": usage.tool_calls},
        now,
        scope,
        operation_id,
    )
    return RunBudgetState(scope, run_id, state.budget, usage)


class RunBudgetRoles(StoreHooks):
    """One run's budget: limits, steps, tokens (part of roles.Budgets)."""

    def _refusing_budget(
        self, work: Callable[[], T], *, now: float, scope: str, what: Mapping[str, object]
    ) -> T:
        try:
            return work()
        except BudgetError as exc:
            error = exc.to_dict()
            self._run(
                lambda tx, _: tx.audit("budget_refused", {**what, "error": error}, now, scope),
                "audit a budget refusal",
                Hold(key=(scope, None)),
            )
            raise

    # --- one run --------------------------------------------------------------------------

    def set_run_budget(
        self, scope: str, run_id: str, budget: RunBudget, *, now: float, actor: str
    ) -> tuple[RunBudgetState, bool]:
        scope, run_id = check_scope(scope), check_run_id(run_id)
        limits = dumps(budget.to_dict())

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunBudgetState, bool]:
            ensure_locked_run(tx, scope, run_id, now)
            inserted = tx.rows(
                "INSERT INTO run_budgets (scope, run_id, limits, created_at, updated_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                (scope, run_id, limits, now, now),
            )
            if inserted:
                tx.audit(
                    "run_budget_set",
                    {"run_id": run_id, **budget.to_dict(), "by": actor, **credential_marker(actor)},
                    now,
                    scope,
                )
                return RunBudgetState(scope, run_id, budget, RunUsage()), True
            state = budget_state(
                scope,
                run_id,
                tx.one(
                    f"SELECT {BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
                    (scope, run_id),
                ),
            )
            if state.budget != budget:
                raise ReservationConflict(
                    f"run {run_id!r} already has another budget: a run's limits are fixed"
                )
            return state, False

        return self._refusing_budget(
            lambda: self._run(work, f"set budget of run {run_id}", run_hold(scope, run_id)),
            now=now,
            scope=scope,
            what={"action": "set_run_budget", "run_id": run_id, "by": actor},
        )

    def run_budget(self, scope: str, run_id: str) -> RunBudgetState | None:
        rows = self._rows(
            f"SELECT {BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
            (check_scope(scope), check_run_id(run_id)),
            "run_budget",
        )
        return budget_state(scope, run_id, rows[0]) if rows else None

    def _with_budget(
        self,
        scope: str,
        run_id: str,
        change: Callable[[SharedTx, RunBudgetState], tuple[RunUsage, Mapping[str, object]]],
        *,
        now: float,
        action: str,
    ) -> RunBudgetState:
        scope, run_id = check_scope(scope), check_run_id(run_id)

        def work(tx: SharedTx, _: Operation | None) -> RunBudgetState:
            tx.write(
                "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ?", (scope, run_id)
            )
            rows = tx.rows(
                f"SELECT {BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
                (scope, run_id),
            )
            if not rows:
                raise ReservationNotFound(f"run {run_id!r} has no budget in scope {scope!r}")
            _refuse_settled(run_id, rows[0], action)
            state = budget_state(scope, run_id, rows[0])
            usage, detail = change(tx, state)
            write_usage(tx, scope, run_id, usage, now)
            tx.audit(action, {"run_id": run_id, **detail, **usage.to_dict()}, now, scope)
            return RunBudgetState(scope, run_id, state.budget, usage)

        return self._refusing_budget(
            lambda: self._run(work, f"{action} {run_id}", run_hold(scope, run_id)),
            now=now,
            scope=scope,
            what={"action": action, "run_id": run_id},
        )

    def begin_run_step(
        self, scope: str, run_id: str, *, now: float, configured_output: int = 0
    ) -> tuple[RunBudgetState, int]:
        """Charge one model step if the run may take one; the state and the output cap
        narrowed to the tokens left. Raises :class:`BudgetExceeded` naming the dimension."""

        def change(_: SharedTx, s: RunBudgetState) -> tuple[RunUsage, Mapping[str, object]]:
            if isinstance(configured_output, bool) or not isinstance(configured_output, int):
                raise InvalidBudget("configured_output must be a non-negative integer")
            if configured_output < 0:
                raise InvalidBudget("configured_output is negative: an output cap never is")
            short = check_step(s.budget, s.usage, now)
            if short is not None:
                raise BudgetExceeded(
                    f"run {run_id!r} has no {short} left for a step", dimension=short
                )
            u = s.usage
            return RunUsage(u.steps + 1, u.tokens, u.reported_tokens, u.tool_calls, u.estimated), {}

        state = self._with_budget(scope, run_id, change, now=now, action="run_step_begun")
        return state, output_limit(state.budget, configured_output, state.usage)

    def record_run_tokens(
        self, scope: str, run_id: str, reported: object, *, now: float
    ) -> RunBudgetState:
        """Charge one model call's reported tokens (None or invalid: pessimistically); the
        reported value is kept in the audit entry as evidence, unclamped."""
        evidence = reported if isinstance(reported, int | str | None) else repr(reported)[:200]

        def change(_: SharedTx, s: RunBudgetState) -> tuple[RunUsage, Mapping[str, object]]:
            after = charge_tokens(s.usage, reported, s.budget)
            over = bool(s.budget.max_tokens) and after.tokens > s.budget.max_tokens
            return after, {"reported": evidence, "overrun": over}

        return self._with_budget(scope, run_id, change, now=now, action="run_tokens_charged")
