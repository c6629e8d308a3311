"""Rows a control released, for the standing dispatcher, written once over :class:`StoreHooks`.

A ``validated`` row is the standing dispatcher's when a control released it: its approvals
completed and its proposer submitted it to be sent (``released_at``), a hold that time lifts
may have room (``released_at`` in the future), or it is held and an operator's change of its
class (kill switch off, breaker reset, envelope step, shadow on) came after its hold (the
class's ``release_gen``). A row journalled with ``Gate.propose`` is never one of them: its
caller dispatches it. Leases only share the work out; the dispatch's compare-and-set still
decides who sends (invariant 1).
"""

from __future__ import annotations

from effectgate.store import _sql as sql
from effectgate.store._hooks import StoreHooks
from effectgate.store.base import Operation

__all__ = ["ReleaseRoles"]


class ReleaseRoles(StoreHooks):
    """Leasing released rows, and reading holds past their bound."""

    #: Appended to the claim's row selection; PostgreSQL skips rows other replicas have
    #: locked (``FOR UPDATE SKIP LOCKED``), a dialect whose writers are serialised needs nothing.
    _claim_lock = ""

    def lease_released(
        self, owner: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[tuple[str, str]]:
        rows = self._run(
            lambda tx, _: tx.rows(
                sql.CLAIM_RELEASED.format(lock=self._claim_lock),
                (now, now, limit, owner, now + lease_seconds),
            ),
            "lease_released",
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def aged_holds(
        self, action: str, *, before: float, limit: int = 1000
    ) -> list[tuple[Operation, float]]:
        return [
            (sql.operation_from_row(r), float(r[-1]))
            for r in self._rows(
                f"SELECT {sql.OP_COLUMNS}, coalesce(held_since, updated_at) FROM operations "
                f"WHERE {sql.HELD} AND action = ? AND coalesce(held_since, updated_at) < ? "
                "ORDER BY op_key LIMIT ?",
                (action, before, limit),
                "aged_holds",
            )
        ]
