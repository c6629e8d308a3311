"""SQLite's transactions, as the group commit's :class:`~effectgate.store._group_commit.Engine`:
``BEGIN IMMEDIATE`` takes the write lock up front, a savepoint per joining body, and the
result codes that mean another process held the lock (nothing written)."""

from __future__ import annotations

import sqlite3
from contextlib import suppress

__all__ = ["SQLiteEngine"]

# SQLite result codes that mean "another writer holds the lock": nothing was written.
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


class SQLiteEngine:
    error: type[Exception] = sqlite3.Error

    def __init__(self) -> None:
        # One cursor for the transaction statements of the connection last used (the group
        # commit's write connection): Connection.execute would build a cursor per statement.
        self._conn: sqlite3.Connection | None = None
        self._cur: sqlite3.Cursor | None = None

    def _cursor(self, conn: sqlite3.Connection) -> sqlite3.Cursor:
        cur = self._cur
        if cur is None or self._conn is not conn:
            self._conn, cur = conn, conn.cursor()
            self._cur = cur
        return cur

    def begin(self, conn: sqlite3.Connection) -> None:
        self._cursor(conn).execute("BEGIN IMMEDIATE")

    def savepoint(self, conn: sqlite3.Connection) -> None:
        self._cursor(conn).execute("SAVEPOINT eg_body")

    def release(self, conn: sqlite3.Connection) -> None:
        self._cursor(conn).execute("RELEASE eg_body")

    def rollback_to(self, conn: sqlite3.Connection) -> None:
        cur = self._cursor(conn)
        cur.execute("ROLLBACK TO eg_body")
        cur.execute("RELEASE eg_body")

    def commit(self, conn: sqlite3.Connection) -> None:
        self._cursor(conn).execute("COMMIT")

    def rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            with suppress(sqlite3.Error):  # SQLite may already have rolled it back itself
                conn.execute("ROLLBACK")

    def in_transaction(self, conn: sqlite3.Connection) -> bool:
        return conn.in_transaction

    def busy(self, exc: Exception) -> bool:
        return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in _BUSY
