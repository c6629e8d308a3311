"""The shared ledger: PostgreSQL through psycopg 3 and a ``psycopg_pool`` connection pool.

Many executor processes on many hosts share one schema. The primary key on
``(scope, operation_id)`` makes the first insert win (``INSERT ... ON CONFLICT DO NOTHING``),
every transition is ``UPDATE ... WHERE state = expected`` with its row count checked, and a
row's audit lines are written by the same statement (data-modifying CTEs), so they commit or
vanish together.

Every write is an explicit transaction, classified by whether ``COMMIT`` may have been sent: a
failure before it changed nothing (:class:`StoreError`, retried once on a fresh connection when
the connection itself failed); a lost connection once ``COMMIT`` may be in flight may or may not
have committed (:class:`IndeterminateCommit`), and callers treat the operation as uncertain
instead of guessing. The hot path (journalling a new row, a receipt's compare-and-set) sends
its statements in ONE round trip, as the implicit transaction the server commits at the
pipeline's Sync, or a single autocommit statement (:meth:`_write_one_trip`): a server error
aborts it, so nothing is written; a lost connection in flight is indeterminate. Writes whose
statement result decides further writes keep two round trips (:meth:`_write`): ``BEGIN`` +
statement, then ``COMMIT``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from effectgate.audit import lane_for
from effectgate.core.controls import DispatchGuard, GuardReport
from effectgate.core.states import State, check_transition
from effectgate.errors import (
    ConfigError,
    IndeterminateCommit,
    OperationNotFound,
    StaleState,
    StoreError,
)
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
    SHADOW,
    dispatch_verdict,
    guard_new_row,
    path_audit,
    shadow_request,
)
from effectgate.store.postgres_controls import PgControlsMixin, approval_request_write
from effectgate.store.postgres_reads import PgReadsMixin
from effectgate.store.postgres_tx import (
    LANES,
    MIGRATION_CONTROLS,
    PgTx,
    audit_params,
    backfill_chain,
    chain_ctes,
    lock_key,
)

__all__ = ["MIGRATIONS", "PostgresStore", "drop_schema", "split_schema"]

log = logging.getLogger("effectgate.store.postgres")

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]

DEFAULT_SCHEMA = "effectgate"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# "off" lets a commit return before its WAL is flushed: for benchmarks and throwaway ledgers only,
# like SQLite's synchronous=OFF. Anything but "on" (or a replica-waiting level) breaks invariant 3.
_SYNC_COMMIT = frozenset({"on", "off", "local", "remote_write", "remote_apply"})
_STATES = ", ".join(f"'{s.value}'" for s in State)

# One ordered list for this dialect; index + 1 is the schema version. Never edit an applied
# entry: append a new one. ``op_key`` is compared with venue keys in the sweep's merge-join, so it
# uses the "C" collation: index order is byte order, which is Python's str order.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE operations (
        scope text NOT NULL,
        operation_id text NOT NULL,
        op_key text COLLATE "C" NOT NULL,
        action text NOT NULL,
        fingerprint text NOT NULL,
        state text NOT NULL CHECK (state IN ({_STATES})),
        intent text NOT NULL,
        effect text NOT NULL,
        tier text, reason text, policy_version text,
        venue_id text, detail text,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        submitted_at double precision,
        version integer NOT NULL DEFAULT 1,
        lease_owner text, lease_until double precision,
        PRIMARY KEY (scope, operation_id),
        CONSTRAINT operations_op_key_unique UNIQUE (op_key)
    );
    CREATE INDEX operations_uncertain ON operations (op_key) WHERE state = 'submitted';
    CREATE INDEX operations_state_updated ON operations (state, updated_at);
    CREATE TABLE audit_log (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at double precision NOT NULL, scope text, operation_id text,
        kind text NOT NULL, detail text NOT NULL
    );
    CREATE TABLE divergences (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind text NOT NULL, op_key text COLLATE "C" NOT NULL, venue_ids text NOT NULL,
        ledger_state text, first_seen double precision NOT NULL,
        CONSTRAINT divergences_once UNIQUE (kind, op_key, venue_ids)
    );
    """,
    # 2: operational controls and the hash-chained audit log (store/postgres_tx.py).
    MIGRATION_CONTROLS,
]
# Python steps that run right after a migration, in its transaction.
_AFTER_MIGRATION = {2: backfill_chain}

_INSERT_ROW = """
INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, intent, effect,
                        tier, reason, policy_version, detail, created_at, updated_at,
                        submitted_at)
VALUES (%(scope)s, %(operation_id)s, %(op_key)s, %(action)s, %(fingerprint)s, %(state)s,
        %(intent)s, %(effect)s, %(tier)s, %(reason)s, %(policy_version)s, %(detail)s, %(now)s,
        %(now)s, %(submitted_at)s)
"""

_OP_COLUMNS = ("scope, operation_id, action, fingerprint, state, intent, effect, tier, reason, "
               "policy_version, venue_id, detail, created_at, updated_at, submitted_at, version")
_ENTRY_COLUMNS = "op_key, action, state, venue_id, submitted_at, updated_at"

_CLASS_ACTIVE = ("SELECT 1 FROM class_controls WHERE action = %(action)s AND (killed OR "
                 "breaker_open OR shadow OR envelope_version > 0)")

# The hot path: a class with no active control and no breaker journals its row, its window
# charge and its chained audit lines in ONE statement, which also checks (after the
# class's shared lock) that no control is active; if one is, nothing is written and the
# transaction continues on the full path.
_FAST_INSERT = f"""
WITH RECURSIVE
ctl AS ({_CLASS_ACTIVE}),
ins AS (
    INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, intent,
                            effect, tier, reason, policy_version, created_at, updated_at,
                            submitted_at)
    SELECT %(scope)s, %(operation_id)s, %(op_key)s, %(action)s, %(fingerprint)s, %(state)s,
           %(intent)s, %(effect)s, %(tier)s, %(reason)s, %(policy_version)s, %(now)s, %(now)s,
           %(submitted_at)s
    WHERE NOT EXISTS (SELECT 1 FROM ctl)
    ON CONFLICT DO NOTHING
    RETURNING 1
),
dl AS (
    INSERT INTO dispatch_log (action, at, op_key, value_micros)
    SELECT %(action)s, %(now)s, %(op_key)s, %(value_micros)s::bigint FROM ins WHERE %(dispatch)s
),
apr AS (
    INSERT INTO approval_requests
    SELECT %(scope)s, %(operation_id)s, %(fingerprint)s, %(required)s::integer,
           %(expires_at)s::float8, %(proposers)s FROM ins WHERE %(approval)s
),
{chain_ctes("ins")}
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM ctl)
"""

# The class's shared lock, then the key's exclusive one, in that order (every writer takes them
# so): the subquery's lock is taken before the outer select list is evaluated.
_TWO_LOCKS = ("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)) FROM "
              "(SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))) AS class_lock")


def _cas(returning: str) -> str:
    """The compare-and-set every transition runs: the row moves only from ``expected``."""
    return f"""
UPDATE operations SET state = %(target)s, updated_at = %(now)s, version = version + 1,
    venue_id = coalesce(%(venue_id)s, venue_id), detail = coalesce(%(detail)s, detail),
    submitted_at = coalesce(%(submitted_at)s, submitted_at),
    lease_owner = NULL, lease_until = NULL
WHERE scope = %(scope)s AND operation_id = %(operation_id)s AND state = %(expected)s
RETURNING {returning}"""


def _fast_transition_sql(returning: str) -> str:
    return f"""
WITH RECURSIVE
upd AS ({_cas(returning)}
),
{chain_ctes("upd")}
SELECT {returning} FROM upd
"""


_FAST_TRANSITION = _fast_transition_sql(_OP_COLUMNS)
# When the caller holds the row (the receipt path), only what the update changed comes back.
_CHANGED_COLUMNS = "version, venue_id, detail, submitted_at"
_FAST_TRANSITION_CHANGED = _fast_transition_sql(_CHANGED_COLUMNS)
# One compare-and-set of a batch (transition_many): the same update as a single transition.
_CAS_ONE = _cas("1")
_TRANSITION_ROW = _cas(_OP_COLUMNS)

# The CTE is MATERIALIZED so the locked, skipped and limited set is computed exactly once.
_LEASE = f"""
WITH claim AS MATERIALIZED (
    SELECT op_key FROM operations
    WHERE state = 'submitted' AND (lease_until IS NULL OR lease_until < %(now)s)
    ORDER BY op_key LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE operations o SET lease_owner = %(owner)s, lease_until = %(until)s
FROM claim WHERE o.op_key = claim.op_key AND o.state = 'submitted'
RETURNING {", ".join("o." + c.strip() for c in _ENTRY_COLUMNS.split(","))}
"""

_DIVERGENCE = """
INSERT INTO divergences (kind, op_key, venue_ids, ledger_state, first_seen)
VALUES (%(kind)s, %(op_key)s, %(venue_ids)s, %(ledger_state)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING 1
"""


def _only(entries: Sequence[tuple[str, dict[str, object]]]) -> tuple[str, dict[str, object]]:
    """The single audit entry of an unheld new row (the one-statement path writes one)."""
    if len(entries) != 1:
        raise StoreError(f"expected one audit entry on the one-statement path, got "
                         f"{len(entries)}")
    return entries[0]


def _row_to_operation(row: Sequence[Any]) -> Operation:
    return Operation(
        scope=row[0], operation_id=row[1], action=row[2], fingerprint=row[3], state=State(row[4]),
        intent=json.loads(row[5]), effect=json.loads(row[6]), tier=row[7], reason=row[8],
        policy_version=row[9], venue_id=row[10], detail=row[11], created_at=row[12],
        updated_at=row[13], submitted_at=row[14], version=row[15])


def _row_to_entry(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(op_key=row[0], action=row[1], state=State(row[2]), venue_id=row[3],
                       submitted_at=row[4], updated_at=row[5])


def check_schema_name(schema: str) -> str:
    """Schema names are plain identifiers: they end up in DDL and in the search path."""
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise ConfigError(f"schema {schema!r} must match {_IDENTIFIER.pattern}")
    return schema


def split_schema(url: str) -> tuple[str, str | None]:
    """Strip a ``schema=NAME`` query parameter (ours, not libpq's) from a PostgreSQL URL."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url, None
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if len(schemas) > 1:
        raise ConfigError("the store URL names more than one schema")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), (schemas[0] if schemas else None)


_IDLE = psycopg.pq.TransactionStatus.IDLE


def _connection_lost(exc: BaseException, conn: Conn | None) -> bool:
    """True when the failure is the connection (or the server going away), not a SQL answer."""
    if conn is not None and conn.broken:
        return True
    state = getattr(exc, "sqlstate", None)
    # No SQLSTATE: the client lost the socket. 08xxx: connection exception. 57P0x: the server is
    # shutting down or crashed (``pg_ctl stop -m immediate`` sends 57P01/57P02 mid-statement).
    return state is None or state.startswith(("08", "57P"))


def _lock_key(purpose: str, schema: str) -> sql.Composed:
    # 64-bit keys derived from the schema name, so ledgers in one database never share a lock.
    return sql.SQL("hashtextextended({}, 0)").format(sql.Literal(f"effectgate.{purpose}:{schema}"))


class PostgresStore(PgControlsMixin, PgReadsMixin):
    """The :class:`~effectgate.store.base.Store` on one PostgreSQL schema.

    ``statement_timeout_ms`` and ``lock_timeout_ms`` bound every statement on the server;
    ``pool_timeout`` bounds the wait for a pooled connection and ``connect_timeout`` a new one,
    so a stuck or unreachable database fails a call (StoreError) instead of hanging it.
    ``synchronous_commit`` is ``on`` by default: a commit that returned survives a crash.
    """

    def __init__(self, url: str, *, schema: str | None = None, min_size: int = 1,
                 max_size: int = 4, statement_timeout_ms: int = 5000,
                 lock_timeout_ms: int = 2000, idle_in_transaction_timeout_ms: int = 30_000,
                 connect_timeout: float = 5.0, pool_timeout: float = 5.0,
                 synchronous_commit: str = "on", migrate: bool = True) -> None:
        conninfo, url_schema = split_schema(url)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise ConfigError(f"schema {schema!r} given twice with different values "
                              f"({url_schema!r} in the URL)")
        self.schema = check_schema_name(schema or url_schema or DEFAULT_SCHEMA)
        for name, value in (("statement_timeout_ms", statement_timeout_ms),
                            ("lock_timeout_ms", lock_timeout_ms),
                            ("idle_in_transaction_timeout_ms", idle_in_transaction_timeout_ms)):
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer")
        if synchronous_commit not in _SYNC_COMMIT:
            raise ConfigError(f"synchronous_commit must be one of {sorted(_SYNC_COMMIT)}")
        if not 1 <= min_size <= max_size:
            raise ConfigError("pool sizes need 1 <= min_size <= max_size")
        if not (connect_timeout > 0 and pool_timeout > 0):
            raise ConfigError("connect_timeout and pool_timeout must be positive")
        self._settings = {
            "search_path": sql.Identifier(self.schema).as_string(None),
            "statement_timeout": str(statement_timeout_ms),
            "lock_timeout": str(lock_timeout_ms),
            "idle_in_transaction_session_timeout": str(idle_in_transaction_timeout_ms),
            "synchronous_commit": synchronous_commit,
            # Each statement of a transaction takes a fresh snapshot: a statement queued after
            # an advisory lock sees what committed while the lock was awaited (the controls
            # checks rely on it), whatever the server's default isolation is.
            "default_transaction_isolation": "read committed",
        }
        self._pool_timeout = float(pool_timeout)
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,  # transactions are explicit: see _write
            "connect_timeout": max(1, round(connect_timeout)),
            # Keepalives notice a vanished server or host that statement_timeout cannot.
            "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        self._conninfo = conninfo
        self._sweep_mutex = threading.Lock()
        self._lock_conn: Conn | None = None
        self._pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size,
                                    kwargs=self._connect_kwargs, configure=self._configure,
                                    timeout=self._pool_timeout, open=False,
                                    name=f"effectgate-{self.schema}")
        try:
            self._pool.open(wait=True, timeout=connect_timeout + self._pool_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to PostgreSQL for schema {self.schema!r}") from exc
        if migrate:
            self.migrate()

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"  # never the URL: it may hold a password

    def _configure(self, conn: Conn) -> None:
        """Session settings for every new pooled connection (one round trip, at connect)."""
        names = list(self._settings)
        conn.execute("SELECT " + ", ".join("set_config(%s, %s, false)" for _ in names),
                     [v for n in names for v in (n, self._settings[n])])

    # --- transactions -------------------------------------------------------------------

    def _write(self, first: Callable[[Conn], Cur], then: Callable[[Conn, Cur], T],
               what: str) -> T:
        """Run one explicit transaction; classify failures by whether COMMIT was sent.

        ``first`` queues the main statement in pipeline mode, so ``BEGIN`` and it travel in one
        round trip; ``then`` reads its result (and may run more statements, off the hot path);
        ``COMMIT`` follows as its own message. A connection failure before COMMIT changed
        nothing and is retried once on a fresh connection: every statement here is idempotent
        or compare-and-set, so the retry cannot double anything.
        """
        for attempt in (1, 2):
            conn: Conn | None = None
            try:
                with self._pool.connection(timeout=self._pool_timeout) as conn:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        cur = first(conn)
                    result = then(conn, cur)
                    self._commit(conn, what)
                    return result
            except PoolTimeout as exc:
                raise StoreError(f"{what}: no database connection within "
                                 f"{self._pool_timeout:g}s") from exc
            except psycopg.Error as exc:
                if attempt == 1 and _connection_lost(exc, conn):
                    log.warning("%s: connection failed before COMMIT (%s); retrying once",
                                what, type(exc).__name__)
                    continue
                raise StoreError(f"{what} failed before commit, nothing written: "
                                 f"{type(exc).__name__}: {_first_line(exc)}") from exc
        raise StoreError(f"{what}: unreachable")  # the loop returns or raises

    @staticmethod
    def _commit(conn: Conn, what: str) -> None:
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            if _connection_lost(exc, conn):
                raise IndeterminateCommit(
                    f"{what}: connection lost while COMMIT was in flight; the write may or may "
                    f"not be durable ({type(exc).__name__})") from exc
            # The server answered COMMIT with an error: the transaction was rolled back.
            raise StoreError(f"{what}: COMMIT refused, nothing written: "
                             f"{_first_line(exc)}") from exc

    def _write_one_trip(self, first: Callable[[Conn], Cur], what: str, *,
                        single: bool = False) -> Cur:
        """The statements ``first`` queues, as ONE transaction in one pipelined round trip.

        No ``BEGIN`` or ``COMMIT`` travel: on an autocommit connection, the extended-protocol
        messages up to the pipeline's single Sync run as one implicit transaction, which the
        server commits at the Sync (PostgreSQL protocol docs, "Pipelining"). Each statement
        still takes its own snapshot, so one queued after an advisory lock sees what committed
        while the lock was awaited. Two fewer messages than ``BEGIN ... COMMIT``, and fewer
        executes: psycopg's per-execute client cost was more than the round trip.

        ``single``: ``first`` runs exactly one statement, sent without a pipeline (it is its
        own implicit transaction), which saves the pipeline's client overhead.

        Only for statements that are the whole write: the result is read (from the returned
        cursor) after the commit, and any follow-up a caller needs is a read or a separate
        transaction. A server error aborts the implicit transaction (later statements are
        skipped, nothing is written): :class:`StoreError`. A lost connection may have come
        after the server committed at the Sync: :class:`IndeterminateCommit`, never a retry.
        """
        conn: Conn | None = None
        try:
            with self._pool.connection(timeout=self._pool_timeout) as conn:
                # The implicit transaction needs an autocommit connection outside any
                # transaction: inside one, the Sync would commit nothing.
                if not conn.autocommit or conn.info.transaction_status != _IDLE:
                    raise StoreError(f"{what}: pooled connection is not idle in autocommit "
                                     "mode; nothing written")
                if single:
                    # One statement is its own implicit transaction: no pipeline needed.
                    cur = first(conn)
                else:
                    # psycopg sends the Sync on leaving the block even if ``first`` raised, so
                    # whatever it queued before raising commits: ``first`` queues the write
                    # last, after statements that write nothing (the locks).
                    with conn.pipeline():
                        cur = first(conn)
        except PoolTimeout as exc:
            raise StoreError(f"{what}: no database connection within "
                             f"{self._pool_timeout:g}s") from exc
        except psycopg.Error as exc:
            if _connection_lost(exc, conn):
                raise IndeterminateCommit(
                    f"{what}: connection lost while the statements and their commit were in "
                    f"flight; the write may or may not be durable ({type(exc).__name__})"
                ) from exc
            raise StoreError(f"{what} failed and was rolled back, nothing written: "
                             f"{type(exc).__name__}: {_first_line(exc)}") from exc
        return cur

    def _read(self, work: Callable[[Conn], T], what: str) -> T:
        """One autocommit read; a connection failure is retried once (reads change nothing)."""
        for attempt in (1, 2):
            conn: Conn | None = None
            try:
                with self._pool.connection(timeout=self._pool_timeout) as conn:
                    return work(conn)
            except PoolTimeout as exc:
                raise StoreError(f"{what}: no database connection within "
                                 f"{self._pool_timeout:g}s") from exc
            except psycopg.Error as exc:
                if attempt == 1 and _connection_lost(exc, conn):
                    continue
                raise StoreError(f"{what} failed: {type(exc).__name__}: "
                                 f"{_first_line(exc)}") from exc
        raise StoreError(f"{what}: unreachable")

    # --- schema -------------------------------------------------------------------------

    def migrate(self) -> None:
        """Apply pending migrations under a transaction advisory lock (one process at a time)."""
        ident = sql.Identifier(self.schema)

        def first(conn: Conn) -> Cur:
            return conn.execute(sql.SQL("SELECT pg_advisory_xact_lock({})").format(
                _lock_key("migrate", self.schema)))

        def then(conn: Conn, _: Cur) -> None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_migrations (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())").format(ident))
            cur = conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(ident))
            done = {r[0] for r in cur.fetchall()}
            refuse_newer_schema(done, len(MIGRATIONS))
            for version, script in enumerate(MIGRATIONS, start=1):
                if version in done:
                    continue
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement.encode())
                after = _AFTER_MIGRATION.get(version)
                if after is not None:
                    after(conn)
                conn.execute(sql.SQL("INSERT INTO {}.schema_migrations (version) VALUES (%s)")
                             .format(ident), (version,))

        self._write(first, then, "migrate")

    def schema_version(self) -> int:
        def work(conn: Conn) -> int:
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
            return int(row[0] or 0) if row else 0
        return self._read(work, "schema_version")

    # --- operations ---------------------------------------------------------------------

    def insert_operation(self, new: NewOperation, path: Sequence[State], *, now: float,
                         audit: Mapping[str, object] | None = None,
                         guard: DispatchGuard | None = None) -> tuple[Operation, bool]:
        check_path(path)
        lane = lane_for(new.scope, new.operation_id, LANES)
        # A configured breaker records and reads its windows before deciding: the full path.
        fast = guard is None or guard.breaker is None
        final = path[-1]
        submitted_at = now if final is State.SUBMITTED else None
        intent, effect = dumps(new.intent), dumps(new.effect)
        fast_params: dict[str, Any] = {}
        if fast:
            micros = guard.value_micros if guard is not None else None
            _, req = approval_request_write(new.scope, new.operation_id, new.fingerprint,
                                                  new.tier, guard, now)
            fast_params = {
                "scope": new.scope, "operation_id": new.operation_id, "op_key": new.op_key,
                "action": new.action, "fingerprint": new.fingerprint, "state": final.value,
                "intent": intent, "effect": effect, "tier": new.tier, "reason": new.reason,
                "policy_version": new.policy_version, "now": now, "submitted_at": submitted_at,
                "dispatch": final is State.SUBMITTED, "value_micros": micros,
                "approval": final is State.AWAITING_APPROVAL, "required": req[3],
                "expires_at": req[4], "proposers": req[5],
                **audit_params(lane, now, new.scope, new.operation_id, *_only(
                    path_audit(new, list(path), audit, None, intent_text=intent)))}

        def locks(conn: Conn) -> None:
            # The class's shared lock (a flip waits for us, and we see any flip committed
            # before us), then this key's lock; both are released by the commit. One
            # statement (_TWO_LOCKS nests them so the order is fixed).
            conn.execute(_TWO_LOCKS, (lock_key(self.schema, new.op_key, "op"),
                                      lock_key(self.schema, new.action)))

        what = f"insert {new.op_key}"
        result: Operation | None = None
        created = False
        if fast:
            # One round trip: BEGIN, the locks, the statement and COMMIT. If a control is
            # active the statement wrote nothing, and the full path runs in its own transaction.
            def first(conn: Conn) -> Cur:
                locks(conn)
                return conn.execute(_FAST_INSERT, fast_params)

            inserted, active = self._write_one_trip(first, what).fetchone() or (0, 0)
            if inserted:
                result, created = Operation(
                    scope=new.scope, operation_id=new.operation_id, action=new.action,
                    fingerprint=new.fingerprint, state=final, intent=new.intent,
                    effect=new.effect, tier=new.tier, reason=new.reason,
                    policy_version=new.policy_version, venue_id=None, detail=None,
                    created_at=now, updated_at=now, submitted_at=submitted_at, version=1), True
            elif not active:
                # The insert conflicted: the winner had committed (ON CONFLICT waits for it),
                # so a read after our empty commit sees its row.
                result = self._read(lambda conn: _select(conn, new.scope, new.operation_id),
                                    what)
                if result is None:  # conflict on op_key alone: cannot happen by construction
                    raise StoreError(f"key collision for {new.op_key!r} without a matching row")

        if result is None:
            # The full path: controls are active or a breaker watches. Two round trips, as
            # its guard decides further writes in the same transaction.
            def first_full(conn: Conn) -> Cur:
                locks(conn)
                return conn.execute("SELECT 1")

            result, created = self._write(
                first_full,
                lambda conn, _: self._insert_guarded(conn, new, path, lane, now, audit, guard),
                what)
        if created:
            return result, True
        if result.fingerprint != new.fingerprint:
            err = conflict(result, new.fingerprint)
            self.append_audit("idempotency_conflict", {"offered_fingerprint": new.fingerprint,
                              "stored_fingerprint": result.fingerprint}, now=now,
                              scope=new.scope, operation_id=new.operation_id)
            raise err
        return result, False

    def _insert_guarded(self, conn: Conn, new: NewOperation, path: Sequence[State], lane: int,
                        now: float, audit: Mapping[str, object] | None,
                        guard: DispatchGuard | None) -> tuple[Operation, bool]:
        """The full path, in the same transaction: controls are active or a breaker watches."""
        tx = PgTx(conn, self.schema, lane)
        with conn.pipeline():
            tx.open(shared_class=new.action, row=(new.scope, new.operation_id))
        existing = tx.collect()
        if existing is not None:
            return existing, False
        if guard is not None:
            guard.report = GuardReport()  # a retried attempt starts clean
        row, steps, held = guard_new_row(tx, new, list(path), guard, now=now)
        for kind, detail in path_audit(row, steps, audit, held):
            tx.audit(kind, detail, now, row.scope, row.operation_id)
        final = steps[-1]
        if final is State.AWAITING_APPROVAL:
            tx.writes.append(approval_request_write(row.scope, row.operation_id,
                                                    row.fingerprint, row.tier, guard, now))
        submitted_at = now if final is State.SUBMITTED else None
        intent, effect = dumps(row.intent), dumps(row.effect)
        tx.flush(main=(_INSERT_ROW, {
            "scope": row.scope, "operation_id": row.operation_id, "op_key": row.op_key,
            "action": row.action, "fingerprint": row.fingerprint, "state": final.value,
            "intent": intent, "effect": effect, "tier": row.tier, "reason": row.reason,
            "policy_version": row.policy_version, "detail": held, "now": now,
            "submitted_at": submitted_at}))
        return Operation(
            scope=row.scope, operation_id=row.operation_id, action=row.action,
            fingerprint=row.fingerprint, state=final, intent=json.loads(intent),
            effect=json.loads(effect), tier=row.tier, reason=row.reason,
            policy_version=row.policy_version, venue_id=None, detail=held,
            created_at=now, updated_at=now, submitted_at=submitted_at, version=1), True

    def transition(self, scope: str, operation_id: str, expected: State, target: State, *,
                   now: float, venue_id: str | None = None, detail: str | None = None,
                   audit: Mapping[str, object] | None = None,
                   guard: DispatchGuard | None = None,
                   current: Operation | None = None) -> Operation:
        target = check_transition(expected, target)
        event: dict[str, object] = {"from": expected.value, "state": target.value}
        if venue_id is not None:
            event["venue_id"] = venue_id
        if detail is not None:
            event["detail"] = detail
        if audit:
            event.update(audit)
        # A move to `submitted` takes its class's shared lock first (the same order as the
        # insert path: class, row, audit head). A row's action never changes, so reading it
        # ahead of the transaction is safe.
        action: str | None = None
        if target is State.SUBMITTED:
            action = guard.action if guard is not None else None
            if action is None:
                known = self.get(scope, operation_id)
                if known is None:
                    raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
                action = known.action
        lane = lane_for(scope, operation_id, LANES)
        if target is not State.SUBMITTED:
            known = current if (current is not None and current.scope == scope
                                and current.operation_id == operation_id) else None
            return self._fast_transition(scope, operation_id, expected, target, lane, now,
                                         venue_id, detail, event, known)
        holder: dict[str, PgTx] = {}

        def first(conn: Conn) -> Cur:
            tx = holder["tx"] = PgTx(conn, self.schema, lane)
            return tx.open(shared_class=action, row=(scope, operation_id), row_for_update=True)

        def then(conn: Conn, _: Cur) -> Operation | State | None:
            tx = holder["tx"]
            row = tx.collect()
            if row is None or row.state is not expected:
                return None if row is None else row.state
            to: State = target
            ev = dict(event)
            submitted_at: float | None = now if target is State.SUBMITTED else None
            if target is State.SUBMITTED:
                if guard is not None:
                    guard.report = GuardReport()
                if row.action != action:
                    raise StoreError(f"guard for {action!r} used on a {row.action!r} row")
                verdict = dispatch_verdict(tx, tx.controls(row.action), guard, now=now,
                                           op_key=row.op_key)
                if verdict == SHADOW:
                    to, submitted_at = State.SHADOWED, None
                    request = shadow_request(row.op_key, row.action, row.effect)
                    tx.record_shadow(scope, operation_id, row.action,
                                     (guard.correlation_id if guard else None) or operation_id,
                                     request, row.fingerprint, now)
                    ev.update(state=to.value, request=request)
                    if guard is not None:
                        guard.report.shadowed = True
                elif verdict is not None:
                    if guard is not None:
                        guard.report.held_by = verdict
                    tx.audit("dispatch_held", {"reason": verdict}, now, scope, operation_id)
                    tx.flush(main=("UPDATE operations SET detail = %s, updated_at = %s WHERE "
                                   "scope = %s AND operation_id = %s",
                                   (verdict, now, scope, operation_id)))
                    return replace(row, detail=verdict, updated_at=now)
            tx.audit("transition", ev, now, scope, operation_id)
            cur = tx.flush(main=(_TRANSITION_ROW, {
                "target": to.value, "now": now, "venue_id": venue_id, "detail": detail,
                "submitted_at": submitted_at, "scope": scope, "operation_id": operation_id,
                "expected": expected.value}))
            moved = cur.fetchone() if cur is not None else None
            if moved is None:  # unreachable: the row is locked FOR UPDATE in this transaction
                raise StoreError(f"operation {operation_id!r} changed under its row lock")
            return _row_to_operation(moved)

        outcome = self._write(first, then, f"transition {scope}:{operation_id}")
        if isinstance(outcome, Operation):
            return outcome
        if outcome is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        raise StaleState(f"operation {operation_id!r} is {outcome.value!r}, "
                         f"not {expected.value!r}")

    def _fast_transition(self, scope: str, operation_id: str, expected: State, target: State,
                         lane: int, now: float, venue_id: str | None, detail: str | None,
                         event: dict[str, object], known: Operation | None) -> Operation:
        """Compare-and-set plus its chained audit line in one statement (the receipt path)."""
        params = {
            "target": target.value, "now": now, "venue_id": venue_id, "detail": detail,
            "submitted_at": None, "scope": scope, "operation_id": operation_id,
            "expected": expected.value,
            **audit_params(lane, now, scope, operation_id, "transition", event),
        }
        query = _FAST_TRANSITION if known is None else _FAST_TRANSITION_CHANGED
        what = f"transition {scope}:{operation_id}"
        # One round trip: BEGIN, the compare-and-set and COMMIT. A miss wrote nothing; the
        # current state, read after that empty commit, only classifies the miss.
        row = self._write_one_trip(lambda conn: conn.execute(query, params), what,
                                   single=True).fetchone()
        if row is not None:
            if known is None:
                return _row_to_operation(row)
            return moved(known, target, now, row)
        current = self._read(lambda conn: conn.execute(
            "SELECT state FROM operations WHERE scope = %s AND operation_id = %s",
            (scope, operation_id)).fetchone(), what)
        if current is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        raise StaleState(f"operation {operation_id!r} is {current[0]!r}, "
                         f"not {expected.value!r}")

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        """Every move's compare-and-set, then each lane's chained audit entries: one transaction.

        Lock order, so that batches cannot deadlock with each other or with single
        transitions: every row first, in key order (one pipelined round trip), then the audit
        heads of the lanes with applied moves, in ascending lane order.
        """
        check_moves(moves)
        if not moves:
            return []
        order = sorted(range(len(moves)),
                       key=lambda i: (moves[i].scope, moves[i].operation_id))
        holder: dict[str, list[Cur]] = {}

        def first(conn: Conn) -> Cur:
            curs = holder["curs"] = [conn.execute(_CAS_ONE, {
                "target": moves[i].target.value, "now": now, "venue_id": moves[i].venue_id,
                "detail": moves[i].detail, "submitted_at": None, "scope": moves[i].scope,
                "operation_id": moves[i].operation_id, "expected": moves[i].expected.value})
                for i in order]
            return curs[-1]

        def then(conn: Conn, _: Cur) -> list[bool]:
            applied = [False] * len(moves)
            lanes: dict[int, list[int]] = {}
            for i, cur in zip(order, holder["curs"], strict=True):
                if cur.fetchone() is not None:
                    applied[i] = True
                    m = moves[i]
                    lanes.setdefault(lane_for(m.scope, m.operation_id, LANES), []).append(i)
            for lane in sorted(lanes):
                tx = PgTx(conn, self.schema, lane)
                with conn.pipeline():
                    tx.open()
                tx.collect()
                # In the caller's order within the lane, as N single transitions would be.
                for i in sorted(lanes[lane]):
                    m = moves[i]
                    tx.audit("transition", move_event(m), now, m.scope, m.operation_id)
                tx.flush()
            return applied

        return self._write(first, then, f"transition_many ({len(moves)} moves)")

    def get(self, scope: str, operation_id: str) -> Operation | None:
        return self._read(lambda conn: _select(conn, scope, operation_id), "get")

    def list_operations(self, *, state: State | None = None, action: str | None = None,
                        scope: str | None = None, older_than: float | None = None,
                        limit: int = 100) -> list[Operation]:
        where, args = operation_filters("%s", state=state, action=action, scope=scope,
                                        older_than=older_than)
        query = (f"SELECT {_OP_COLUMNS} FROM operations {where} "
                 "ORDER BY updated_at DESC, op_key LIMIT %s")
        rows = self._read(lambda conn: conn.execute(query.encode(), (*args, limit)).fetchall(),
                          "list_operations")
        return [_row_to_operation(r) for r in rows]

    def count_by_state(self) -> dict[tuple[str, str], int]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT action, state, count(*) FROM operations GROUP BY action, state").fetchall(),
            "count_by_state")
        return {(r[0], r[1]): int(r[2]) for r in rows}

    # --- reconciliation -----------------------------------------------------------------

    def page_entries(self, after: str | None, limit: int,
                     actions: Sequence[str] | None = None) -> list[LedgerEntry]:
        query = f"SELECT {_ENTRY_COLUMNS} FROM operations WHERE op_key > %s"
        args: list[Any] = [after or ""]
        if actions is not None:
            query += " AND action = ANY(%s)"
            args.append(list(actions))
        query += " ORDER BY op_key LIMIT %s"
        args.append(limit)
        rows = self._read(lambda conn: conn.execute(query.encode(), args).fetchall(),
                          "page_entries")
        return [_row_to_entry(r) for r in rows]

    def lease_uncertain(self, owner: str, *, now: float, lease_seconds: float,
                        limit: int) -> list[LedgerEntry]:
        params = {"owner": owner, "now": now, "until": now + lease_seconds, "limit": limit}
        rows = self._write(lambda conn: conn.execute(_LEASE, params),
                           lambda conn, cur: cur.fetchall(), "lease_uncertain")
        return sorted((_row_to_entry(r) for r in rows), key=lambda e: e.op_key)

    def record_divergence(self, kind: str, op_key: str, venue_ids: Sequence[str],
                          ledger_state: str | None, *, now: float) -> bool:
        scope, _, operation_id = op_key.partition(":")
        params = {"kind": kind, "op_key": op_key, "venue_ids": dumps(list(venue_ids)),
                  "ledger_state": ledger_state, "now": now}
        holder: dict[str, PgTx] = {}

        def first(conn: Conn) -> Cur:
            tx = holder["tx"] = PgTx(conn, self.schema,
                                     lane_for(scope or None, operation_id or None, LANES))
            tx.open()
            return conn.execute(_DIVERGENCE, params)

        def then(conn: Conn, cur: Cur) -> bool:
            tx = holder["tx"]
            tx.collect()
            if cur.fetchone() is None:
                return False
            tx.audit("divergence", {"kind": kind, "venue_ids": list(venue_ids),
                                    "ledger_state": ledger_state}, now, scope or None,
                     operation_id or None)
            tx.flush()
            return True

        return self._write(first, then, f"record_divergence {kind} {op_key}")

    def list_divergences(self, limit: int = 1000) -> list[Divergence]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT kind, op_key, venue_ids, ledger_state, first_seen FROM divergences "
            "ORDER BY id LIMIT %s", (limit,)).fetchall(), "list_divergences")
        return [Divergence(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4]) for r in rows]

    @contextmanager
    def _sweep_lock(self) -> Iterator[bool]:
        # Session advisory locks are re-entrant per session, so threads of this process are kept
        # apart by a mutex first; other processes and hosts by the lock itself.
        if not self._sweep_mutex.acquire(blocking=False):
            yield False
            return
        try:
            conn = self._lock_connection()
            key = _lock_key("sweep", self.schema)
            try:
                row = conn.execute(sql.SQL("SELECT pg_try_advisory_lock({})").format(key)
                                   ).fetchone()
            except psycopg.Error as exc:
                self._drop_lock_connection()
                raise StoreError(f"sweep lock: {type(exc).__name__}: {_first_line(exc)}") from exc
            acquired = bool(row and row[0])
            try:
                yield acquired
            finally:
                if acquired:
                    self._unlock(conn, key)
        finally:
            self._sweep_mutex.release()

    def _unlock(self, conn: Conn, key: sql.Composed) -> None:
        try:
            conn.execute(sql.SQL("SELECT pg_advisory_unlock({})").format(key))
        except psycopg.Error as exc:
            # The session is gone, and a session lock dies with its session: nothing is held.
            # Dropping the connection guarantees that even if the error was something else.
            log.warning("sweep unlock failed (%s); closing the lock connection",
                        type(exc).__name__)
            self._drop_lock_connection()

    def _lock_connection(self) -> Conn:
        """A connection outside the pool: a session lock must never leak into pooled sessions."""
        conn = self._lock_conn
        if conn is None or conn.closed or conn.broken:
            try:
                conn = psycopg.connect(self._conninfo, **self._connect_kwargs)
            except psycopg.Error as exc:
                raise StoreError(f"sweep lock: cannot connect: {type(exc).__name__}") from exc
            self._lock_conn = conn
        return conn

    def _drop_lock_connection(self) -> None:
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            conn.close()

    def sweep_lock(self, holder: str, *, now: float, ttl: float) -> AbstractContextManager[bool]:
        # ``holder``, ``now`` and ``ttl`` serve stores that emulate the lock with a table; a
        # session lock needs no expiry: it is released when its holder's connection ends.
        return self._sweep_lock()

    # --- audit --------------------------------------------------------------------------

    def append_audit(self, kind: str, detail: Mapping[str, object], *, now: float,
                     scope: str | None = None, operation_id: str | None = None) -> None:
        def work(tx: PgTx, _: Operation | None) -> None:
            tx.audit(kind, detail, now, scope, operation_id)

        self._in_tx(work, f"audit {kind}", lane=lane_for(scope, operation_id, LANES))

    def iter_audit(self, after_seq: int = 0) -> Iterator[AuditEvent]:
        def page(after: int) -> list[tuple[Any, ...]]:
            return self._read(lambda conn: conn.execute(
                "SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                "WHERE seq > %s ORDER BY seq LIMIT 1000", (after,)).fetchall(), "iter_audit")

        last = after_seq
        while True:
            rows = page(last)
            for r in rows:
                yield AuditEvent(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]))
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def close(self) -> None:
        with self._sweep_mutex:
            self._drop_lock_connection()
        self._pool.close()


def _select(conn: Conn, scope: str, operation_id: str) -> Operation | None:
    row = conn.execute(f"SELECT {_OP_COLUMNS} FROM operations WHERE scope = %s AND "
                       "operation_id = %s".encode(), (scope, operation_id)).fetchone()
    return None if row is None else _row_to_operation(row)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]


def drop_schema(url: str, schema: str) -> None:
    """Drop a ledger schema and everything in it (tests, demos, decommissioning)."""
    conninfo, _ = split_schema(url)
    ident = sql.Identifier(check_schema_name(schema))
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
    except psycopg.Error as exc:
        raise StoreError(f"drop schema {schema!r}: {type(exc).__name__}: "
                         f"{_first_line(exc)}") from exc
