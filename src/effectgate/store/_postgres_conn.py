"""PostgreSQL connections for the shared ledger: psycopg 3, a ``psycopg_pool`` pool, and how a
write is classified by whether its ``COMMIT`` may have been sent.

Every write is an explicit transaction, classified by whether ``COMMIT`` may have been sent: a
failure before it changed nothing (:class:`StoreError`, retried once on a fresh connection when
the connection itself failed); a lost connection once ``COMMIT`` may be in flight may or may not
have committed (:class:`CommitOutcomeUnknown`), and callers treat the operation as uncertain
instead of guessing. The hot path (journalling a new row, a receipt's compare-and-set) sends
its statements in ONE round trip, as the implicit transaction the server commits at the
pipeline's Sync, or a single autocommit statement (:meth:`_write_one_trip`): a server error
aborts it, so nothing is written; a lost connection in flight is indeterminate. Writes whose
statement result decides further writes keep two round trips (:meth:`_write`): ``BEGIN`` +
statement, then ``COMMIT``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq.abc import PGresult
from psycopg_pool import ConnectionPool, PoolTimeout

from effectgate.errors import ConfigError, LedgerNotFound, StoreError
from effectgate.store._attempts import Driver, commit, one_trip, retried, trip_failed
from effectgate.store._conn_stack import ConnStack
from effectgate.store._outcome import first_line, no_connection, not_written
from effectgate.store._postgres_wire import Prepared, TripError, reusable, trip
from effectgate.store.base import check_schema_name, split_schema, store_schema

__all__ = ["PgConnections", "drop_schema", "first_line", "lock_key_sql", "log", "split_schema"]

log = logging.getLogger("effectgate.store.postgres")

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]

# "off" lets a commit return before its WAL is flushed: for benchmarks and throwaway ledgers only,
# like SQLite's synchronous=OFF. Anything but "on" (or a replica-waiting level) breaks invariant 3.
_SYNC_COMMIT = frozenset({"on", "off", "local", "remote_write", "remote_apply"})


_IDLE = psycopg.pq.TransactionStatus.IDLE


def _connection_lost(exc: BaseException, conn: Conn | None) -> bool:
    """True when the failure is the connection (or the server going away), not a SQL answer."""
    if conn is not None and conn.broken:
        return True
    state = getattr(exc, "sqlstate", None)
    # No SQLSTATE: the client lost the socket. 08xxx: connection exception. 57P0x: the server is
    # shutting down or crashed (``pg_ctl stop -m immediate`` sends 57P01/57P02 mid-statement).
    return state is None or state.startswith(("08", "57P"))


def _check_idle(conn: Conn, what: str) -> None:
    # The implicit transaction needs an autocommit connection outside any transaction: inside
    # one, the Sync would commit nothing.
    if not conn.autocommit or conn.info.transaction_status != _IDLE:
        raise StoreError(
            f"{what}: pooled connection is not idle in autocommit mode; nothing written"
        )


def lock_key_sql(purpose: str, schema: str) -> sql.Composed:
    # 64-bit keys derived from the schema name, so ledgers in one database never share a lock.
    return sql.SQL("hashtextextended({}, 0)").format(sql.Literal(f"effectgate.{purpose}:{schema}"))


class PgConnections:
    """A PostgreSQL schema's pool, its sessions' settings, and the three ways a call uses a
    connection (see the module docstring); the options are :class:`PostgresStore`'s."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 4,
        statement_timeout_ms: int = 5000,
        lock_timeout_ms: int = 2000,
        idle_in_transaction_timeout_ms: int = 30_000,
        connect_timeout: float = 5.0,
        pool_timeout: float = 5.0,
        synchronous_commit: str = "on",
        migrate: bool = True,
        create: bool = True,
    ) -> None:
        conninfo, self.schema = store_schema(url, schema)
        for name, value in (
            ("statement_timeout_ms", statement_timeout_ms),
            ("lock_timeout_ms", lock_timeout_ms),
            ("idle_in_transaction_timeout_ms", idle_in_transaction_timeout_ms),
        ):
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
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        self._conninfo = conninfo
        # The hot path's own connections (journal, receipt): no pool checkout per commit.
        self._lane = ConnStack(self._hot_connect, max_size, reusable)
        self._sweep_mutex = threading.Lock()
        self._lock_conn: Conn | None = None
        self._pool = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._connect_kwargs,
            configure=self._configure,
            timeout=self._pool_timeout,
            open=False,
            name=f"effectgate-{self.schema}",
        )
        self._driver = Driver(
            lambda: self._pool.connection(timeout=self._pool_timeout),
            psycopg.Error,
            PoolTimeout,
            self._pool_timeout,
            _connection_lost,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout + self._pool_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to PostgreSQL for schema {self.schema!r}") from exc
        if not create and not self._read(
            lambda conn: conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                "table_name = 'schema_migrations'",
                (self.schema,),
            ).fetchone(),
            "open",
        ):
            self._pool.close()
            raise LedgerNotFound(
                f"no effectgate ledger in PostgreSQL schema {self.schema!r} "
                "(never migrated); create it with 'effectgate init' (or open "
                "it with create=True)"
            )
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        raise NotImplementedError

    def _configure(self, conn: Conn) -> None:
        """Session settings for every new pooled connection (one round trip, at connect)."""
        names = list(self._settings)
        conn.execute(
            "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in names),
            [v for n in names for v in (n, self._settings[n])],
        )

    # --- transactions -------------------------------------------------------------------

    def _write(self, first: Callable[[Conn], Cur], then: Callable[[Conn, Cur], T], what: str) -> T:
        """Run one explicit transaction; classify failures by whether COMMIT was sent.

        ``first`` queues the main statement in pipeline mode, so ``BEGIN`` and it travel in one
        round trip; ``then`` reads its result (and may run more statements, off the hot path);
        ``COMMIT`` follows as its own message. A connection failure before COMMIT changed
        nothing and is retried once on a fresh connection: every statement here is idempotent
        or compare-and-set, so the retry cannot double anything.
        """

        def attempt(conn: Conn) -> T:
            with conn.pipeline():
                conn.execute("BEGIN")
                cur = first(conn)
            result = then(conn, cur)
            commit(self._driver, conn, what, lambda: conn.execute("COMMIT"))
            return result

        before = "failed before commit"
        return retried(self._driver, attempt, what, lambda e: not_written(what, before, e), log)

    def _write_one_trip(
        self, first: Callable[[Conn], Cur], what: str, *, single: bool = False
    ) -> Cur:
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
        after the server committed at the Sync: :class:`CommitOutcomeUnknown`, never a retry.
        """

        def attempt(conn: Conn) -> Cur:
            _check_idle(conn, what)
            if single:
                # One statement is its own implicit transaction: no pipeline needed.
                return first(conn)
            # psycopg sends the Sync on leaving the block even if ``first`` raised, so
            # whatever it queued before raising commits: ``first`` queues the write
            # last, after statements that write nothing (the locks).
            with conn.pipeline():
                return first(conn)

        return one_trip(self._driver, attempt, what)

    def _hot_connect(self) -> Conn:
        """A hot-path connection with the session settings as startup options: no round trip
        after the connect (the pool's connections run :meth:`_configure` instead)."""
        # In ``options`` a backslash escapes the next character ("read committed").
        opts = " ".join(
            f"-c {name}=" + value.replace("\\", "\\\\").replace(" ", "\\ ")
            for name, value in self._settings.items()
        )
        mine = conninfo_to_dict(self._conninfo).get("options")
        options = f"{mine} {opts}" if mine else opts
        return psycopg.connect(self._conninfo, **self._connect_kwargs, options=options)

    def _hot(self, statements: Sequence[tuple[Prepared, Any]], what: str) -> list[PGresult]:
        """``statements`` as ONE implicit transaction in one round trip, their results (see
        :func:`~effectgate.store._postgres_wire.trip`), classified like
        :meth:`_write_one_trip`: a server error wrote nothing (:class:`StoreError`); a lost
        connection may have committed (:class:`CommitOutcomeUnknown`), never retried."""
        try:
            conn = self._lane.take()
        except psycopg.Error as exc:
            raise StoreError(f"{what}: cannot connect, nothing written: {first_line(exc)}") from exc
        try:
            if conn is not None:
                return self._lane.use(conn, lambda hot: trip(hot, statements))
            # Every hot connection is busy (more threads than the lane holds): the pool's.
            with self._pool.connection(timeout=self._pool_timeout) as pooled:
                _check_idle(pooled, what)
                try:
                    return trip(pooled, statements)
                except BaseException:
                    pooled.close()  # never hand a half-sent or half-read pipeline back
                    raise
        except PoolTimeout as exc:
            raise no_connection(what, self._pool_timeout) from exc
        except TripError as exc:
            lost = _connection_lost(exc.error, exc.conn)
            raise trip_failed(what, exc.error, lost) from exc.error

    def _read(self, work: Callable[[Conn], T], what: str) -> T:
        """One autocommit read; a connection failure is retried once (reads change nothing)."""
        return retried(
            self._driver,
            work,
            what,
            lambda exc: StoreError(f"{what} failed: {type(exc).__name__}: {first_line(exc)}"),
        )

    def _unlock(self, conn: Conn, key: sql.Composed) -> None:
        try:
            conn.execute(sql.SQL("SELECT pg_advisory_unlock({})").format(key))
        except psycopg.Error as exc:
            # The session is gone, and a session lock dies with its session: nothing is held.
            # Dropping the connection guarantees that even if the error was something else.
            log.warning("sweep unlock failed (%s); closing the lock connection", type(exc).__name__)
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


def drop_schema(url: str, schema: str) -> None:
    """Drop a ledger schema and everything in it (tests, demos, decommissioning)."""
    conninfo, _ = split_schema(url)
    ident = sql.Identifier(check_schema_name(schema))
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
    except psycopg.Error as exc:
        raise StoreError(
            f"drop schema {schema!r}: {type(exc).__name__}: {first_line(exc)}"
        ) from exc
