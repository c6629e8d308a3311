"""Aggregate and scoped read queries for the SQLite store (metrics and the operator API).

Each answers in one statement instead of loading rows into Python: the oldest uncertain row
(``submitted`` rows only), divergence and held-row counts, and divergences, alerts and held
rows of one tenant scope filtered in SQL before the ``LIMIT`` applies (see
:func:`effectgate.store.base.scope_key_range` for why a key range and not ``LIKE``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from effectgate.core.controls import Alert
from effectgate.store.base import Divergence, Operation, scope_key_range, where_terms

__all__ = ["SQLiteReadsMixin"]

_HELD = "state = 'validated' AND detail LIKE 'held:%'"


class SQLiteReadsMixin:
    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def oldest_submitted_at(self) -> float | None:
        with self._read() as conn:
            row = conn.execute("SELECT min(coalesce(submitted_at, updated_at)) FROM operations "
                               "WHERE state = 'submitted'").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def count_divergences(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT kind, count(*) FROM divergences GROUP BY kind").fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def count_held(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute(f"SELECT action, count(*) FROM operations WHERE {_HELD} "
                                "GROUP BY action").fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def list_divergences_in(self, scope: str | None = None, *,
                            limit: int = 1000) -> list[Divergence]:
        where, args = _scoped("op_key", scope)
        with self._read() as conn:
            rows = conn.execute("SELECT kind, op_key, venue_ids, ledger_state, first_seen FROM "
                                f"divergences {where} ORDER BY id LIMIT ?",
                                (*args, limit)).fetchall()
        return [Divergence(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4]) for r in rows]

    def list_alerts_in(self, scope: str | None = None, *, limit: int = 1000) -> list[Alert]:
        where, args = _scoped("subject", scope)
        with self._read() as conn:
            rows = conn.execute("SELECT kind, subject, action, message, detail, at FROM alerts "
                                f"{where} ORDER BY id LIMIT ?", (*args, limit)).fetchall()
        return [Alert(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def list_held(self, *, action: str | None = None, scope: str | None = None,
                  limit: int = 1000) -> list[Operation]:
        from effectgate.store.sqlite import _OP_COLUMNS, _row_to_operation

        clauses, args = where_terms("?", (("action =", action), ("scope =", scope)))
        clauses.insert(0, _HELD)
        with self._read() as conn:
            rows = conn.execute(f"SELECT {_OP_COLUMNS} FROM operations WHERE "
                                f"{' AND '.join(clauses)} ORDER BY updated_at DESC LIMIT ?",
                                (*args, limit)).fetchall()
        return [_row_to_operation(r) for r in rows]


def _scoped(column: str, scope: str | None) -> tuple[str, Sequence[Any]]:
    if scope is None:
        return "", ()
    low, high = scope_key_range(scope)
    return f"WHERE {column} >= ? AND {column} < ?", (low, high)
