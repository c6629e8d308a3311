"""Budgets on the gate's path: the in-transaction dispatch check, and how a refusal is applied.

The run's tool-call slot is charged at admission (``journal_bound``, in the journal's
transaction). Just before dispatch, :func:`budget_dispatch_check` runs inside the dispatch
transaction (the pre-dispatch pipeline's ``InTxCheck`` shape, docs/budgets.md): a bound
operation whose run is past its budget's deadline is refused with the last-moment move
``validated -> rejected`` (code ``budget_exceeded``, dimension ``deadline``). An unbound
operation costs one primary-key read.

:func:`run_in_tx_checks` and :func:`apply_refusal` are the small local wiring tests use until the
pipeline (issue 15) calls the checks from the dispatch compare-and-set itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from effectgate._core.budgets import RunBudget
from effectgate._core.states import State
from effectgate._execute.predispatch import Refusal
from effectgate.errors import BudgetExceeded, StaleState
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["InTxCheck", "apply_refusal", "budget_dispatch_check", "run_in_tx_checks"]

#: An admission check run inside the dispatch transaction (the pipeline's shape).
InTxCheck = Callable[[SharedTx, Operation, float], Refusal | None]


def budget_dispatch_check(tx: SharedTx, op: Operation, now: float) -> Refusal | None:
    """Refuse dispatch of a run-bound operation whose run budget's deadline has passed."""
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
    return None


def run_in_tx_checks(
    store: Store, op: Operation, checks: Sequence[InTxCheck], now: float
) -> Refusal | None:
    """Run ``checks`` in one store transaction, holding the operation's lane; the first
    refusal, or None. (The pipeline runs them inside the dispatch compare-and-set instead.)"""
    if not isinstance(store, StoreHooks):
        raise TypeError("in-transaction checks need a SQL store")

    def work(tx: SharedTx, _: Operation | None) -> Refusal | None:
        for check in checks:
            refusal = check(tx, op, now)
            if refusal is not None:
                return refusal
        return None

    return store._run(work, f"check {op.operation_id}", Hold(key=(op.scope, op.operation_id)))


def apply_refusal(store: Store, op: Operation, refusal: Refusal, *, now: float) -> bool:
    """Apply a refusal's last-moment move to a validated row (issue 12's moves); whether it
    applied (False: the row had moved on)."""
    if refusal.move == "reject":
        try:
            store.transition(
                op.scope,
                op.operation_id,
                State.VALIDATED,
                State.REJECTED,
                now=now,
                detail=refusal.reason,
                audit={"refusal": refusal.code},
            )
        except StaleState:
            return False
        return True
    store.reopen_approval(
        op.scope,
        op.operation_id,
        reason=refusal.reason,
        required=1,
        ttl=3600.0,
        by="budget",
        now=now,
    )
    return True
