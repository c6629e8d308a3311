"""Store failures surface as the store's own errors; late receipts; the sweep lock; upgrades.

Found by an independent review of the hot write path: a raw ``sqlite3`` error (a lock held past
``busy_timeout``) escaped as ``sqlite3.OperationalError``, so the gate's "receipt not
journalled, leave it uncertain" branch never ran; a receipt that lost its compare-and-set to the
reconciler was dropped and the stale pre-call row returned; the SQLite sweep lock was
re-entrant for one holder.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal

import pytest

from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.states import State
from effectgate._evidence.audit import verify_store
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._execute.executor import Gate
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import StoreError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store._sqlite_schema import MIGRATIONS
from effectgate.store.base import NewOperation
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore

INTENT = dict(EXAMPLE_ORDER)
POLICY = PolicySet({"submit_order": LimitPolicy(Decimal("1000000"))})


def _gate(store: Store, adapter: PaperAdapter) -> Gate:
    return Gate(
        store=store, registry=default_registry(), adapters={adapter.name: adapter}, policy=POLICY
    )


def _new(op: str = "op-1") -> NewOperation:
    return NewOperation(
        scope="default",
        operation_id=op,
        action="submit_order",
        fingerprint="f" * 64,
        intent={"q": "1"},
        effect={"q": "1"},
        tier="validate",
        reason="ok",
        policy_version="t",
    )


AUTO = [State.PROPOSED, State.VALIDATED, State.SUBMITTED]


class _Locker:
    """Another process's connection holding SQLite's write lock."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5)

    def hold(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")


class TestSQLiteErrorsAreStoreErrors:
    def test_lock_past_busy_timeout_is_a_store_error(self, tmp_path) -> None:
        """Invariant 3 (error tree): `database is locked` is a StoreError, and the shared
        connection is left outside any transaction, usable once the lock is gone."""
        path = str(tmp_path / "ledger.db")
        store = SQLiteStore(path, busy_timeout_ms=20)
        locker = _Locker(path)
        locker.hold()
        with pytest.raises(StoreError) as caught:
            store.insert_operation(_new(), AUTO, now=1.0)
        assert not isinstance(caught.value, sqlite3.Error)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(StoreError):
            store.append_audit("note", {"n": 1}, now=1.0)
        assert not store._conn.in_transaction
        locker.release()
        row, created = store.insert_operation(_new(), AUTO, now=2.0)
        assert created and row.state is State.SUBMITTED
        store.close()

    def test_unopenable_file_is_a_store_error(self, tmp_path) -> None:
        with pytest.raises(StoreError):
            SQLiteStore(str(tmp_path / "missing-dir" / "ledger.db"))

    def test_receipt_lost_to_a_lock_leaves_the_row_uncertain(self, tmp_path) -> None:
        """Invariant 3: the venue applied the effect, the receipt cannot be journalled (lock
        held past busy_timeout): the gate returns the `submitted` row instead of raising, and
        never dispatches it again."""
        path = str(tmp_path / "ledger.db")
        store = SQLiteStore(path, busy_timeout_ms=20)
        locker = _Locker(path)

        class LockingAdapter(PaperAdapter):
            def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
                receipt = super().execute(request, timeout=timeout)
                locker.hold()  # another writer takes the lock while the call is in flight
                return receipt

        venue = PaperVenue()
        gate = _gate(store, LockingAdapter(venue))
        row = gate.submit("submit_order", "op-1", INTENT)
        locker.release()
        assert row.state is State.SUBMITTED and venue.calls == 1
        assert store.get("default", "op-1").state is State.SUBMITTED  # type: ignore[union-attr]
        again = gate.submit("submit_order", "op-1", INTENT)
        assert again.replayed and venue.calls == 1
        store.close()


def test_late_receipt_returns_the_current_row_and_is_audited(store: Store) -> None:
    """Invariant 1/8: the reconciler settled the row while the venue call was in flight. The
    gate returns the row as it is now (not the stale `submitted` copy) and the receipt it got
    is recorded in the audit log, with the venue's id."""

    class RacingAdapter(PaperAdapter):
        def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
            receipt = super().execute(request, timeout=timeout)
            # What the reconciler does meanwhile (absent past the horizon, written off).
            store.transition(
                "default",
                "op-1",
                State.SUBMITTED,
                State.FAILED,
                now=5.0,
                detail="absent past horizon",
            )
            return receipt

    venue = PaperVenue()
    gate = _gate(store, RacingAdapter(venue))
    row = gate.submit("submit_order", "op-1", INTENT)
    assert row.state is State.FAILED and row.detail == "absent past horizon"
    assert venue.calls == 1
    (late,) = [e for e in store.iter_audit() if e.kind == "late_receipt"]
    assert late.operation_id == "op-1" and late.detail["outcome"] == "applied"
    assert late.detail["venue_id"] and late.detail["venue_id"].startswith("V-")
    assert verify_store(store).ok


def test_sweep_lock_is_not_reentrant(store: Store) -> None:
    """Two sweeps of one service (same holder) never run at once; the inner refusal does not
    release the outer's lock."""
    with store.sweep_lock("svc", now=1.0, ttl=60) as outer:
        assert outer
        with store.sweep_lock("svc", now=2.0, ttl=60) as inner:
            assert not inner
        with store.sweep_lock("other", now=3.0, ttl=60) as third:
            assert not third  # still held by the outer sweep
    with store.sweep_lock("other", now=4.0, ttl=60) as after:
        assert after


def test_receipt_built_from_the_callers_row_matches_a_read(store: Store) -> None:
    """The receipt path returns the row without re-reading it: same as what a read gives."""
    row, _ = store.insert_operation(_new(), AUTO, now=1.0)
    moved = store.transition(
        "default", "op-1", State.SUBMITTED, State.ACKNOWLEDGED, now=2.0, venue_id="V-9", current=row
    )
    assert moved == store.get("default", "op-1")
    assert moved.version == 2 and moved.venue_id == "V-9" and moved.submitted_at == 1.0


def _old_chained_audit(conn: sqlite3.Connection, at: float, kind: str, text: str) -> None:
    """How schema 2's code appended an entry: read the head, insert, upsert the head."""
    from effectgate._evidence.audit import GENESIS, chain_hash, content_digest

    head = conn.execute("SELECT seq, hash FROM audit_heads WHERE lane = 0").fetchone()
    seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
    entry_hash = chain_hash(prev, content_digest(0, at, "default", "old", kind, text))
    conn.execute(
        "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
        "prev_hash, hash) VALUES (?,?,'default','old',?,?,0,?,?)",
        (seq, at, kind, text, prev, entry_hash),
    )
    conn.execute(
        "INSERT INTO audit_heads (lane, seq, hash) VALUES (0, ?, ?) ON CONFLICT (lane) "
        "DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        (seq, entry_hash),
    )


def test_v2_ledger_upgrades_and_its_audit_still_verifies(tmp_path) -> None:
    """Migration 3 (no AUTOINCREMENT, clustered dispatch_log, head trigger) on a ledger
    written by schema 2: its chain still verifies and new entries extend it."""
    import effectgate.store._sqlite_schema as sqlite_mod

    path = str(tmp_path / "ledger.db")
    full = list(sqlite_mod.MIGRATIONS)
    sqlite_mod.MIGRATIONS[:] = full[:2]
    try:
        SQLiteStore(path).close()
    finally:
        sqlite_mod.MIGRATIONS[:] = full
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for i in range(5):
        _old_chained_audit(conn, float(i), "note", f'{{"n":{i}}}')
    conn.execute(
        "INSERT INTO dispatch_log (action, at, op_key, value_micros) "
        "VALUES ('submit_order', 1.0, 'default:old', 5)"
    )
    conn.execute("COMMIT")
    conn.close()

    store = SQLiteStore(path)
    assert store.schema_version() == len(MIGRATIONS) >= 3
    gate = _gate(store, PaperAdapter(PaperVenue()))
    for i in range(3):
        assert gate.submit("submit_order", f"new-{i}", INTENT).state is State.ACKNOWLEDGED
    result = verify_store(store)
    entries = store.audit_entries(limit=10_000)
    assert result.ok and result.checked == len(entries) == 5 + 3 * 2
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert store.audit_heads()[0][0] == entries[-1].seq
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM dispatch_log").fetchone()[0] == 4
    assert (
        raw.execute(
            "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%AUTOINCREMENT%' "
            "AND name IN ('audit_log', 'dispatch_log')"
        ).fetchone()[0]
        == 0
    )
    raw.close()
    store.close()


def test_a_ledger_newer_than_this_build_is_refused(store_factory) -> None:
    """A schema version this build does not know is refused at open, not written to."""
    store = store_factory()
    if isinstance(store, SQLiteStore):
        store._conn.execute("INSERT INTO schema_migrations VALUES (999, 0)")
    else:
        import psycopg

        schema = store.schema  # type: ignore[attr-defined]
        with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
            conn.execute(f"INSERT INTO {schema}.schema_migrations (version) VALUES (999)")
    with pytest.raises(StoreError, match="newer than this build"):
        store.migrate()
