"""The PostgreSQL hot path's own connections (store/_postgres_wire.py): prepared statements
sent through libpq, a few connections outside the pool, the pool when they are all busy.

The guarantees are the store's: one journal per operation id across threads (invariant 1), a
refused trip writes nothing, not even its audit entry (invariant 3's "nothing written" side),
and the chained audit stays verifiable (invariant 8).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from conftest import require_pg
from effectgate._core.states import State
from effectgate._evidence.audit import verify_store
from effectgate.errors import StoreError
from effectgate.store.base import NewOperation

pytestmark = [pytest.mark.postgres]

PATH = [State.PROPOSED, State.VALIDATED, State.SUBMITTED]


def _new(op: str) -> NewOperation:
    return NewOperation(
        scope="default",
        operation_id=op,
        action="submit_order",
        fingerprint="f" * 64,
        intent={"q": "4"},
        effect={"q": "4"},
        tier="validate",
        reason="ok",
        policy_version="t",
    )


@pytest.fixture
def schema() -> Iterator[tuple[str, str]]:
    from effectgate.store.postgres import drop_schema

    url = require_pg()
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield url, name
    finally:
        drop_schema(url, name)


def test_more_threads_than_hot_connections(schema) -> None:
    """Invariant 1 and 8: 8 threads on a store whose lane holds 2 connections (the rest go
    through the pool) journal and acknowledge 240 operations, each id raced by two threads:
    every id journalled exactly once, every row acknowledged, the chain verifies."""
    from effectgate.store.postgres import PostgresStore

    url, name = schema
    store = PostgresStore(url, schema=name, min_size=1, max_size=2)
    ids = [f"op-{i}" for i in range(120)]
    inserted: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        try:
            # Two threads per id range, in opposite orders: each id is raced.
            mine = ids[k // 2 :: 4] if k % 2 == 0 else list(reversed(ids[k // 2 :: 4]))
            for op in mine:
                journal = store.insert_operation(_new(op), PATH, now=1.0)
                if journal[1]:
                    with lock:
                        inserted.append(op)
                    store.transition(
                        "default",
                        op,
                        State.SUBMITTED,
                        State.ACKNOWLEDGED,
                        now=2.0,
                        venue_id=f"V-{op}",
                        current=journal[0],
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert sorted(inserted) == sorted(ids)
        for op in ids:
            row = store.get("default", op)
            assert row is not None and row.state is State.ACKNOWLEDGED and row.version == 2
        result = verify_store(store)
        assert result.ok, result.findings
        assert result.checked == 2 * len(ids)
    finally:
        store.close()


def test_refused_trip_writes_nothing_and_the_next_one_works(schema) -> None:
    """A server error inside the one-trip journal (the key's lock not granted within
    lock_timeout, another session holding it) aborts the implicit transaction: no row, no audit
    entry. The connection is replaced and its statements parsed again on the next call."""
    from effectgate.store import _postgres_tx as pgtx
    from effectgate.store.postgres import PostgresStore

    url, name = schema
    store = PostgresStore(url, schema=name, lock_timeout_ms=200, max_size=1)
    try:
        store.insert_operation(_new("warm"), PATH, now=1.0)  # the lane's statements are parsed
        before = store.audit_heads()
        key = pgtx.lock_key(name, "default:blocked", "op")
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("BEGIN")
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
            with pytest.raises(StoreError, match="nothing written"):
                store.insert_operation(_new("blocked"), PATH, now=1.0)
            other.execute("ROLLBACK")
        assert store.get("default", "blocked") is None
        assert store.audit_heads() == before
        journal = store.insert_operation(_new("blocked"), PATH, now=1.0)
        assert journal[1] and journal[0].state is State.SUBMITTED
        done = store.transition(
            "default",
            "blocked",
            State.SUBMITTED,
            State.ACKNOWLEDGED,
            now=2.0,
            venue_id="V-1",
            current=journal[0],
        )
        assert done is not None and done.state is State.ACKNOWLEDGED and done.venue_id == "V-1"
        assert verify_store(store).ok
    finally:
        store.close()
