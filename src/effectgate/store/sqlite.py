"""The embedded ledger: SQLite in WAL mode, ``BEGIN IMMEDIATE`` transactions, ``synchronous=FULL``.

Several processes may share one file: ``BEGIN IMMEDIATE`` serialises writers, the primary key on
``(scope, operation_id)`` makes the first insert win, and every transition is a conditional
``UPDATE ... WHERE state = ?`` whose row count is checked. Only what is SQLite's own lives
here: the connections, the hot path's statements (a journal or receipt records its audit
entry's ``(seq, hash)`` in the operations row, migration 4), the lease and sweep-lock tables and
the recorded audit heads. The ledger logic is :class:`~effectgate.store.ledger.SQLStore`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, TypeVar

from effectgate.core.controls import DispatchGuard
from effectgate.core.states import State
from effectgate.errors import StoreError
from effectgate.store import sql
from effectgate.store.base import (
    Journal,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
    check_moves,
    dumps,
    moved,
    transition_event,
)
from effectgate.store.guard import journal_new
from effectgate.store.ledger import SQLStore, Work
from effectgate.store.sqlite_schema import (
    advance_head,
    chained_audit,
    migrate,
    register_chain_function,
)
from effectgate.store.sqlite_tx import TxGate, store_error
from effectgate.store.tx import SharedTx

__all__ = ["SQLiteStore"]

T = TypeVar("T")

# The compare-and-set. It hands back only what it changed: the caller already holds the
# snapshot. It also records the transaction's latest audit entry (migration 4), when given.
_CAS = ("UPDATE operations SET state = ?, updated_at = ?, version = version + 1, "
        "venue_id = coalesce(?, venue_id), detail = coalesce(?, detail), "
        "submitted_at = coalesce(?, submitted_at), lease_owner = NULL, lease_until = NULL, "
        "audit_seq = coalesce(?, audit_seq), audit_hash = coalesce(?, audit_hash) "
        "WHERE scope = ? AND operation_id = ? AND state = ? "
        "RETURNING version, venue_id, detail, submitted_at")
_INSERT = ("INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, "
           "intent, effect, tier, reason, policy_version, detail, created_at, updated_at, "
           "submitted_at, audit_seq, audit_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
# The journal's first read: the row if it exists and, beside it, the class's controls (which
# the controls checks would read next), in one statement.
_N_OP = len(sql.OP_COLUMNS.split(","))
_SELECT_WITH_CONTROLS = (
    "SELECT " + ", ".join(f"o.{c.strip()}" for c in sql.OP_COLUMNS.split(",")) + ", c.action, "
    + ", ".join(f"c.{c.strip()}" for c in sql.CONTROL_COLUMNS.split(","))
    + " FROM (SELECT 1) LEFT JOIN operations o ON o.scope = ? AND o.operation_id = ? "
    "LEFT JOIN class_controls c ON c.action = ?")


class _Miss(Exception):
    """A compare-and-set found the row elsewhere: roll back its audit entry with it."""


class SQLiteTx(SharedTx):
    """:class:`~effectgate.store.tx.SharedTx` over the write connection, inside ``BEGIN
    IMMEDIATE``: statements run at once, and each audit entry is chained as it is written.

    The last entry of a transaction is recorded as the chain's head: in the operations row a
    compare-and-set or insert writes anyway (no extra page), otherwise by :meth:`finish`.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self.conn = conn
        self._last: tuple[int, str] | None = None
        self._anchored: tuple[int, str] | None = None

    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return self.conn.execute(query, args).fetchall()

    def write(self, query: str, args: Sequence[Any] = ()) -> None:
        self.conn.execute(query, args)

    def audit(self, kind: str, detail: Mapping[str, object], at: float,
              scope: str | None = None, operation_id: str | None = None) -> None:
        self._last = chained_audit(self.conn, at, scope, operation_id, kind, detail,
                                   advance_head=False)

    def _anchor(self) -> tuple[int | None, str | None]:
        self._anchored = self._last
        return self._last if self._last is not None else (None, None)

    def cas(self, scope: str, operation_id: str, expected: State, target: State, *,
            now: float, venue_id: str | None = None, detail: str | None = None,
            submitted_at: float | None = None) -> Sequence[Any] | None:
        # fetchall() runs the UPDATE to completion before COMMIT.
        changed = self.conn.execute(_CAS, (target.value, now, venue_id, detail, submitted_at,
                                           *self._anchor(), scope, operation_id,
                                           expected.value)).fetchall()
        return changed[0] if changed else None

    def insert_row(self, new: NewOperation, state: State, held: str | None, now: float,
                   intent_text: str) -> None:
        self.conn.execute(_INSERT, (
            new.scope, new.operation_id, new.op_key, new.action, new.fingerprint, state.value,
            intent_text, dumps(new.effect), new.tier, new.reason, new.policy_version, held, now,
            now, now if state is State.SUBMITTED else None, *self._anchor()))

    def finish(self) -> None:
        """Record the transaction's last entry as the head unless a row records it."""
        if self._last is not None and self._last != self._anchored:
            advance_head(self.conn, *self._last)


class SQLiteStore(SQLStore):
    """The :class:`~effectgate.store.roles.Store` on one SQLite file.

    ``synchronous`` is ``FULL`` by default: a commit that returned survives power loss. ``NORMAL``
    or ``OFF`` trade that away and exist for benchmarks and throwaway ledgers.
    """

    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000,
                 migrate: bool = True) -> None:
        if synchronous.upper() not in {"FULL", "NORMAL", "OFF", "EXTRA"}:
            raise StoreError(f"synchronous must be FULL, EXTRA, NORMAL or OFF, not {synchronous!r}")
        self.path = path
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a transaction takes
            # the write lock up front instead of failing to upgrade it half-way through.
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                         timeout=busy_timeout_ms / 1000)
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            on_disk = path not in (":memory:", "")  # "" is SQLite's private temporary file
            wal = False
            if on_disk:
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
                wal = bool(mode) and str(mode[0]).lower() == "wal"
            self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            register_chain_function(self._conn)
            reader = None
            if wal:
                # Reads on their own connection: committed rows only, beside the writer (WAL
                # only: in rollback-journal mode a reader would block the writer's COMMIT).
                reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                         timeout=busy_timeout_ms / 1000)
                reader.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
                reader.execute("PRAGMA query_only = 1")
            self._gate = TxGate(self._conn, reader)
        except sqlite3.Error as exc:
            with suppress(Exception):
                self._conn.close()
            raise store_error(f"cannot open SQLite ledger {path!r}", exc) from exc
        if migrate:
            self.migrate()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction body; every ``sqlite3`` error leaves as StoreError.

        Bodies from several threads may share one SQLite transaction and its commit (group
        commit, :mod:`effectgate.store.sqlite_tx`); the caller returns only once the commit
        covering its body is durable. Before COMMIT nothing is durable: a failed body is rolled
        back (alone) and is a :class:`StoreError`, nothing written. A COMMIT that fails because
        another process held the lock wrote nothing (StoreError); any other COMMIT failure (an
        I/O error while the WAL frames were written) may have reached the file:
        :class:`IndeterminateCommit`.
        """
        return self._gate.transaction()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._gate.read() as conn:
            try:
                yield conn
            except sqlite3.Error as exc:
                raise store_error("read failed", exc) from exc

    # --- the hooks of SQLStore ------------------------------------------------------------

    def _rows(self, query: str, args: Sequence[Any] = (),
              what: str = "read") -> list[Sequence[Any]]:
        with self._read() as conn:
            return conn.execute(query, args).fetchall()

    def _run(self, work: Work[T], what: str, *, key: tuple[str | None, str | None] = (None, None),
             shared_class: str | None = None, exclusive_class: str | None = None,
             row: tuple[str, str] | None = None) -> T:
        # BEGIN IMMEDIATE holds the only write lock: it orders classes, rows and the chain.
        with self._tx() as conn:
            tx = SQLiteTx(conn)
            found = tx.rows(sql.SELECT_OP, row) if row is not None else []
            result = work(tx, sql.operation_from_row(found[0]) if found else None)
            tx.finish()
            return result

    def _journal(self, new: NewOperation, path: list[State], now: float,
                 audit: Mapping[str, object] | None, guard: DispatchGuard | None) -> Journal:
        with self._tx() as conn:
            both = conn.execute(_SELECT_WITH_CONTROLS,
                                (new.scope, new.operation_id, new.action)).fetchone()
            if both[0] is not None:
                return Journal(sql.operation_from_row(both[:_N_OP]), False)
            # BEGIN IMMEDIATE holds the write lock: nobody can insert between the read above
            # and the insert, and the controls are read under the same lock.
            tx = SQLiteTx(conn)
            tx.seed(sql.controls_from_row(new.action, None if both[_N_OP] is None
                                          else both[_N_OP + 1:]))
            done = journal_new(tx, new, path, guard, audit, now=now)
            tx.finish()
            return done

    def _transition(self, scope: str, operation_id: str, expected: State, target: State,
                    now: float, venue_id: str | None, detail: str | None,
                    event: Mapping[str, object], known: Operation | None) -> Operation | None:
        try:
            with self._tx() as conn:
                tx = SQLiteTx(conn)
                # The entry first, so the compare-and-set records it as the chain's head.
                tx.audit("transition", event, now, scope, operation_id)
                changed = tx.cas(scope, operation_id, expected, target, now=now,
                                 venue_id=venue_id, detail=detail)
                if changed is None:
                    raise _Miss  # rolls the entry back with the transaction
                if known is None:
                    # No copy of the row to build on: read it back, inside the transaction.
                    return sql.operation_from_row(tx.one(sql.SELECT_OP, (scope, operation_id)))
        except _Miss:
            return None
        return moved(known, target, now, changed)

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        check_moves(moves)
        if not moves:
            return []
        applied: list[bool] = []
        with self._tx() as conn:
            tx = SQLiteTx(conn)
            for m in moves:
                # The compare-and-set first: a stale move writes no entry. The head is
                # recorded once, after the batch.
                changed = conn.execute(_CAS, (m.target.value, now, m.venue_id, m.detail, None,
                                              None, None, m.scope, m.operation_id,
                                              m.expected.value)).fetchall()
                applied.append(bool(changed))
                if changed:
                    tx.audit("transition", transition_event(
                        m.expected, m.target, venue_id=m.venue_id, detail=m.detail,
                        audit=m.audit), now, m.scope, m.operation_id)
            tx.finish()
        return applied

    # --- schema, leases, locks, heads: SQLite's own -----------------------------------------

    def migrate(self) -> None:
        with self._tx() as conn:
            migrate(conn)

    def schema_version(self) -> int:
        return int(self._rows("SELECT max(version) FROM schema_migrations")[0][0] or 0)

    def lease_uncertain(self, owner: str, *, now: float, lease_seconds: float,
                        limit: int) -> list[LedgerEntry]:
        with self._tx() as conn:
            rows = conn.execute(
                "UPDATE operations SET lease_owner = ?, lease_until = ? WHERE op_key IN ("
                " SELECT op_key FROM operations WHERE state = 'submitted'"
                " AND (lease_until IS NULL OR lease_until < ?) ORDER BY op_key LIMIT ?)"
                f" RETURNING {sql.ENTRY_COLUMNS}",
                (owner, now + lease_seconds, now, limit)).fetchall()
        return sorted((sql.entry_from_row(r) for r in rows), key=lambda e: e.op_key)

    @contextmanager
    def _sweep_lock(self, holder: str, now: float, ttl: float) -> Iterator[bool]:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO locks (name, holder, expires_at) VALUES ('sweep', ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "expires_at = excluded.expires_at WHERE locks.expires_at < ?",
                (holder, now + ttl, now))
            # Not re-entrant, not even for the same holder: two sweeps of one service (the
            # standing reconciler and an admin "reconcile now") must not run at once, and the
            # first to finish would otherwise delete the lock the other still relies on.
            acquired = cur.rowcount == 1
        try:
            yield acquired
        finally:
            if acquired:
                with self._tx() as conn:
                    # Only this acquisition's lock: if it expired and was taken over
                    # meanwhile, the new holder's row (another expiry) stays.
                    conn.execute("DELETE FROM locks WHERE name = 'sweep' AND holder = ? "
                                 "AND expires_at = ?", (holder, now + ttl))

    def sweep_lock(self, holder: str, *, now: float, ttl: float) -> AbstractContextManager[bool]:
        return self._sweep_lock(holder, now, ttl)

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Operations rows and the audit_heads row whose recorded entry is gone or differs.

        Appends chain from the log's last entry, so after entries are cut off the tail, later
        appends re-use their seqs and the chain itself reads as whole again; the recorded
        (seq, hash) pairs do not move and keep saying what was there (migration 4).
        """
        rows = self._rows(
            "SELECT o.audit_seq, o.scope || ':' || o.operation_id, a.hash IS NULL "
            "FROM operations o LEFT JOIN audit_log a ON a.seq = o.audit_seq "
            "WHERE o.audit_seq IS NOT NULL AND (a.hash IS NULL OR a.hash <> o.audit_hash) "
            "UNION ALL SELECT h.seq, 'the audit head', a.hash IS NULL FROM audit_heads h "
            "LEFT JOIN audit_log a ON a.seq = h.seq "
            "WHERE a.hash IS NULL OR a.hash <> h.hash ORDER BY 1")
        return [(int(seq), f"{who} records audit seq {seq}, which the log "
                 f"{'no longer has' if missing else 'holds with another hash'}: entries were "
                 "deleted or rewritten") for seq, who, missing in rows]

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        """The recorded head: the later of audit_heads and the newest operations-row anchor.

        The anchors have no index (one would cost the page they save), so this scans the
        operations table: verification reads every entry anyway.
        """
        rows = self._rows(
            "SELECT seq, hash FROM (SELECT seq, hash FROM audit_heads WHERE lane = 0 "
            "UNION ALL SELECT audit_seq, audit_hash FROM operations "
            "WHERE audit_seq IS NOT NULL) ORDER BY seq DESC LIMIT 1")
        return {0: (int(rows[0][0]), str(rows[0][1]))} if rows else {}

    def close(self) -> None:
        self._gate.close()
