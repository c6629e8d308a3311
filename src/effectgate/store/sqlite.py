"""The embedded ledger: SQLite in WAL mode, ``BEGIN IMMEDIATE`` transactions, ``synchronous=FULL``.

Several processes may share one file: ``BEGIN IMMEDIATE`` serialises writers, the primary key on
``(scope, operation_id)`` makes the first insert win, and every transition is a conditional
``UPDATE ... WHERE state = ?`` whose row count is checked.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import replace
from typing import Any

from effectgate.core.controls import DispatchGuard
from effectgate.core.states import State, check_transition
from effectgate.errors import OperationNotFound, StaleState, StoreError
from effectgate.store.base import (
    AuditEvent,
    Divergence,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
    check_moves,
    check_path,
    conflict,
    dumps,
    move_event,
    moved,
    operation_filters,
    refuse_newer_schema,
)
from effectgate.store.guard import (
    CONTROL_COLUMNS,
    SHADOW,
    controls_from_row,
    dispatch_verdict,
    guard_new_row,
    path_audit,
    shadow_request,
)
from effectgate.store.sqlite_controls import (
    MIGRATION_ANCHORS,
    MIGRATION_CONTROLS,
    MIGRATION_HEAD_TRIGGER,
    SQLiteControlsMixin,
    SQLiteControlTx,
    advance_head,
    backfill_chain,
    chained_audit,
    register_chain_function,
    request_approval,
)
from effectgate.store.sqlite_reads import SQLiteReadsMixin
from effectgate.store.sqlite_tx import TxGate, store_error

__all__ = ["SQLiteStore"]

# One ordered list per dialect; index + 1 is the schema version.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE operations (
        scope TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        op_key TEXT NOT NULL UNIQUE,
        action TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL,
        intent TEXT NOT NULL,
        effect TEXT NOT NULL,
        tier TEXT, reason TEXT, policy_version TEXT,
        venue_id TEXT, detail TEXT,
        created_at REAL NOT NULL, updated_at REAL NOT NULL, submitted_at REAL,
        version INTEGER NOT NULL DEFAULT 1,
        lease_owner TEXT, lease_until REAL,
        PRIMARY KEY (scope, operation_id)
    ) WITHOUT ROWID;
    CREATE INDEX operations_uncertain ON operations (op_key) WHERE state = 'submitted';
    CREATE TABLE audit_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL, scope TEXT, operation_id TEXT,
        kind TEXT NOT NULL, detail TEXT NOT NULL
    );
    CREATE TABLE divergences (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL, op_key TEXT NOT NULL, venue_ids TEXT NOT NULL,
        ledger_state TEXT, first_seen REAL NOT NULL,
        UNIQUE (kind, op_key, venue_ids)
    );
    CREATE TABLE locks (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at REAL NOT NULL);
    """,
    # 2: operational controls and the hash-chained audit log (store/sqlite_controls.py).
    MIGRATION_CONTROLS,
    # 3: no AUTOINCREMENT on the two tables the hot path appends to. Their keys are assigned
    # by us (audit seq = chain head + 1) or never referenced (dispatch_log.id), and
    # AUTOINCREMENT rewrote a `sqlite_sequence` row (one more page per commit) on every insert.
    # SQLite cannot drop it in place: rebuild, copy, swap, re-index. (The audit head trigger
    # is created right after, in _AFTER_MIGRATION.)
    """
    CREATE TABLE audit_log_v3 (
        seq INTEGER PRIMARY KEY,
        at REAL NOT NULL, scope TEXT, operation_id TEXT,
        kind TEXT NOT NULL, detail TEXT NOT NULL,
        lane INTEGER NOT NULL DEFAULT 0, prev_hash TEXT, hash TEXT
    );
    INSERT INTO audit_log_v3 (seq, at, scope, operation_id, kind, detail, lane, prev_hash, hash)
        SELECT seq, at, scope, operation_id, kind, detail, lane, prev_hash, hash FROM audit_log;
    DROP TABLE audit_log;
    ALTER TABLE audit_log_v3 RENAME TO audit_log;
    CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
    -- dispatch_log is only ever read by (action, at) window: clustered on that key, one
    -- B-tree instead of a table plus an index (one page less per journal commit). A row is
    -- dispatched once, so (action, at, op_key) is unique.
    CREATE TABLE dispatch_log_v3 (
        action TEXT NOT NULL, at REAL NOT NULL, op_key TEXT NOT NULL, value_micros INTEGER,
        PRIMARY KEY (action, at, op_key)
    ) WITHOUT ROWID;
    INSERT OR IGNORE INTO dispatch_log_v3 SELECT action, at, op_key, value_micros
        FROM dispatch_log;
    DROP TABLE dispatch_log;
    ALTER TABLE dispatch_log_v3 RENAME TO dispatch_log
    """,
    # 4: journal and receipt entries are anchored in their operations row, not audit_heads
    # (store/sqlite_controls.py, MIGRATION_ANCHORS).
    MIGRATION_ANCHORS,
]


def _head_trigger(conn: sqlite3.Connection) -> None:
    # Migration 3, continued: the audit head advances in the statement that appends an
    # entry (one statement per entry instead of three). Its body holds ';', so it is not
    # part of the ';'-split script above.
    conn.execute(MIGRATION_HEAD_TRIGGER)


# Python steps that run right after a migration, in its transaction.
_AFTER_MIGRATION = {2: backfill_chain, 3: _head_trigger}

_OP_COLUMNS = ("scope, operation_id, action, fingerprint, state, intent, effect, tier, reason, "
               "policy_version, venue_id, detail, created_at, updated_at, submitted_at, version")
_ENTRY_COLUMNS = "op_key, action, state, venue_id, submitted_at, updated_at"

# The compare-and-set. It hands back only what it changed: the caller (or the same
# transaction's read) already holds the snapshot, so nothing is re-read or re-decoded.
_CAS = ("UPDATE operations SET state = ?, updated_at = ?, version = version + 1, "
        "venue_id = coalesce(?, venue_id), detail = coalesce(?, detail), "
        "submitted_at = coalesce(?, submitted_at), lease_owner = NULL, lease_until = NULL "
        "WHERE scope = ? AND operation_id = ? AND state = ? "
        "RETURNING version, venue_id, detail, submitted_at")
# The receipt's compare-and-set, also recording its audit entry's (seq, hash) (migration 4).
_CAS_ANCHORED = ("UPDATE operations SET state = ?, updated_at = ?, version = version + 1, "
                 "venue_id = coalesce(?, venue_id), detail = coalesce(?, detail), "
                 "submitted_at = coalesce(?, submitted_at), lease_owner = NULL, "
                 "lease_until = NULL, audit_seq = ?, audit_hash = ? "
                 "WHERE scope = ? AND operation_id = ? AND state = ? "
                 "RETURNING version, venue_id, detail, submitted_at")
_INSERT = ("INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, "
           "intent, effect, tier, reason, policy_version, detail, created_at, updated_at, "
           "submitted_at, audit_seq, audit_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
_SELECT = f"SELECT {_OP_COLUMNS} FROM operations WHERE scope = ? AND operation_id = ?"
# The journal's first read: the row if it exists and, beside it, the class's controls (which
# the controls checks would read next), in one statement.
_SELECT_WITH_CONTROLS = (
    "SELECT " + ", ".join(f"o.{c.strip()}" for c in _OP_COLUMNS.split(",")) + ", c.action, "
    + ", ".join(f"c.{c.strip()}" for c in CONTROL_COLUMNS.split(","))
    + " FROM (SELECT 1) LEFT JOIN operations o ON o.scope = ? AND o.operation_id = ? "
    "LEFT JOIN class_controls c ON c.action = ?")
_N_OP = len(_OP_COLUMNS.split(","))
def _row_to_operation(row: Sequence[Any]) -> Operation:
    return Operation(
        scope=row[0], operation_id=row[1], action=row[2], fingerprint=row[3], state=State(row[4]),
        intent=json.loads(row[5]), effect=json.loads(row[6]), tier=row[7], reason=row[8],
        policy_version=row[9], venue_id=row[10], detail=row[11], created_at=row[12],
        updated_at=row[13], submitted_at=row[14], version=row[15])


def _row_to_entry(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(op_key=row[0], action=row[1], state=State(row[2]), venue_id=row[3],
                       submitted_at=row[4], updated_at=row[5])


# --- inner functions: take a connection, run SQL, own no transaction ---------------------------

def _select(conn: sqlite3.Connection, scope: str, operation_id: str) -> Operation | None:
    row = conn.execute(_SELECT, (scope, operation_id)).fetchone()
    return None if row is None else _row_to_operation(row)


def _audit(conn: sqlite3.Connection, now: float, scope: str | None, operation_id: str | None,
           kind: str, detail: Mapping[str, object]) -> None:
    chained_audit(conn, now, scope, operation_id, kind, detail)


class SQLiteStore(SQLiteControlsMixin, SQLiteReadsMixin):
    """The :class:`~effectgate.store.base.Store` on one SQLite file.

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

    # --- schema -------------------------------------------------------------------------------

    def migrate(self) -> None:
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                         "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            refuse_newer_schema(done, len(MIGRATIONS))
            for version, script in enumerate(MIGRATIONS, start=1):
                if version in done:
                    continue
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement)
                after = _AFTER_MIGRATION.get(version)
                if after is not None:
                    after(conn)
                conn.execute("INSERT INTO schema_migrations VALUES (?, julianday('now'))",
                             (version,))

    def schema_version(self) -> int:
        with self._read() as conn:
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # --- operations ---------------------------------------------------------------------------

    def insert_operation(self, new: NewOperation, path: Sequence[State], *, now: float,
                         audit: Mapping[str, object] | None = None,
                         guard: DispatchGuard | None = None) -> tuple[Operation, bool]:
        check_path(path)
        with self._tx() as conn:
            both = conn.execute(_SELECT_WITH_CONTROLS,
                                (new.scope, new.operation_id, new.action)).fetchone()
            existing = None if both[0] is None else _row_to_operation(both[:_N_OP])
            if existing is None:
                # BEGIN IMMEDIATE holds the write lock: nobody can insert between the read
                # above and the insert below, and the controls are read under the same lock.
                tx = SQLiteControlTx(conn)
                tx.seed(controls_from_row(new.action, None if both[_N_OP] is None
                                          else both[_N_OP + 1:]))
                new, steps, held = guard_new_row(tx, new, list(path), guard, now=now)
                return self._insert_new(conn, new, steps, held, now, audit, guard), True
        if existing.fingerprint != new.fingerprint:
            err = conflict(existing, new.fingerprint)
            self.append_audit("idempotency_conflict", {"offered_fingerprint": new.fingerprint,
                              "stored_fingerprint": existing.fingerprint}, now=now,
                              scope=new.scope, operation_id=new.operation_id)
            raise err
        return existing, False

    def _insert_new(self, conn: sqlite3.Connection, new: NewOperation, path: list[State],
                    held: str | None, now: float, audit: Mapping[str, object] | None,
                    guard: DispatchGuard | None) -> Operation:
        final = path[-1]
        submitted_at = now if final is State.SUBMITTED else None
        intent = dumps(new.intent)
        # The entries first: the row records the last one's (seq, hash) as the chain's head.
        anchor: tuple[int | None, str | None] = (None, None)
        for kind, detail in path_audit(new, path, audit, held, intent_text=intent):
            anchor = chained_audit(conn, now, new.scope, new.operation_id, kind, detail,
                                   advance_head=False)
        conn.execute(
            _INSERT,
            (new.scope, new.operation_id, new.op_key, new.action, new.fingerprint,
             final.value, intent, dumps(new.effect), new.tier, new.reason,
             new.policy_version, held, now, now, submitted_at, *anchor))
        if final is State.AWAITING_APPROVAL:
            request_approval(conn, new.scope, new.operation_id, new.fingerprint,
                             new.tier, guard, now)
        return Operation(
            scope=new.scope, operation_id=new.operation_id, action=new.action,
            fingerprint=new.fingerprint, state=final, intent=new.intent,
            effect=new.effect, tier=new.tier, reason=new.reason,
            policy_version=new.policy_version, venue_id=None, detail=held,
            created_at=now, updated_at=now, submitted_at=submitted_at, version=1)

    def transition(self, scope: str, operation_id: str, expected: State, target: State, *,
                   now: float, venue_id: str | None = None, detail: str | None = None,
                   audit: Mapping[str, object] | None = None,
                   guard: DispatchGuard | None = None,
                   current: Operation | None = None) -> Operation:
        target = check_transition(expected, target)
        submitted_at = now if target is State.SUBMITTED else None
        known = current if (current is not None and current.scope == scope
                            and current.operation_id == operation_id) else None
        with self._tx() as conn:
            if target is State.SUBMITTED:
                # The kill switch, breaker, shadow flag and envelope are read in the very
                # transaction that would write `submitted` (invariant 7).
                known = _select(conn, scope, operation_id)
                if known is None:
                    raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
                if known.state is not expected:
                    raise StaleState(f"operation {operation_id!r} is {known.state.value!r}, "
                                     f"not {expected.value!r}")
                tx = SQLiteControlTx(conn)
                verdict = dispatch_verdict(tx, tx.controls(known.action), guard, now=now,
                                           op_key=known.op_key)
                if verdict == SHADOW:
                    target, submitted_at = State.SHADOWED, None
                    request = shadow_request(known.op_key, known.action, known.effect)
                    tx.record_shadow(scope, operation_id, known.action,
                                     (guard.correlation_id if guard else None) or operation_id,
                                     request, known.fingerprint, now)
                    audit = {**(audit or {}), "request": request}
                    if guard is not None:
                        guard.report.shadowed = True
                elif verdict is not None:
                    if guard is not None:
                        guard.report.held_by = verdict
                    conn.execute("UPDATE operations SET detail = ?, updated_at = ? WHERE scope = ? "
                                 "AND operation_id = ?", (verdict, now, scope, operation_id))
                    _audit(conn, now, scope, operation_id, "dispatch_held", {"reason": verdict})
                    return replace(known, detail=verdict, updated_at=now)
            event: dict[str, object] = {"from": expected.value, "state": target.value}
            if venue_id is not None:
                event["venue_id"] = venue_id
            if detail is not None:
                event["detail"] = detail
            if audit:
                event.update(audit)
            # The entry first, so the compare-and-set records it as the chain's head; a miss
            # raises below and the rollback takes the entry with it.
            seq, entry_hash = chained_audit(conn, now, scope, operation_id, "transition", event,
                                            advance_head=False)
            # fetchall() runs the UPDATE to completion before COMMIT.
            changed = conn.execute(_CAS_ANCHORED, (
                target.value, now, venue_id, detail, submitted_at, seq, entry_hash, scope,
                operation_id, expected.value)).fetchall()
            if len(changed) != 1:
                row = _select(conn, scope, operation_id)
                if row is None:
                    raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
                raise StaleState(f"operation {operation_id!r} is {row.state.value!r}, "
                                 f"not {expected.value!r}")
            if known is None:
                # No copy of the row to build on: read it back, inside the transaction.
                known = _select(conn, scope, operation_id)
                if known is None:  # unreachable: updated inside this transaction
                    raise StoreError("row vanished inside its own transaction")
                return known
        return moved(known, target, now, changed[0])

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        check_moves(moves)
        if not moves:
            return []
        applied: list[bool] = []
        head = (0, "")
        with self._tx() as conn:
            for m in moves:
                # The same compare-and-set and audit entry as transition(), in one transaction.
                changed = conn.execute(_CAS, (m.target.value, now, m.venue_id, m.detail, None,
                                              m.scope, m.operation_id,
                                              m.expected.value)).fetchall()
                applied.append(len(changed) == 1)
                if changed:
                    head = chained_audit(conn, now, m.scope, m.operation_id, "transition",
                                         move_event(m), advance_head=False)
            if any(applied):
                advance_head(conn, *head)  # once per batch: the last entry is the head
        return applied

    def _move(self, conn: sqlite3.Connection, row: Operation, target: State, now: float,
              detail: str | None, audit: Mapping[str, object]) -> Operation:
        """Compare-and-set ``row.state -> target`` inside the caller's transaction."""
        check_transition(row.state, target)
        cur = conn.execute("UPDATE operations SET state = ?, updated_at = ?, version = version + 1,"
                           " detail = coalesce(?, detail) WHERE scope = ? AND operation_id = ? "
                           "AND state = ?", (target.value, now, detail, row.scope,
                                             row.operation_id, row.state.value))
        if cur.rowcount != 1:
            raise StaleState(f"operation {row.operation_id!r} moved concurrently")
        _audit(conn, now, row.scope, row.operation_id, "transition",
               {"from": row.state.value, "state": target.value, **audit})
        moved = _select(conn, row.scope, row.operation_id)
        if moved is None:  # unreachable: updated inside this transaction
            raise StoreError("row vanished inside its own transaction")
        return moved

    def get(self, scope: str, operation_id: str) -> Operation | None:
        with self._read() as conn:
            return _select(conn, scope, operation_id)

    def list_operations(self, *, state: State | None = None, action: str | None = None,
                        scope: str | None = None, older_than: float | None = None,
                        limit: int = 100) -> list[Operation]:
        where, args = operation_filters("?", state=state, action=action, scope=scope,
                                        older_than=older_than)
        with self._read() as conn:
            rows = conn.execute(f"SELECT {_OP_COLUMNS} FROM operations {where} "
                                "ORDER BY updated_at DESC LIMIT ?", (*args, limit)).fetchall()
        return [_row_to_operation(r) for r in rows]

    def count_by_state(self) -> dict[tuple[str, str], int]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT action, state, count(*) FROM operations GROUP BY action, state").fetchall()
        return {(r[0], r[1]): int(r[2]) for r in rows}

    # --- reconciliation -------------------------------------------------------------------

    def page_entries(self, after: str | None, limit: int,
                     actions: Sequence[str] | None = None) -> list[LedgerEntry]:
        sql = f"SELECT {_ENTRY_COLUMNS} FROM operations WHERE op_key > ?"
        args: list[Any] = [after or ""]
        if actions is not None:
            sql += f" AND action IN ({','.join('?' * len(actions))})"
            args.extend(actions)
        with self._read() as conn:
            rows = conn.execute(sql + " ORDER BY op_key LIMIT ?", (*args, limit)).fetchall()
        return [_row_to_entry(r) for r in rows]

    def lease_uncertain(self, owner: str, *, now: float, lease_seconds: float,
                        limit: int) -> list[LedgerEntry]:
        with self._tx() as conn:
            rows = conn.execute(
                "UPDATE operations SET lease_owner = ?, lease_until = ? WHERE op_key IN ("
                " SELECT op_key FROM operations WHERE state = 'submitted'"
                " AND (lease_until IS NULL OR lease_until < ?) ORDER BY op_key LIMIT ?)"
                f" RETURNING {_ENTRY_COLUMNS}",
                (owner, now + lease_seconds, now, limit)).fetchall()
        return sorted((_row_to_entry(r) for r in rows), key=lambda e: e.op_key)

    def record_divergence(self, kind: str, op_key: str, venue_ids: Sequence[str],
                          ledger_state: str | None, *, now: float) -> bool:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO divergences (kind, op_key, venue_ids, ledger_state, first_seen) "
                "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                (kind, op_key, dumps(list(venue_ids)), ledger_state, now))
            created = cur.rowcount == 1
            if created:
                scope, _, operation_id = op_key.partition(":")
                _audit(conn, now, scope or None, operation_id or None, "divergence",
                       {"kind": kind, "venue_ids": list(venue_ids), "ledger_state": ledger_state})
        return created

    def list_divergences(self, limit: int = 1000) -> list[Divergence]:
        with self._read() as conn:
            rows = conn.execute("SELECT kind, op_key, venue_ids, ledger_state, first_seen FROM "
                                "divergences ORDER BY id LIMIT ?", (limit,)).fetchall()
        return [Divergence(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4]) for r in rows]

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

    # --- audit ------------------------------------------------------------------------------

    def append_audit(self, kind: str, detail: Mapping[str, object], *, now: float,
                     scope: str | None = None, operation_id: str | None = None) -> None:
        with self._tx() as conn:
            _audit(conn, now, scope, operation_id, kind, detail)

    def iter_audit(self, after_seq: int = 0) -> Iterator[AuditEvent]:
        last = after_seq
        while True:
            with self._read() as conn:
                rows = conn.execute("SELECT seq, at, scope, operation_id, kind, detail FROM "
                                    "audit_log WHERE seq > ? ORDER BY seq LIMIT 1000",
                                    (last,)).fetchall()
            for r in rows:
                yield AuditEvent(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]))
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def close(self) -> None:
        self._gate.close()
