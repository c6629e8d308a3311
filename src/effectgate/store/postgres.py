"""The shared ledger: PostgreSQL, for many executor processes on many hosts sharing one schema.

The primary key on ``(scope, operation_id)`` makes the first insert win (``INSERT ... ON
CONFLICT DO NOTHING``), every transition is ``UPDATE ... WHERE state = expected`` with its row
count checked, and a row's audit entries are written in the same transaction (data-modifying
CTEs on the hot path), so they commit or vanish together. Only what is PostgreSQL's own lives
here: the hot path's one-round-trip statements, ``_run`` (locks and the audit lane of one
transaction), leases with ``SKIP LOCKED``, the advisory sweep lock and the schema. Connections
and commit classification are :mod:`effectgate.store._postgres_conn`; the ledger logic is
:class:`~effectgate.store._ledger.SQLStore`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql as psql

from effectgate._core.chain import lane_for
from effectgate._core.controls import DispatchGuard
from effectgate._core.states import State
from effectgate.errors import StoreError
from effectgate.store import _op_sql as ops
from effectgate.store import _postgres_conn as pgc
from effectgate.store import _postgres_tx as pgtx
from effectgate.store import _sql as sql
from effectgate.store._attempts import read_twice
from effectgate.store._hooks import NO_HOLD, Hold
from effectgate.store._journal import journal_new, plain_done, plain_journal, plain_passes
from effectgate.store._ledger import SQLStore, Work
from effectgate.store._postgres_conn import PgConnections, drop_schema, split_schema
from effectgate.store._postgres_schema import LANES, MIGRATIONS, TYPES
from effectgate.store._postgres_tx import PgTx, audit_params, pg_sql
from effectgate.store._postgres_wire import Prepared, text_row
from effectgate.store._schema import migrate
from effectgate.store._shared_trips import SharedWrite, TripsOf
from effectgate.store.base import (
    Journal,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
    check_moves,
    moved,
)

__all__ = ["MIGRATIONS", "PostgresStore", "drop_schema", "split_schema"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]

_CLASS_ACTIVE = (
    f"SELECT 1 FROM class_controls WHERE action = %(action)s AND ({ops.CONTROLS_ACTIVE})"
)

# The hot path: a class with no active control and no breaker journals its row, its window
# charge and its chained audit lines in ONE statement, which also checks (after the
# class's shared lock) that no control is active; if one is, nothing is written and the
# transaction continues on the full path.
_FAST_INSERT = f"""
WITH RECURSIVE
ctl AS ({_CLASS_ACTIVE}),
ins AS (
    INSERT INTO operations ({ops.ROW_COLUMNS})
    SELECT {ops.named(ops.ROW_SLOTS)}
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
           %(expires_at)s::float8, %(proposers)s, %(release)s FROM ins WHERE %(approval)s
),
{pgtx.chain_ctes("ins")}
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM ctl)
"""

# The class's shared lock, then the key's exclusive one, in that order (every writer takes them
# so): the subquery's lock is taken before the outer select list is evaluated.
_TWO_LOCKS = (
    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)) FROM "
    "(SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))) AS class_lock"
)


def _fast_transition_sql(returning: str) -> str:
    return f"""
WITH RECURSIVE
upd AS ({pgtx.cas_sql(returning)}
),
{pgtx.chain_ctes("upd")}
SELECT {returning} FROM upd
"""


_FAST_TRANSITION = _fast_transition_sql(sql.OP_COLUMNS)
# When the caller holds the row (the receipt path), only what the update changed comes back.
_FAST_TRANSITION_CHANGED = _fast_transition_sql(ops.CHANGED_COLUMNS)
# The hot path's statements, prepared by name on the hot connections (store._postgres_wire).
_P_TWO_LOCKS = Prepared.positional("eg_two_locks", _TWO_LOCKS)
_P_FAST_INSERT = Prepared.named("eg_fast_insert", _FAST_INSERT)
_P_FAST_TRANSITION_CHANGED = Prepared.named("eg_fast_receipt", _FAST_TRANSITION_CHANGED)
_P_ROW_LOCK = Prepared.positional("eg_row_lock", f"{pg_sql(sql.SELECT_OP)} FOR UPDATE")
# One compare-and-set of a batch (transition_many): the same update as a single transition.
_CAS_ONE = pgtx.cas_sql("1")


@functools.cache
def _read_statement(query: str) -> Prepared:
    """A per-request read (``_hot_rows``), prepared under a name its text decides."""
    return Prepared.positional(
        f"eg_read_{hashlib.sha256(query.encode()).hexdigest()[:16]}", pg_sql(query)
    )


# Replicas skip the rows another one is claiming (store/_op_sql.py).
_LEASE = ops.named(ops.lease_uncertain(" FOR UPDATE SKIP LOCKED"))


class PostgresStore(PgConnections, SQLStore):
    """The :class:`~effectgate.store.roles.Store` on one PostgreSQL schema.

    ``statement_timeout_ms`` and ``lock_timeout_ms`` bound every statement on the server;
    ``pool_timeout`` bounds the wait for a pooled connection and ``connect_timeout`` a new one,
    so a stuck or unreachable database fails a call (StoreError) instead of hanging it.
    ``synchronous_commit`` is ``on`` by default: a commit that returned survives a crash.
    """

    _claim_lock = " FOR UPDATE SKIP LOCKED"  # replicas share released rows (ReleaseRoles)

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"  # never the URL: it may hold a password

    _trips = TripsOf("_hot", limit=2)  # group commit of the hot path: 2 trips in flight
    # --- the hooks of SQLStore ------------------------------------------------------------

    def _rows(
        self, query: str, args: Sequence[Any] = (), what: str = "read"
    ) -> list[Sequence[Any]]:
        text = pg_sql(query)
        return self._read(lambda conn: conn.execute(text, args).fetchall(), what)

    def _hot_rows(self, query: str, args: Sequence[str], what: str) -> list[Sequence[Any]]:
        """A per-request read (the token lookup) prepared on a hot connection: no pool checkout,
        no cursor."""
        res = read_twice(lambda: self._hot([(_read_statement(query), args)], what)[0])
        return [text_row(res, r) for r in range(res.ntuples)]

    def _run(self, work: Work[T], what: str, hold: Hold = NO_HOLD) -> T:
        """One transaction: the class lock, the row FOR UPDATE, then the audit lane's head of
        ``hold.key`` (operator actions: lane 0); ``work``'s writes and entries go at COMMIT."""
        lane = lane_for(hold.key[0], hold.key[1], LANES)
        holder: dict[str, PgTx] = {}

        def first(conn: Conn) -> Cur:
            tx = holder["tx"] = PgTx(conn, self.schema, lane)
            return tx.open(hold)

        def then(conn: Conn, _: Cur) -> T:
            tx = holder["tx"]
            result = work(tx, tx.collect())
            tx.flush()
            return result

        return self._write(first, then, what)

    def _journal(
        self,
        new: NewOperation,
        path: list[State],
        now: float,
        audit: Mapping[str, object] | None,
        guard: DispatchGuard | None,
    ) -> Journal:
        # A breaker's windows or a token's recheck (DispatchGuard.plain): the full path.
        if plain_passes(guard):
            done = self._journal_fast(new, path, now, audit, guard)
            if done is not None:
                return done

        # The full path: controls are active or a breaker watches. Two round trips, as its
        # guard decides further writes in the same transaction.
        def first_full(conn: Conn) -> Cur:
            # The class's shared lock (a flip waits for us, and we see any flip committed
            # before us), then this key's lock; both are released by the commit. One
            # statement (_TWO_LOCKS nests them so the order is fixed).
            conn.execute(_TWO_LOCKS, self._journal_locks(new))
            return conn.execute("SELECT 1")

        def then(conn: Conn, _: Cur) -> Journal:
            tx = PgTx(conn, self.schema, lane_for(new.scope, new.operation_id, LANES))
            with conn.pipeline():
                # The key's lock is held already: a plain read of the row suffices.
                tx.open(
                    Hold(shared_class=new.action, row=(new.scope, new.operation_id)), lock_row=False
                )
            existing = tx.collect()
            if existing is not None:
                return Journal(existing, False)
            done = journal_new(tx, new, path, guard, audit, now=now)
            tx.flush()
            return done

        return self._write(first_full, then, f"insert {new.op_key}")

    def _journal_locks(self, new: NewOperation) -> tuple[str, str]:
        """_TWO_LOCKS's keys for journalling ``new``: the operation key's, the class's."""
        return pgtx.lock_key(self.schema, new.op_key, "op"), pgtx.lock_key(self.schema, new.action)

    def _journal_fast(
        self,
        new: NewOperation,
        path: list[State],
        now: float,
        audit: Mapping[str, object] | None,
        guard: DispatchGuard | None,
    ) -> Journal | None:
        """One round trip: locks, statement, commit. None: a control is active, none written."""
        plain = plain_journal(new, path, guard, audit, now=now)
        lane = lane_for(new.scope, new.operation_id, LANES)
        params = {
            **ops.row_params(new, plain.final, now, plain.intent),
            "dispatch": plain.dispatch,
            "value_micros": plain.value_micros,
            **ops.request_params(plain.request),
            **audit_params(lane, now, new.scope, new.operation_id, "transition", plain.entry),
        }

        locks, key = self._journal_locks(new), (new.scope, new.operation_id)
        lock, main, order = (_P_TWO_LOCKS, locks), (_P_FAST_INSERT, params), ("k", *locks[::-1])
        also = (_P_ROW_LOCK, key), ("r", *key)  # a shared trip's: its row, before any lane head
        res = self._trips.submit(
            SharedWrite(f"insert {new.op_key}", (lock, main), lock, order, main, lane, *also)
        )
        inserted, active = (int(v or 0) for v in text_row(res, 0))
        if inserted:
            return plain_done(new, plain, now)
        if active:
            return None
        # The insert conflicted: the winner had committed (ON CONFLICT waits for it), so a
        # read after our empty commit sees its row.
        existing = self.get(new.scope, new.operation_id)
        if existing is None:  # conflict on op_key alone: cannot happen by construction
            raise StoreError(f"key collision for {new.op_key!r} without a matching row")
        return Journal(existing, False)

    def _transition(
        self, move: Move, now: float, event: Mapping[str, object], known: Operation | None
    ) -> Operation | None:
        """Compare-and-set plus its chained audit entry in one statement (the receipt path)."""
        scope, operation_id = move.scope, move.operation_id
        lane = lane_for(scope, operation_id, LANES)
        params = {
            **ops.move_params(move, now),
            **audit_params(lane, now, scope, operation_id, "transition", event),
        }
        what = f"transition {scope}:{operation_id}"
        # One round trip: the compare-and-set and its commit. A miss wrote nothing.
        if known is None:
            row = self._write_one_trip(
                lambda conn: conn.execute(_FAST_TRANSITION, params), what, single=True
            ).fetchone()
            return None if row is None else sql.operation_from_row(row)
        main, lock = (_P_FAST_TRANSITION_CHANGED, params), (_P_ROW_LOCK, (scope, operation_id))
        write = SharedWrite(what, (main,), lock, ("r", scope, operation_id), main, lane)
        res = self._trips.submit(write)
        if not res.ntuples:
            return None
        # Text results: (version, venue_id, detail, submitted_at).
        version, venue, held, sent = text_row(res, 0)
        changed = (int(version or 0), venue, held, None if sent is None else float(sent))
        return moved(known, move.target, now, changed)

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        """Every move's compare-and-set, then each lane's chained audit entries: one transaction.

        Lock order, so that batches cannot deadlock with each other or with single
        transitions: every row first, in key order (one pipelined round trip), then the audit
        heads of the lanes with applied moves, in ascending lane order.
        """
        check_moves(moves)
        if not moves:
            return []
        order = sorted(range(len(moves)), key=lambda i: (moves[i].scope, moves[i].operation_id))
        holder: dict[str, list[Cur]] = {}

        def first(conn: Conn) -> Cur:
            curs = holder["curs"] = [
                conn.execute(_CAS_ONE, ops.move_params(moves[i], now)) for i in order
            ]
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
                    tx.audit("transition", m.event(), now, m.scope, m.operation_id)
                tx.flush()
            return applied

        return self._write(first, then, f"transition_many ({len(moves)} moves)")

    # --- schema, leases, locks, heads: PostgreSQL's own ------------------------------------

    def migrate(self) -> None:
        """Apply pending migrations under a transaction advisory lock (one process at a time)."""
        ident = psql.Identifier(self.schema)

        def first(conn: Conn) -> Cur:
            return conn.execute(
                psql.SQL("SELECT pg_advisory_xact_lock({})").format(
                    pgc.lock_key_sql("migrate", self.schema)
                )
            )

        def then(conn: Conn, _: Cur) -> None:
            conn.execute(psql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            migrate(
                lambda q, args=(): conn.execute(pg_sql(q), args),
                lambda ddl: conn.execute(ddl.encode()),
                MIGRATIONS,
                TYPES,
            )

        self._write(first, then, "migrate")

    def lease_uncertain(
        self, owner: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[LedgerEntry]:
        params = {"owner": owner, "now": now, "until": now + lease_seconds, "limit": limit}
        rows = self._write(
            lambda conn: conn.execute(_LEASE, params),
            lambda conn, cur: cur.fetchall(),
            "lease_uncertain",
        )
        return sorted((sql.entry_from_row(r) for r in rows), key=lambda e: e.op_key)

    @contextmanager
    def _sweep_lock(self) -> Iterator[bool]:
        # Session advisory locks are re-entrant per session, so threads of this process are kept
        # apart by a mutex first; other processes and hosts by the lock itself.
        if not self._sweep_mutex.acquire(blocking=False):
            yield False
            return
        try:
            conn = self._lock_connection()
            key = pgc.lock_key_sql("sweep", self.schema)
            try:
                row = conn.execute(
                    psql.SQL("SELECT pg_try_advisory_lock({})").format(key)
                ).fetchone()
            except psycopg.Error as exc:
                self._drop_lock_connection()
                raise StoreError(
                    f"sweep lock: {type(exc).__name__}: {pgc.first_line(exc)}"
                ) from exc
            acquired = bool(row and row[0])
            try:
                yield acquired
            finally:
                if acquired:
                    self._unlock(conn, key)
        finally:
            self._sweep_mutex.release()

    def sweep_lock(self, holder: str, *, now: float, ttl: float) -> AbstractContextManager[bool]:
        # ``holder``, ``now`` and ``ttl`` serve stores that emulate the lock with a table; a
        # session lock needs no expiry: it is released when its holder's connection ends.
        return self._sweep_lock()

    def close(self) -> None:
        with self._sweep_mutex:
            self._drop_lock_connection()
        self._lane.close()
        self._pool.close()
