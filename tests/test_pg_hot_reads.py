"""The per-request token lookup on PostgreSQL: a prepared statement on a hot connection.

Authentication reads the ledger on every request, never from a cache (a revoked token is
refused from the next request on, ``docs/service.md``). On PostgreSQL that read goes as one
prepared statement on the hot path's own connections (``PostgresStore._hot_rows``) instead of
a pool checkout and a cursor; these tests check it answers as the pooled read did: at once
after a revocation, from the pool when every hot connection is busy, and once more on a fresh
connection when the one it had was lost.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from conftest import require_pg
from effectgate._core.principals import Principal, Role
from effectgate.errors import CommitOutcomeUnknown, StoreError
from effectgate.store._attempts import read_twice
from effectgate.store.postgres import PostgresStore, drop_schema


@pytest.fixture
def pg_store() -> Iterator[PostgresStore]:
    url, schema = require_pg(), f"t_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(url, schema=schema)
    try:
        yield store
    finally:
        store.close()
        drop_schema(url, schema)


def pool_checkouts(store: PostgresStore) -> int:
    return int(store._pool.get_stats().get("requests_num", 0))


@pytest.mark.postgres
class TestTokenLookupOnHotConnections:
    def test_the_lookup_checks_out_no_pooled_connection(self, pg_store: PostgresStore) -> None:
        issued = pg_store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        before = pool_checkouts(pg_store)
        for _ in range(5):
            assert pg_store.principal_for_token(issued.token) == Principal("a", Role.AGENT, "alpha")
        assert pg_store.principal_for_token("eg_agent_nope") is None
        assert pool_checkouts(pg_store) == before

    def test_a_revocation_holds_from_the_next_lookup(self, pg_store: PostgresStore) -> None:
        """Nothing is cached: the prepared read sees the commit of the revocation."""
        issued = pg_store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        assert pg_store.principal_for_token(issued.token) is not None
        pg_store.revoke_principal("a", revoked_by="ops", now=2.0)
        assert pg_store.principal_for_token(issued.token) is None

    def test_every_hot_connection_busy_reads_through_the_pool(
        self, pg_store: PostgresStore
    ) -> None:
        issued = pg_store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        held = []
        while (conn := pg_store._lane.take()) is not None:
            held.append(conn)
        try:
            before = pool_checkouts(pg_store)
            assert pg_store.principal_for_token(issued.token) is not None
            assert pool_checkouts(pg_store) == before + 1
        finally:
            for conn in held:
                pg_store._lane.give(conn, True)

    def test_a_lost_hot_connection_is_retried_once_on_a_fresh_one(
        self, pg_store: PostgresStore
    ) -> None:
        issued = pg_store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        assert pg_store.principal_for_token(issued.token) is not None  # a hot connection idles
        conn = pg_store._lane.take()
        assert conn is not None
        with psycopg.connect(require_pg(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        pg_store._lane.give(conn, True)  # looks idle and open: the next read finds it dead
        assert pg_store.principal_for_token(issued.token) == Principal("a", Role.AGENT, "alpha")

    def test_a_server_error_is_a_store_error(self, pg_store: PostgresStore) -> None:
        with pytest.raises(StoreError, match="hot read"):
            pg_store._hot_rows("SELECT * FROM no_such_table WHERE x = ?", ("1",), "hot read")


class TestReadTwice:
    """A read through a one-trip call: a lost connection (CommitOutcomeUnknown there) is tried
    once more; a second loss is a StoreError, never an uncertain outcome."""

    def test_one_loss_is_tried_once_more(self) -> None:
        answers: list[object] = [CommitOutcomeUnknown("lost"), "row"]

        def read() -> object:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        assert read_twice(read) == "row" and not answers

    def test_a_second_loss_is_a_store_error(self) -> None:
        calls: list[int] = []

        def read() -> object:
            calls.append(1)
            raise CommitOutcomeUnknown("lost")

        with pytest.raises(StoreError, match="lost its connection twice") as info:
            read_twice(read)
        assert not isinstance(info.value, CommitOutcomeUnknown) and len(calls) == 2
