"""PostgreSQL transactions with controls and a hash-chained audit: locks, the chain SQL, PgTx.

Locking, chosen so executors do not queue behind each other needlessly:

* **Class switches** (kill, breaker, shadow, envelope): a dispatching transaction takes a
  *shared* transaction advisory lock on its class, operator changes an *exclusive* one. Dispatchers
  never wait for each other, a flip waits for the dispatches already in flight, and every
  dispatch after the flip commits reads the new state (READ COMMITTED reads after the lock).
* **Envelope windows** (exposure, rate): an exclusive advisory lock per class, taken only when
  the class has such an axis, so the check and the charge of one dispatch are atomic.
* **Audit chain**: 16 lanes, each with a head row locked ``FOR UPDATE``. An operation's entries
  all go to the lane of its key; operator actions to lane 0. Writers serialise per lane, not
  globally. Every entry of a transaction is written to that transaction's single lane, so no
  transaction ever waits for two heads (no lock cycles). Lock order everywhere: class, operation
  (key lock or row lock), lane head, envelope window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar

import psycopg

from effectgate._core.chain import GENESIS, content_digest, link_entries
from effectgate.store import _op_sql as ops
from effectgate.store import _sql as sql
from effectgate.store._hooks import NO_HOLD, Hold
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, dumps

__all__ = ["PgTx", "audit_params", "cas_sql", "chain_ctes", "class_lock", "lock_key", "pg_sql"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]

#: Sequence numbers fetched up front per transaction; more are fetched if a rare path needs them.
_PREFETCH = 6

_NEXTVAL = "SELECT nextval(pg_get_serial_sequence('audit_log', 'seq')) FROM generate_series(1, %s)"
_INSERT_AUDIT = (
    "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
    "prev_hash, hash) OVERRIDING SYSTEM VALUE VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)"
)


def chain_ctes(cond: str) -> str:
    """CTEs that append one audit entry (the ``a_*`` parameters) to lane ``%(lane)s`` when CTE
    ``cond`` has rows.

    The link is computed in the statement (``sha256(prev_hash || digest)``, the same formula as
    :func:`effectgate._core.chain.chain_hash`), after the lane's head row is locked, so one
    statement both writes a row and chains its audit entry: no round trip to read the head first.
    The hot path writes exactly one entry per statement, so the parameters are scalars (arrays went
    through psycopg's Python array dumpers, which cost more client time than the round trip)."""
    return f""" aud_head AS ( SELECT hash FROM audit_heads WHERE lane = %(lane)s AND EXISTS (SELECT
    1 FROM {cond}) FOR UPDATE ), aud_link AS ( SELECT hash AS prev, encode(sha256(convert_to(hash ||
    %(a_digest)s::text, 'UTF8')), 'hex') AS hash FROM aud_head ), aud_ins AS ( INSERT INTO audit_log
    (at, scope, operation_id, kind, detail, lane, prev_hash, hash) SELECT %(a_at)s::float8,
    %(a_scope)s::text, %(a_op)s::text, %(a_kind)s::text, %(a_detail)s::text, %(lane)s, l.prev,
    l.hash FROM aud_link l RETURNING seq ), aud_headup AS ( UPDATE audit_heads SET seq = (SELECT seq
    FROM aud_ins), hash = (SELECT hash FROM aud_link) WHERE lane = %(lane)s AND EXISTS (SELECT 1
    FROM aud_ins) )"""


def audit_params(
    lane: int,
    at: float,
    scope: str | None,
    operation_id: str | None,
    kind: str,
    detail: Mapping[str, object],
) -> dict[str, object]:
    """The ``a_*`` parameters of :func:`chain_ctes` for one entry."""
    text = dumps(detail)
    return {
        "lane": lane,
        "a_at": float(at),
        "a_scope": scope,
        "a_op": operation_id,
        "a_kind": kind,
        "a_detail": text,
        "a_digest": content_digest(lane, float(at), scope, operation_id, kind, text),
    }


def lock_key(schema: str, name: str, purpose: str = "class") -> str:
    """The text a transaction advisory lock is keyed on (hashed by the server)."""
    return f"effectgate.{purpose}:{schema}:{name}"


def class_lock(
    schema: str, action: str, *, exclusive: bool, purpose: str = "class"
) -> tuple[str, tuple[str]]:
    """``(query, params)`` taking the transaction advisory lock named by the arguments.

    Parameterised rather than composed: one query text per lock mode, which psycopg prepares
    once per connection, and no per-call quoting on the client.
    """
    return (_XACT_LOCK if exclusive else _XACT_LOCK_SHARED, (lock_key(schema, action, purpose),))


_XACT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_XACT_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))"


@lru_cache(maxsize=512)
def pg_sql(query: str) -> str:
    """A shared statement (``?`` placeholders) in psycopg's style: the one translation.

    Shared statements hold no ``?`` other than placeholders; a literal ``%`` is doubled.
    """
    return query.replace("%", "%%").replace("?", "%s")


def cas_sql(returning: str) -> str:
    """The compare-and-set every transition runs (store/_op_sql.py), returning ``returning``."""
    return f"{ops.named(ops.cas())}\nRETURNING {returning}"


_CAS_CHANGED = cas_sql(ops.CHANGED_COLUMNS)
_INSERT_ROW = f"INSERT INTO operations ({ops.ROW_COLUMNS}) VALUES ({ops.named(ops.ROW_SLOTS)})"


class PgTx(SharedTx):
    """One write transaction: its audit lane, buffered audit entries and buffered writes.

    :meth:`open` queues the prelude (locks, head, sequence numbers, reads) in the caller's
    pipeline; buffered writes travel with the next statement whose result is needed
    (:meth:`rows`), and :meth:`flush` sends what is left, the chained audit rows and the new
    head in one pipelined round trip.
    """

    def __init__(self, conn: Conn, schema: str, lane: int) -> None:
        super().__init__()
        self.conn, self.schema, self.lane = conn, schema, lane
        self.writes: list[tuple[Any, Any]] = []
        self._cursors: dict[str, Cur] = {}
        self._controls_name = ""
        self._window_locked: set[str] = set()
        self.head: tuple[int, str] = (0, GENESIS)
        self.seqs: list[int] = []

    # --- prelude and flush ----------------------------------------------------------------

    def open(self, hold: Hold = NO_HOLD, *, lock_row: bool = True) -> Cur:
        """Queue the prelude statements (call inside ``conn.pipeline()``)."""
        c = self.conn
        if hold.shared_class or hold.exclusive_class:
            name = str(hold.exclusive_class or hold.shared_class)
            c.execute(*class_lock(self.schema, name, exclusive=hold.exclusive_class is not None))
            self._cursors["controls"] = c.execute(pg_sql(sql.SELECT_CONTROLS), (name,))
            self._controls_name = name
        if hold.row:
            lock = " FOR UPDATE" if lock_row else ""
            self._cursors["row"] = c.execute(pg_sql(sql.SELECT_OP) + lock, hold.row)
        self._cursors["head"] = c.execute(
            "SELECT seq, hash FROM audit_heads WHERE lane = %s FOR UPDATE", (self.lane,)
        )
        cur = c.execute(_NEXTVAL, (_PREFETCH,))
        self._cursors["seqs"] = cur
        return cur

    def collect(self) -> Operation | None:
        """Read the prelude's results; return the selected operation row, if one was asked."""
        head = self._cursors["head"].fetchone()
        if head is not None:
            self.head = (int(head[0]), str(head[1]))
        self.seqs = [int(r[0]) for r in self._cursors["seqs"].fetchall()]
        if "controls" in self._cursors:
            self.seed(
                sql.controls_from_row(self._controls_name, self._cursors["controls"].fetchone())
            )
        if "row" in self._cursors:
            r = self._cursors["row"].fetchone()
            return None if r is None else sql.operation_from_row(r)
        return None

    def flush(self, main: tuple[Any, Any] | None = None) -> Cur | None:
        """Send buffered writes, ``main`` and the chained audit entries in one round trip."""
        if not (self.writes or self._entries or main):
            return None
        if len(self.seqs) < len(self._entries):
            more = self.conn.execute(_NEXTVAL, (len(self._entries) - len(self.seqs),))
            self.seqs += [int(r[0]) for r in more.fetchall()]
        rows = link_entries(self.lane, self.head[1], self._entries, self.seqs)
        result: Cur | None = None
        with self.conn.pipeline():
            for statement, params in self.writes:
                self.conn.execute(statement, params)
            if main is not None:
                result = self.conn.execute(main[0], main[1])
            if rows:
                self.conn.cursor().executemany(_INSERT_AUDIT, rows)
                self.conn.execute(
                    "UPDATE audit_heads SET seq = %s, hash = %s WHERE lane = %s",
                    (rows[-1][0], rows[-1][-1], self.lane),
                )
        self.writes.clear()
        self._entries.clear()
        if rows:
            self.head = (rows[-1][0], rows[-1][-1])
            self.seqs = self.seqs[len(rows) :]
        return result

    # --- the hooks of SharedTx --------------------------------------------------------------

    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Sequence[Any]]:
        if not self.writes:
            return self.conn.execute(pg_sql(query), args).fetchall()
        # The buffered writes travel in the same round trip, ahead of the query.
        with self.conn.pipeline():
            for statement, params in self.writes:
                self.conn.execute(statement, params)
            cur = self.conn.execute(pg_sql(query), args)
        self.writes.clear()
        return cur.fetchall()

    def write(self, query: str, args: Sequence[Any] = ()) -> None:
        self.writes.append((pg_sql(query), args))

    def _cas(self, params: Mapping[str, Any], known: Operation | None) -> Sequence[Any] | None:
        cur = self.flush(main=(_CAS_CHANGED, params))
        return cur.fetchone() if cur is not None else None

    def _insert(self, params: Mapping[str, Any]) -> None:
        self.flush(main=(_INSERT_ROW, params))

    def lock_window(self, action: str) -> None:
        if action not in self._window_locked:
            # Check and charge of a window are one critical section per class.
            self.conn.execute(*class_lock(self.schema, action, exclusive=True, purpose="budget"))
            self._window_locked.add(action)
