"""Ledger faults from the simulated world: the connections a simulated process uses fail at a
drawn statement exactly as the real driver would, and nothing in the store knows.

The store is never told: the world hands it connections of a subclass of the driver's own
(a ``sqlite3.Connection`` made through ``sqlite3.connect(factory=...)``; a psycopg connection
whose class is swapped at connect), and a :class:`LedgerFaults` plan armed by the scheduler
makes the ``skip``-th matching statement after arming fail, once:

- ``busy`` (SQLite): ``BEGIN IMMEDIATE`` fails with ``sqlite3.OperationalError('database is
  locked')`` (``SQLITE_BUSY``), as when another process holds the write lock past the busy
  timeout: nothing was written.
- ``commit`` (SQLite): ``COMMIT`` fails with ``SQLITE_FULL`` and the transaction is rolled back,
  as SQLite does on a full disk; (PostgreSQL): the server refuses ``COMMIT`` with SQLSTATE 40001
  and rolls the transaction back. Nothing was written.
- ``serialization`` (PostgreSQL): a statement of a write transaction is answered by the server
  itself with SQLSTATE 40001 (``psycopg.errors.SerializationFailure``; a ``DO`` block raises it,
  so the transaction really is aborted on the server).
- ``lost`` (PostgreSQL): the connection drops right after the server answered a write's round
  trip (a ``COMMIT``, a one-trip write, or a statement inside a transaction): the client sees
  ``psycopg.OperationalError`` and the server kept whatever it committed.

Faults fire only on the thread that built the plan (the scheduler's): a pool's own threads
(connecting, resetting) never draw one, so a seed replays exactly.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

__all__ = ["PG_KINDS", "SQLITE_KINDS", "LedgerFaults", "postgres_connections", "sqlite_factory"]

SQLITE_KINDS = ("busy", "commit")
PG_KINDS = ("serialization", "lost", "commit")

#: The server's own serialization failure: a real 40001 that aborts the real transaction.
RAISE_40001 = (
    "DO $$BEGIN RAISE EXCEPTION 'could not serialize access due to concurrent update' "
    "USING ERRCODE = '40001'; END$$"
)


class LedgerFaults:
    """The world's plan: at most one armed fault; ``fired`` counts those that fired, by kind."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        self.fired: Counter[str] = Counter()
        self._armed: tuple[str, int] | None = None
        self._thread = threading.get_ident()
        self.hit = False  # whether the last armed fault fired

    def arm(self, kind: str, skip: int) -> None:
        """Fail the ``skip``-th (0-based) matching event from now on, once."""
        if kind not in self.kinds:
            raise ValueError(f"no ledger fault {kind!r} on this store (have {self.kinds})")
        self._armed, self.hit = (kind, skip), False

    def disarm(self) -> bool:
        """Disarm; whether the armed fault fired."""
        self._armed = None
        return self.hit

    def take(self, kind: str) -> bool:
        """A matching event of ``kind`` happens now: True if it must fail."""
        armed = self._armed
        if armed is None or armed[0] != kind or threading.get_ident() != self._thread:
            return False
        if armed[1] > 0:
            self._armed = (kind, armed[1] - 1)
            return False
        self._armed, self.hit = None, True
        self.fired[kind] += 1
        return True


# --- SQLite -------------------------------------------------------------------------------


def _sqlite_error(message: str, code: int, name: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode, exc.sqlite_errorname = code, name
    return exc


def sqlite_factory(faults: LedgerFaults) -> type[sqlite3.Connection]:
    """A ``sqlite3.connect(factory=...)`` whose cursors fail ``BEGIN IMMEDIATE`` or ``COMMIT``
    when ``faults`` says so."""

    class Cursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            if sql == "BEGIN IMMEDIATE" and faults.take("busy"):
                raise _sqlite_error("database is locked", sqlite3.SQLITE_BUSY, "SQLITE_BUSY")
            if sql == "COMMIT" and faults.take("commit"):
                super().execute("ROLLBACK")  # SQLite rolls a transaction back on SQLITE_FULL
                raise _sqlite_error("database or disk is full", sqlite3.SQLITE_FULL, "SQLITE_FULL")
            return super().execute(sql, parameters)

    class Connection(sqlite3.Connection):
        def cursor(self, factory: Any = None) -> Any:
            return super().cursor(factory or Cursor)

    return Connection


@contextmanager
def sqlite_connections(faults: LedgerFaults) -> Iterator[None]:
    """While open, every ``sqlite3.connect`` makes a faulty connection (a SQLite store opens
    its connections in its constructor: open it inside this block)."""
    factory = sqlite_factory(faults)
    connect = sqlite3.connect

    def faulty(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("factory", factory)
        return connect(*args, **kwargs)

    with mock.patch.object(sqlite3, "connect", faulty):
        yield


# --- PostgreSQL ---------------------------------------------------------------------------


def _pg_class(base: Any, faults: LedgerFaults, cache: dict[type, type]) -> type:
    """``base`` (psycopg's Connection or the pool's subclass) with the fault hooks."""
    import psycopg
    from psycopg import pq

    if base in cache:
        return cache[base]
    off, idle = pq.PipelineStatus.OFF, pq.TransactionStatus.IDLE

    def writing(conn: Any) -> bool:
        pg = conn.pgconn
        return bool(pg.pipeline_status != off or pg.transaction_status != idle)

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query.strip().upper() if isinstance(query, str) else ""
        if text == "COMMIT" and faults.take("commit"):
            query, params = RAISE_40001, None  # the server refuses the COMMIT, rolls back
        elif (
            text not in ("BEGIN", "COMMIT", "ROLLBACK")
            and writing(self)
            and faults.take("serialization")
        ):
            query, params = RAISE_40001, None
        return base.execute(self, query, params, **kwargs)

    def wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        if not (writing(self) and faults.take("lost")):
            return base.wait(self, gen, *args, **kwargs)
        base.wait(self, gen, *args, **kwargs)  # the server answered (and kept what it did)
        self.pgconn.finish()  # then the socket went away
        raise psycopg.OperationalError(
            "consuming input failed: server closed the connection unexpectedly"
        )

    cls = cache[base] = type(f"Faulty{base.__name__}", (base,), {"execute": execute, "wait": wait})
    return cls


@contextmanager
def postgres_connections(faults: LedgerFaults) -> Iterator[None]:
    """While open, every psycopg connection made (``psycopg.connect``, a pool's) is faulty."""
    import psycopg

    cache: dict[type, type] = {}
    original = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def connect(cls: type, *args: Any, **kwargs: Any) -> Any:
        conn = original(cls, *args, **kwargs)
        conn.__class__ = _pg_class(type(conn), faults, cache)
        return conn

    with (
        mock.patch.object(psycopg.Connection, "connect", classmethod(connect)),
        mock.patch.object(psycopg, "connect", lambda *a, **k: connect(psycopg.Connection, *a, **k)),
    ):
        yield
