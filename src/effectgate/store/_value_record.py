"""The one record of dispatched value (``dispatch_log``) and everyone who reads it.

Each dispatch writes one entry ``(action, at, op_key, value_micros)`` in the dispatch
transaction (store/_guard.py ``dispatch_verdict``; on PostgreSQL inside the one statement of a
first submit): nothing more for a class nobody reads. Three readers share it instead of keeping
three records:

* the envelope's rate and exposure windows: count and sum by ``(action, at)`` in the window
  (``SharedTx.dispatch_usage``);
* a plan's value dimension: the sum over the entries that name a run admitted under one of the
  plan's leaves (:func:`name_run`, :func:`run_value`). Only the value check at dispatch names a
  run, in the same transaction, so only runs under a value-bound plan pay for it;
* a grant's value budget: the entries of the grant's classes since the grant was made, of
  operations its holder proposed (:func:`principal_value`).

Entries are kept while anyone may still read them (:meth:`ValueRecordRoles.prune_dispatch_record`):
inside a class's envelope window, named by a run whose leaf has not settled, or made since a
live grant with a value budget over the class was created.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from effectgate.store import _sql as sql
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["MIN_RETENTION", "ValueRecordRoles", "name_run", "principal_value", "run_value"]

#: Entries no reader holds are kept this long at least (as the breaker's signals are).
MIN_RETENTION = 86400.0

Rows = Callable[[str, Sequence[Any], str], list[Sequence[Any]]]


def name_run(tx: SharedTx, action: str, at: float, op_key: str, scope: str, run_id: str) -> bool:
    """Name the run whose value dimension reads the entry ``tx`` recorded for ``op_key`` at
    ``at`` (found by the record's ``(action, at)`` key). False: no such entry."""
    return bool(
        tx.rows(
            "UPDATE dispatch_log SET run_scope = ?, run_id = ? "
            "WHERE action = ? AND at = ? AND op_key = ? RETURNING 1",
            (scope, run_id, action, at, op_key),
        )
    )


def run_value(tx: SharedTx, scope: str, run_id: str) -> int:
    """The summed declared value of the entries that name the run, in micros."""
    r = tx.one(
        "SELECT coalesce(sum(value_micros), 0) FROM dispatch_log "
        "WHERE run_scope = ? AND run_id = ?",
        (scope, run_id),
    )
    return int(r[0])


def principal_value(rows: Rows, holder: str, actions: frozenset[str] | None, since: float) -> int:
    """Value dispatched since ``since`` in ``actions`` (None: every class) of operations
    ``holder`` proposed, in micros. The proposer is the principal the gate journalled from the
    authenticated credential (the journal entry's ``principal``)."""
    args: list[Any] = [since]
    only = ""
    if actions is not None:
        only = f" AND d.action IN ({','.join('?' * len(actions))})"
        args.extend(sorted(actions))
    # The journal entry names the proposer: found through the per-operation index or, when
    # the row names it (migration row_audit_columns), through the row.
    found = rows(
        "SELECT d.op_key, d.value_micros, a.detail FROM dispatch_log d "
        "JOIN operations o ON o.op_key = d.op_key "
        "JOIN audit_log a ON a.scope = o.scope AND a.operation_id = o.operation_id "
        f"AND {sql.INDEXED_ENTRY} AND a.kind = 'transition' WHERE d.at >= ?{only} UNION ALL "
        "SELECT d.op_key, d.value_micros, a.detail FROM dispatch_log d "
        "JOIN operations o ON o.op_key = d.op_key "
        f"JOIN audit_log a ON {sql.ROW_NAMED_ENTRY} "
        f"AND a.kind = 'transition' WHERE d.at >= ?{only}",
        [*args, *args],
        "dispatched_micros",
    )
    seen: set[str] = set()
    total = 0
    for op_key, micros, detail in found:
        if op_key in seen or micros is None:
            continue
        if json.loads(detail).get("principal") == holder:
            seen.add(op_key)
            total += int(micros)
    return total


def _grant_floor(action: str, grants: Sequence[Sequence[Any]]) -> float | None:
    """The earliest creation of a live, value-budgeted grant over ``action``: entries from then
    on stay (its budget reads them)."""
    floor: float | None = None
    for spec_text, created_at in grants:
        spec = json.loads(spec_text)
        if spec.get("budget") is None:
            continue
        covered = spec.get("actions") or []
        if "*" in covered or action in covered:
            at = float(created_at)
            floor = at if floor is None else min(floor, at)
    return floor


class ValueRecordRoles(StoreHooks):
    """Reads and the prune of the record of dispatched value (part of roles.Budgets)."""

    def run_dispatched_value(self, scope: str, run_id: str) -> int:
        """The summed declared value of the run's effects the record names, in micros."""
        r = self._rows(
            "SELECT coalesce(sum(value_micros), 0) FROM dispatch_log "
            "WHERE run_scope = ? AND run_id = ?",
            (scope, run_id),
            "run_dispatched_value",
        )
        return int(r[0][0])

    def prune_dispatch_record(self, *, now: float, keep: float = MIN_RETENTION) -> int:
        """Delete entries no reader holds any more (see the module docstring); how many. One
        audited transaction per class, holding the class's controls as a change does, so no
        envelope check reads the class's window while it shrinks."""
        keep = max(float(keep), MIN_RETENTION)
        actions = [
            str(r[0])
            for r in self._rows(
                "SELECT DISTINCT action FROM dispatch_log WHERE at < ?",
                (now - keep,),
                "prune_dispatch_record",
            )
        ]
        grants = self._rows(
            "SELECT spec, created_at FROM grants WHERE revoked_at IS NULL AND expires_at > ?",
            (now,),
            "prune_dispatch_record",
        )
        total = 0
        for action in actions:

            def work(tx: SharedTx, _: Operation | None, action: str = action) -> int:
                return _prune_class(tx, action, now, keep, grants)

            total += self._run(
                work, f"prune dispatch record of {action}", Hold(exclusive_class=action)
            )
        return total


def _prune_class(
    tx: SharedTx, action: str, now: float, keep: float, grants: Sequence[Sequence[Any]]
) -> int:
    env = tx.controls(action).envelope
    window = max(keep, env.exposure_window or 0.0, env.rate_interval or 0.0)
    cutoff = now - window
    floor = _grant_floor(action, grants)
    if floor is not None:
        cutoff = min(cutoff, floor)
    gone = tx.rows(
        "DELETE FROM dispatch_log WHERE action = ? AND at < ? AND (run_id IS NULL OR NOT EXISTS "
        "(SELECT 1 FROM run_budgets b WHERE b.scope = dispatch_log.run_scope "
        "AND b.run_id = dispatch_log.run_id AND b.settled_at IS NULL)) RETURNING 1",
        (action, cutoff),
    )
    if gone:
        tx.audit(
            "dispatch_record_pruned",
            {"action": action, "before": cutoff, "entries": len(gone)},
            now,
        )
    return len(gone)
