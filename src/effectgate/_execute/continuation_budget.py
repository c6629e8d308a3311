"""A continuation is charged to its original's run budget, in its own dispatch transaction.

A retry or a compensation is a new action, charged separately (docs/continuations.md): when the
original was admitted inside a run (bound to a run call, docs/runs.md), its continuation takes
one more of that run's tool-call slots and is held to the run's deadline, through the budgets'
public :func:`~effectgate.store._budgets.admit_tool_slot`; when that run was admitted under a
leaf of a value-bound plan, the continuation's declared value is also charged to the leaf
(:func:`~effectgate.store._run_plans.charge_run_value`, the dimension ``value_micros``), its
entry in the one record of dispatched value naming the original's run. The charge is made inside the
dispatch transaction, beside the ``validated -> submitted`` compare-and-set (the pre-dispatch
pipeline's in-transaction stage), so concurrent processes cannot overdraw, and a continuation
refused before it is sent (by policy, an earlier stage, or this check) never holds a slot: the
refusal rolls the charge back with the dispatch. The gate adds this check only for rows in the
reserved continuation namespace; every other dispatch is unchanged.
"""

from __future__ import annotations

from effectgate._execute.predispatch import Refusal
from effectgate.errors import BudgetExceeded
from effectgate.store._budgets import admit_tool_slot
from effectgate.store._run_plans import ValueRefusal, charge_run_value
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["continuation_budget_check"]


def continuation_budget_check(tx: SharedTx, row: Operation, now: float) -> Refusal | None:
    """Charge ``row`` (a continuation) one tool-call slot of its original's run, if any, and
    its declared value to that run's leaf when the run's plan bounds value."""
    link = tx.rows(
        "SELECT original_id FROM continuations WHERE scope = ? AND operation_id = ?",
        (row.scope, row.operation_id),
    )
    if not link:
        return None
    bound = tx.rows(
        "SELECT run_id FROM run_effects WHERE scope = ? AND operation_id = ?",
        (row.scope, str(link[0][0])),
    )
    if not bound:
        return None
    run_id, original_id = str(bound[0][0]), str(link[0][0])
    try:
        admit_tool_slot(tx, row.scope, run_id, row.operation_id, now)
    except BudgetExceeded as exc:
        return _over(exc.message, exc.dimension, run_id)
    try:
        # After the slot (the run's row, then the leaf's: a settlement's order, so no cycle).
        charge_run_value(tx, row, now, bound_to=original_id)
    except ValueRefusal as why:
        return _over(str(why), why.dimension, run_id)
    return None


def _over(message: str, dimension: str, run_id: str) -> Refusal:
    """The refusal of a continuation its original's run cannot carry, naming the dimension."""
    return Refusal(
        move="reject",
        code=BudgetExceeded.code,
        reason=f"budget_exceeded: {message} ({dimension}; charged to the original's run "
        f"{run_id!r})",
    )
