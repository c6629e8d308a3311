"""Budgets on the gate's path: the in-transaction dispatch check.

The run's tool-call slot is charged at admission (``journal_bound``, in the journal's
transaction). Just before dispatch, :func:`budget_dispatch_check` runs inside the dispatch
transaction (the pre-dispatch pipeline's ``InTxCheck`` shape, docs/budgets.md) and refuses,
with the last-moment move ``validated -> rejected`` (code ``budget_exceeded``), a bound
operation whose run is past its budget's deadline (dimension ``deadline``), whose run's leaf
reservation has settled (``settled``), or whose declared value does not fit the leaf's value
allocation under a value-bound plan, or cannot be measured (``value_micros``; the charge is the
dispatch's entry in the one record of dispatched value, store/_value_record.py). An unbound
operation costs one primary-key read. Pass it to ``Gate(admission_checks=[...])``; the service
does not add it by default, because any in-transaction check moves the first submit off its
one-transaction path (docs/budgets.md).
"""

from __future__ import annotations

import json

from effectgate._core.budgets import RunBudget
from effectgate._execute.predispatch import Refusal
from effectgate.errors import BudgetExceeded
from effectgate.store._run_plans import ValueRefusal, charge_run_value
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["budget_dispatch_check"]


def budget_dispatch_check(tx: SharedTx, op: Operation, now: float) -> Refusal | None:
    """Refuse dispatch of a run-bound operation past its run's deadline, under a settled
    leaf, or past its leaf's value allocation; charge the value otherwise."""
    bound = tx.rows(
        "SELECT b.run_id, b.limits FROM run_effects e JOIN run_budgets b "
        "ON b.scope = e.scope AND b.run_id = e.run_id "
        "WHERE e.scope = ? AND e.operation_id = ?",
        (op.scope, op.operation_id),
    )
    if not bound:
        return None
    budget = RunBudget.from_dict(json.loads(bound[0][1]))
    if budget.deadline is not None and now >= budget.deadline:
        return Refusal(
            move="reject",
            code=BudgetExceeded.code,
            reason=f"budget_exceeded: run {bound[0][0]!r} is past its deadline (deadline)",
        )
    try:
        charge_run_value(tx, op, now)
    except ValueRefusal as why:
        return Refusal(
            move="reject",
            code=BudgetExceeded.code,
            reason=f"budget_exceeded: {why} ({why.dimension})",
        )
    return None
