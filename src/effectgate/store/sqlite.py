"""The embedded ledger: SQLite in WAL mode, ``BEGIN IMMEDIATE`` transactions, ``synchronous=FULL``.

Several processes may share one file: ``BEGIN IMMEDIATE`` serialises writers, the primary key on
``(scope, operation_id)`` makes the first insert win, and every transition is a conditional
``UPDATE ... WHERE state = ?`` whose row count is checked. Only what is SQLite's own lives
here: the connections, the hot path's statements (a journal or receipt records its audit
entry's ``(seq, hash)`` in the operations row, migration 4), the lease and sweep-lock tables and
the recorded audit heads. The ledger logic is :class:`~effectgate.store._ledger.SQLStore`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any, TypeVar

from effectgate._core.controls import DispatchGuard
from effectgate._core.states import State
from effectgate.errors import LedgerNotFound, StoreError
from effectgate.store import _op_sql as ops
from effectgate.store import _sql as sql
from effectgate.store import _sqlite_schema as schema
from effectgate.store._group_commit import FinishingBody, TxGate, store_error
from effectgate.store._guard import SEND
from effectgate.store._hooks import NO_HOLD, Hold
from effectgate.store._journal import PlainJournal, journal_new, plain_journal
from effectgate.store._ledger import SQLStore, Work
from effectgate.store._sqlite_tx import SQLiteEngine
from effectgate.store._tx import SharedTx
from effectgate.store.base import Journal, NewOperation, Operation, dumps, moved

__all__ = ["SQLiteStore"]

T = TypeVar("T")

# The compare-and-set (store/_op_sql.py). It hands back only what it changed: the caller
# already holds the snapshot. It also records the transaction's latest audit entry (migration
# 4), when given.
_CAS_SET = ops.positional(
    ops.cas(
        ", audit_seq = coalesce(?, audit_seq), audit_hash = coalesce(?, audit_hash), "
        "receipt_seq = coalesce(receipt_seq, ?)"
    )
)
_CAS = _CAS_SET + f" RETURNING {ops.CHANGED_COLUMNS}, receipt_seq"
# The receipt on a copy the caller holds: it moves the row only if the row still is that copy
# (what the update keeps of it, and no receipt entry named yet), so the copy tells what the
# update left. A copy that differs falls back to _CAS in the same transaction.
_CAS_KNOWN = (
    _CAS_SET + " AND version = ? AND venue_id IS ? AND detail IS ? AND submitted_at IS ? "
    "AND receipt_seq IS NULL"
)
# A new row (store/_op_sql.py), with its audit anchors and the journal entry it names.
_INSERT = (
    f"INSERT INTO operations ({ops.ROW_COLUMNS}, audit_seq, audit_hash, journal_seq) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
# An entry written in_row that its row ended up not naming goes back to the index.
_TO_INDEX = "UPDATE audit_log SET in_row = 0 WHERE seq = ?"


class _Miss(Exception):
    """A compare-and-set found the row elsewhere: roll back its audit entry with it."""


class SQLiteTx(SharedTx):
    """:class:`~effectgate.store._tx.SharedTx` over the write connection, inside ``BEGIN
    IMMEDIATE``: statements run at once, and each audit entry is chained before the next one.

    The last entry of a transaction is recorded as the chain's head: in the operations row a
    compare-and-set or insert writes anyway (no extra page), otherwise by :meth:`finish`.

    An entry is written when the transaction's next statement runs (it is encoded at once).
    If that statement writes the entry's own row and names it there (the journal's insert:
    ``journal_seq``; the move out of ``submitted``: ``receipt_seq``), the entry is written
    ``in_row`` and stays out of ``audit_by_operation``: one index page less per commit
    (migration ``row_audit_columns``; readers: ``_sql.op_entries``).
    """

    def __init__(
        self, conn: sqlite3.Connection, cur: sqlite3.Cursor, link: schema.ChainLink
    ) -> None:
        super().__init__()
        self.conn = conn
        # Statements run on one cursor: Connection.execute builds (and registers) a new cursor
        # per statement, which costs as much as binding the statement itself.
        self.cur = cur
        self._link = link
        self._last: tuple[int, str] | None = None
        self._anchored: tuple[int, str] | None = None
        # The entry audit() took and the next statement writes: (at, scope, op, kind, text).
        self._pending: tuple[float, str | None, str | None, str, str] | None = None

    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Sequence[Any]]:
        if self._pending is not None:
            self._write_pending(False)
        return self.cur.execute(query, args).fetchall()

    def write(self, query: str, args: Sequence[Any] = ()) -> None:
        if self._pending is not None:
            self._write_pending(False)
        self.cur.execute(query, args)

    def audit(
        self,
        kind: str,
        detail: Mapping[str, object],
        at: float,
        scope: str | None = None,
        operation_id: str | None = None,
    ) -> None:
        if self._pending is not None:
            self._write_pending(False)
        # Encoded now: the caller may reuse its mapping before the entry is written.
        self._pending = (float(at), scope, operation_id, kind, dumps(detail))

    def _write_pending(self, in_row: bool) -> int:
        if self._pending is None:
            raise StoreError("no audit entry is waiting to be written")
        at, scope, operation_id, kind, text = self._pending
        self._pending = None
        self._last = schema.append_entry(
            self.cur, self._link, at, scope, operation_id, kind, text, in_row=in_row
        )
        return self._last[0]

    def _row_entry(self, scope: str, operation_id: str) -> int | None:
        """Write the waiting entry, if any; its seq if it is this row's (the row names it)."""
        pending = self._pending
        if pending is None:
            return None
        mine = pending[1] == scope and pending[2] == operation_id
        seq = self._write_pending(mine)
        return seq if mine else None

    def _anchor(self) -> tuple[int | None, str | None]:
        self._anchored = self._last
        return self._last if self._last is not None else (None, None)

    def cas(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        target: State,
        *,
        now: float,
        venue_id: str | None = None,
        detail: str | None = None,
        submitted_at: float | None = None,
    ) -> Sequence[Any] | None:
        # Only a row's move out of submitted (at most one: nothing re-enters it) names its
        # entry; any other move writes it as before.
        seq = None
        if expected is State.SUBMITTED:
            seq = self._row_entry(scope, operation_id)
        elif self._pending is not None:
            self._write_pending(False)
        return _compare_and_set(
            self.cur,
            (
                target.value,
                now,
                venue_id,
                detail,
                submitted_at,
                *self._anchor(),
                seq,
                scope,
                operation_id,
                expected.value,
            ),
            seq,
        )

    def insert_row(
        self, new: NewOperation, state: State, held: str | None, now: float, intent_text: str
    ) -> None:
        seq = self._row_entry(new.scope, new.operation_id)
        values = ops.row_values(new, state, now, intent_text, held)
        self.cur.execute(_INSERT, (*values, *self._anchor(), seq))

    def finish(self) -> None:
        """Write the waiting entry; record the last entry as the head unless a row does."""
        if self._pending is not None:
            self._write_pending(False)
        if self._last is not None and self._last != self._anchored:
            schema.advance_head(self.cur, *self._last)


def _compare_and_set(
    cur: sqlite3.Cursor, args: Sequence[Any], seq: int | None
) -> Sequence[Any] | None:
    """_CAS with ``args``: ``(version, venue_id, detail, submitted_at)`` as updated, or None. A
    ``seq`` the row was to name goes to the index when the row did not take it."""
    # fetchall() runs the UPDATE to completion before COMMIT.
    changed = cur.execute(_CAS, args).fetchall()
    if seq is not None and (not changed or changed[0][4] != seq):
        # No row moved (the caller rolls back or goes on without it), or the row names an
        # earlier entry: this one must be found through the index.
        cur.execute(_TO_INDEX, (seq,))
    return changed[0][:4] if changed else None


def _connect(path: str, busy_timeout_ms: int, *pragmas: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a transaction takes the
    # write lock up front instead of failing to upgrade it half-way through.
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
    )
    for pragma in (f"PRAGMA busy_timeout = {int(busy_timeout_ms)}", *pragmas):
        conn.execute(pragma)
    return conn


class SQLiteStore(SQLStore):
    """The :class:`~effectgate.store.roles.Store` on one SQLite file.

    ``synchronous`` is ``FULL`` by default: a commit that returned survives power loss. ``NORMAL``
    or ``OFF`` trade that away and exist for benchmarks and throwaway ledgers.
    """

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        migrate: bool = True,
        create: bool = True,
    ) -> None:
        if synchronous.upper() not in {"FULL", "NORMAL", "OFF", "EXTRA"}:
            raise StoreError(f"synchronous must be FULL, EXTRA, NORMAL or OFF, not {synchronous!r}")
        self.path = path
        if not create and path not in (":memory:", "") and not os.path.exists(path):
            raise LedgerNotFound(
                f"no SQLite ledger at {os.path.abspath(path)!r}; create one "
                "with 'effectgate init' (or open it with create=True)"
            )
        try:
            self._conn = _connect(path, busy_timeout_ms)
            wal = False
            if path not in (":memory:", ""):  # "" is SQLite's private temporary file
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
                wal = bool(mode) and str(mode[0]).lower() == "wal"
            self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self._link = schema.register_chain_function(self._conn)
            # Reads on their own connection: committed rows only, beside the writer (WAL only:
            # in rollback-journal mode a reader would block the writer's COMMIT).
            reader = _connect(path, busy_timeout_ms, "PRAGMA query_only = 1") if wal else None
            self._gate = TxGate(SQLiteEngine(), self._conn, reader)
            # The write connection's cursor for transaction bodies (one body at a time).
            self._cur = self._conn.cursor()
        except sqlite3.Error as exc:
            with suppress(Exception):
                self._conn.close()
            raise store_error(f"cannot open SQLite ledger {path!r}", exc) from exc
        if not create and not self._rows(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ):
            self.close()
            raise LedgerNotFound(
                f"{os.path.abspath(path)!r} is not an effectgate ledger (it has "
                "no schema); refusing to create one there"
            )
        if migrate:
            self.migrate()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction body, durable when the block returns (group commit and how
        its failures are classified: :mod:`effectgate.store._group_commit`)."""
        return self._gate.transaction()

    # --- the hooks of SQLStore ------------------------------------------------------------

    def _rows(
        self, query: str, args: Sequence[Any] = (), what: str = "read"
    ) -> list[Sequence[Any]]:
        return self._gate.rows(query, args)

    def _shared_tx(self) -> FinishingBody[SQLiteTx]:
        """One body as a :class:`SQLiteTx`, finished before it commits."""
        return FinishingBody(self._gate, self._new_tx)

    def _new_tx(self, conn: sqlite3.Connection) -> SQLiteTx:
        return SQLiteTx(conn, self._cur, self._link)

    def _run(self, work: Work[T], what: str, hold: Hold = NO_HOLD) -> T:
        # BEGIN IMMEDIATE holds the only write lock: it orders classes, rows and the chain.
        with self._shared_tx() as tx:
            found = tx.rows(sql.SELECT_OP, hold.row) if hold.row is not None else []
            return work(tx, sql.operation_from_row(found[0]) if found else None)

    def _journal(
        self,
        new: NewOperation,
        path: list[State],
        now: float,
        audit: Mapping[str, object] | None,
        guard: DispatchGuard | None,
    ) -> Journal:
        cur = self._cur
        key = (new.scope, new.operation_id, new.action)
        with self._gate.transaction() as conn:
            # BEGIN IMMEDIATE holds the write lock: nobody can insert between these reads and
            # the insert, and the controls are read under the same lock.
            exists, active = cur.execute(ops.PROBE, key).fetchone()
            if exists is None and not active and (guard is None or guard.plain):
                plain = plain_journal(new, path, guard, audit, now=now)
                return self._journal_plain(cur, new, plain, now)
            both = cur.execute(ops.SELECT_WITH_CONTROLS, key).fetchone()
            if both[0] is not None:
                return Journal(sql.operation_from_row(both[: ops.N_OP]), False)
            ctl = sql.controls_from_row(
                new.action, None if both[ops.N_OP] is None else both[ops.N_OP + 1 :]
            )
            tx = SQLiteTx(conn, cur, self._link)
            tx.seed(ctl)
            done = journal_new(tx, new, path, guard, audit, now=now)
            tx.finish()
            return done

    def _journal_plain(
        self, cur: sqlite3.Cursor, new: NewOperation, plain: PlainJournal, now: float
    ) -> Journal:
        """The writes of :func:`plain_journal`, straight on the cursor: the dispatch record, the
        entry (named by the row, so not indexed), the approval request, the row."""
        op_key = new.op_key
        if plain.dispatch:
            cur.execute(sql.INSERT_DISPATCH, (new.action, now, op_key, plain.value_micros))
        if plain.request is not None:
            cur.execute(sql.INSERT_REQUEST, plain.request)
        seq, entry_hash = schema.append_entry(
            cur,
            self._link,
            now,
            new.scope,
            new.operation_id,
            "transition",
            dumps(plain.entry),
            in_row=True,
        )
        final = plain.final
        cur.execute(_INSERT, (*ops.row_values(new, final, now, plain.intent), seq, entry_hash, seq))
        return Journal(new.journalled(final, now), True, SEND if plain.dispatch else None)

    def _transition(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        target: State,
        now: float,
        venue_id: str | None,
        detail: str | None,
        event: Mapping[str, object],
        known: Operation | None,
    ) -> Operation | None:
        # A move out of submitted (at most one: nothing re-enters it) is named by its row.
        named = expected is State.SUBMITTED
        text = dumps(event)
        cur = self._cur
        try:
            with self._gate.transaction():
                # The entry first, so the compare-and-set records it as the chain's head.
                seq, entry_hash = schema.append_entry(
                    cur, self._link, now, scope, operation_id, "transition", text, in_row=named
                )
                args = (
                    target.value,
                    now,
                    venue_id,
                    detail,
                    None,
                    seq,
                    entry_hash,
                    seq if named else None,
                    scope,
                    operation_id,
                    expected.value,
                )
                changed: Sequence[Any] | None = None
                if named and known is not None and known.state is State.SUBMITTED:
                    # The receipt, on a copy taken in submitted: when the row still matches
                    # the copy, the copy says what the update leaves, so no RETURNING (which
                    # costs SQLite a temporary table per statement), and the row takes this
                    # seq. A copy the caller altered or kept too long takes _CAS below.
                    cur.execute(
                        _CAS_KNOWN,
                        (*args, known.version, known.venue_id, known.detail, known.submitted_at),
                    )
                    if cur.rowcount == 1:
                        changed = ops.cas_on_copy(known, venue_id, detail)
                if changed is None:
                    changed = _compare_and_set(cur, args, seq if named else None)
                if changed is None:
                    raise _Miss  # rolls the entry back with the transaction
                if known is None:
                    # No copy of the row to build on: read it back, inside the transaction.
                    return sql.operation_from_row(
                        cur.execute(sql.SELECT_OP, (scope, operation_id)).fetchone()
                    )
        except _Miss:
            return None
        return moved(known, target, now, changed)

    # --- schema, leases, locks, heads: SQLite's own -----------------------------------------

    def migrate(self) -> None:
        with self._tx() as conn:
            schema.migrate(conn)

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Operations rows and the audit_heads row whose recorded entry is gone or differs
        (appends re-use the seqs of a cut tail; the recorded pairs keep what was there)."""
        rows = self._rows(
            "SELECT o.audit_seq, o.scope || ':' || o.operation_id, a.hash IS NULL "
            "FROM operations o LEFT JOIN audit_log a ON a.seq = o.audit_seq "
            "WHERE o.audit_seq IS NOT NULL AND (a.hash IS NULL OR a.hash <> o.audit_hash) "
            "UNION ALL SELECT h.seq, 'the audit head', a.hash IS NULL FROM audit_heads h "
            "LEFT JOIN audit_log a ON a.seq = h.seq "
            "WHERE a.hash IS NULL OR a.hash <> h.hash ORDER BY 1"
        )
        recorded = [
            (
                int(seq),
                f"{who} records audit seq {seq}, which the log "
                f"{'no longer has' if missing else 'holds with another hash'}: entries were "
                "deleted or rewritten",
            )
            for seq, who, missing in rows
        ]
        return sorted([*recorded, *super().audit_anchor_mismatches()])

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        """The recorded head: the later of audit_heads and the newest operations-row anchor.

        The anchors have no index (one would cost the page they save), so this scans the
        operations table: verification reads every entry anyway.
        """
        rows = self._rows(
            "SELECT seq, hash FROM (SELECT seq, hash FROM audit_heads WHERE lane = 0 "
            "UNION ALL SELECT audit_seq, audit_hash FROM operations "
            "WHERE audit_seq IS NOT NULL) ORDER BY seq DESC LIMIT 1"
        )
        return {0: (int(rows[0][0]), str(rows[0][1]))} if rows else {}

    def close(self) -> None:
        self._gate.close()
