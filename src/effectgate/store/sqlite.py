"""The embedded ledger: SQLite in WAL mode, ``BEGIN IMMEDIATE`` transactions, ``synchronous=FULL``.

Several processes may share one file: ``BEGIN IMMEDIATE`` serialises writers, the primary key on
``(scope, operation_id)`` makes the first insert win, and every transition is a conditional
``UPDATE ... WHERE state = ?`` whose row count is checked. Only what is SQLite's own lives
here: the connections, the transaction hooks and their statements (a journal or receipt records
its audit entry's ``(seq, hash)`` in the operations row, migration 4) and the recorded audit
heads. All the ledger logic, journal and receipt too: :class:`~effectgate.store._ledger.SQLStore`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any, TypeVar

from effectgate._core.states import State
from effectgate.errors import LedgerNotFound, StoreError
from effectgate.store import _op_sql as ops
from effectgate.store import _sql as sql
from effectgate.store import _sqlite_schema as schema
from effectgate.store._group_commit import FinishingBody, TxGate, store_error
from effectgate.store._hooks import NO_HOLD, Hold
from effectgate.store._ledger import SQLStore, Work
from effectgate.store._sqlite_tx import SQLiteEngine
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["SQLiteStore"]

T = TypeVar("T")

# The compare-and-set (store/_op_sql.py). It hands back only what it changed: the caller
# already holds the snapshot. It also records the transaction's latest audit entry (migration
# 4), when given.
_CAS_SET = ops.cas(
    ", audit_seq = coalesce({audit_seq}, audit_seq), "
    "audit_hash = coalesce({audit_hash}, audit_hash), "
    "receipt_seq = coalesce(receipt_seq, {receipt_seq})"
)
_CAS = ops.Positional(_CAS_SET + f" RETURNING {ops.CHANGED_COLUMNS}, receipt_seq")
# The receipt on a copy the caller holds: it moves the row only if the row still is that copy
# (what the update keeps of it, and no receipt entry named yet), so the copy tells what the
# update left. A copy that differs falls back to _CAS in the same transaction.
_CAS_KNOWN = ops.Positional(
    _CAS_SET + " AND version = {k_version} AND venue_id IS {k_venue_id} "
    "AND detail IS {k_detail} AND submitted_at IS {k_submitted_at} AND receipt_seq IS NULL"
)
# A new row (store/_op_sql.py), with its audit anchors and the journal entry it names.
_INSERT = ops.Positional(
    f"INSERT INTO operations ({ops.ROW_COLUMNS}, audit_seq, audit_hash, journal_seq) "
    f"VALUES ({ops.ROW_SLOTS}, {{audit_seq}}, {{audit_hash}}, {{journal_seq}})"
)
# An entry written in_row that its row ended up not naming goes back to the index.
_TO_INDEX = "UPDATE audit_log SET in_row = 0 WHERE seq = ?"


class SQLiteTx(SharedTx):
    """:class:`~effectgate.store._tx.SharedTx` over the write connection, inside ``BEGIN
    IMMEDIATE``: statements run at once, and each audit entry is chained before the next one.

    The last entry of a transaction is recorded as the chain's head: in the operations row a
    compare-and-set or insert writes anyway (no extra page), otherwise by :meth:`finish`.

    The entries :meth:`audit` takes are written when the transaction's next statement runs.
    If that statement writes the last entry's own row and names it there (the journal's insert:
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

    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Sequence[Any]]:
        if self._entries:
            self._write_entries()
        return self.cur.execute(query, args).fetchall()

    def write(self, query: str, args: Sequence[Any] = ()) -> None:
        if self._entries:
            self._write_entries()
        self.cur.execute(query, args)

    def _write_entries(self, row: tuple[str, str] | None = None) -> int | None:
        """Write the waiting entries in order; the last one's seq if it is ``row``'s (which
        names it: the entry is written ``in_row``)."""
        entries, last, seq = self._entries, len(self._entries) - 1, None
        for i, (at, scope, operation_id, kind, text) in enumerate(entries):
            mine = i == last and row == (scope, operation_id)
            self._last = schema.append_entry(
                self.cur, self._link, at, scope, operation_id, kind, text, in_row=mine
            )
            if mine:
                seq = self._last[0]
        entries.clear()
        return seq

    def _anchors(self) -> Mapping[str, Any]:
        """The chain's latest entry, for the row being written to record."""
        self._anchored = last = self._last
        return _NO_ANCHORS if last is None else {"audit_seq": last[0], "audit_hash": last[1]}

    def _cas(self, params: Mapping[str, Any], known: Operation | None) -> Sequence[Any] | None:
        # Only a row's move out of submitted (at most one: nothing re-enters it) names its
        # entry; any other move writes it as before.
        named = params["expected"] == _SUBMITTED
        seq = self._write_entries((params["scope"], params["operation_id"]) if named else None)
        args = {**params, **self._anchors(), "receipt_seq": seq}
        # What ops.cas_on_copy takes: a copy in submitted, moved without a submitted_at.
        copy = known if named and params["submitted_at"] is None else None
        if copy is not None and copy.state is State.SUBMITTED:
            # The receipt, on a copy taken in submitted: when the row still matches the copy,
            # the copy says what the update leaves, so no RETURNING (which costs SQLite a
            # temporary table per statement), and the row takes this seq. A copy the caller
            # altered or kept too long takes _CAS below.
            args.update(
                k_version=copy.version,
                k_venue_id=copy.venue_id,
                k_detail=copy.detail,
                k_submitted_at=copy.submitted_at,
            )
            self.cur.execute(_CAS_KNOWN.text, _CAS_KNOWN.args(args))
            if self.cur.rowcount == 1:
                return ops.cas_on_copy(copy, params["venue_id"], params["detail"])
        return _compare_and_set(self.cur, args, seq)

    def _insert(self, params: Mapping[str, Any]) -> None:
        seq = self._write_entries((params["scope"], params["operation_id"]))
        args = {**params, **self._anchors(), "journal_seq": seq}
        self.cur.execute(_INSERT.text, _INSERT.args(args))

    def finish(self) -> None:
        """Write the waiting entries; record the last entry as the head unless a row does."""
        if self._entries:
            self._write_entries()
        if self._last is not None and self._last != self._anchored:
            schema.advance_head(self.cur, *self._last)


_NO_ANCHORS: Mapping[str, Any] = {"audit_seq": None, "audit_hash": None}
_SUBMITTED = State.SUBMITTED.value


def _compare_and_set(
    cur: sqlite3.Cursor, params: Mapping[str, Any], seq: int | None
) -> Sequence[Any] | None:
    """_CAS with ``params``: ``(version, venue_id, detail, submitted_at)`` as updated, or None.
    A ``seq`` the row was to name goes to the index when the row did not take it."""
    # fetchall() runs the UPDATE to completion before COMMIT.
    changed = cur.execute(_CAS.text, _CAS.args(params)).fetchall()
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
