"""Aggregate and scoped read queries for the PostgreSQL store (metrics and the operator API).

The same queries as :mod:`effectgate.store.sqlite_reads`. ``op_key`` is ``COLLATE "C"``, so
the scope's key range is compared in byte order, as in SQLite; ``alerts.subject`` is not, so
its range names the collation explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from psycopg import Connection

from effectgate.core.controls import Alert
from effectgate.store.base import Divergence, Operation, scope_key_range, where_terms

__all__ = ["PgReadsMixin"]

T = TypeVar("T")
_HELD = "state = 'validated' AND detail LIKE 'held:%%'"


class PgReadsMixin:
    def _read(self, work: Callable[[Connection[Any]], T], what: str) -> T:
        raise NotImplementedError

    def _rows(self, query: str, args: Sequence[Any], what: str) -> list[tuple[Any, ...]]:
        return self._read(lambda conn: conn.execute(query.encode(), args).fetchall(), what)

    def oldest_submitted_at(self) -> float | None:
        rows = self._rows("SELECT min(coalesce(submitted_at, updated_at)) FROM operations "
                          "WHERE state = 'submitted'", (), "oldest_submitted_at")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def count_divergences(self) -> dict[str, int]:
        rows = self._rows("SELECT kind, count(*) FROM divergences GROUP BY kind", (),
                          "count_divergences")
        return {str(r[0]): int(r[1]) for r in rows}

    def count_held(self) -> dict[str, int]:
        rows = self._rows(f"SELECT action, count(*) FROM operations WHERE {_HELD} "
                          "GROUP BY action", (), "count_held")
        return {str(r[0]): int(r[1]) for r in rows}

    def list_divergences_in(self, scope: str | None = None, *,
                            limit: int = 1000) -> list[Divergence]:
        where, args = _scoped("op_key", scope)
        rows = self._rows("SELECT kind, op_key, venue_ids, ledger_state, first_seen FROM "
                          f"divergences {where} ORDER BY id LIMIT %s", (*args, limit),
                          "list_divergences_in")
        return [Divergence(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4]) for r in rows]

    def list_alerts_in(self, scope: str | None = None, *, limit: int = 1000) -> list[Alert]:
        where, args = _scoped('subject COLLATE "C"', scope)
        rows = self._rows("SELECT kind, subject, action, message, detail, at FROM alerts "
                          f"{where} ORDER BY id LIMIT %s", (*args, limit), "list_alerts_in")
        return [Alert(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def list_held(self, *, action: str | None = None, scope: str | None = None,
                  limit: int = 1000) -> list[Operation]:
        from effectgate.store.postgres import _OP_COLUMNS, _row_to_operation

        clauses, args = where_terms("%s", (("action =", action), ("scope =", scope)))
        clauses.insert(0, _HELD)
        rows = self._rows(f"SELECT {_OP_COLUMNS} FROM operations WHERE "
                          f"{' AND '.join(clauses)} ORDER BY updated_at DESC, op_key LIMIT %s",
                          (*args, limit), "list_held")
        return [_row_to_operation(r) for r in rows]


def _scoped(column: str, scope: str | None) -> tuple[str, Sequence[Any]]:
    if scope is None:
        return "", ()
    low, high = scope_key_range(scope)
    return f"WHERE {column} >= %s AND {column} < %s", (low, high)
