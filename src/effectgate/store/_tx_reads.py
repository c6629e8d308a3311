"""The reads evaluate's token covers, inside an open write transaction.

A submit that presents an evaluation token re-reads what the token covers in the very
transaction that journals the row (``DispatchGuard.recheck``), so a kill switch flipped, a
policy activated or a budget spent between the gate's pre-check and the journal is still seen:
the transaction holds the class's lock (SQLite's write lock, PostgreSQL's class advisory lock)
that orders it after any such change. :class:`TxReads` gives the same read roles as the store
(the same SQL, the roles' own methods) over the transaction's connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from effectgate._core.controls import ClassControls
from effectgate.errors import StoreError
from effectgate.store._controls import SignalReads
from effectgate.store._grants import GrantRoles
from effectgate.store._hooks import NO_HOLD, Hold, Work
from effectgate.store._policies import PolicyRoles
from effectgate.store._run_plans import RunPlanRoles
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["TxReads"]

T = TypeVar("T")


class TxReads(GrantRoles, PolicyRoles, RunPlanRoles, SignalReads):
    """Grant, policy, run-budget, value and breaker-window reads in ``tx``; the class's
    controls and its envelope windows as the transaction's own guard reads them (the window's
    lock taken)."""

    def __init__(self, tx: SharedTx) -> None:
        self._tx = tx

    def _rows(
        self, query: str, args: Sequence[Any] = (), what: str = "read"
    ) -> list[Sequence[Any]]:
        return self._tx.rows(query, args)

    def _run(self, work: Work[T], what: str, hold: Hold = NO_HOLD) -> T:
        raise StoreError(f"{what}: a read inside a transaction opens no other")

    def controls(self, action: str) -> ClassControls:
        return self._tx.controls(action)

    def dispatch_window(self, action: str, since: float) -> tuple[int, int]:
        return self._tx.dispatch_usage(action, since)

    def get(self, scope: str, operation_id: str) -> Operation | None:
        """None: the recheck runs where the row is being journalled, so it does not exist."""
        return None
