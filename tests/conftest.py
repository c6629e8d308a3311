"""Shared fixtures: every store test runs on SQLite and, when configured, on PostgreSQL.

PostgreSQL tests read ``EFFECTGATE_TEST_PG_URL``. Without it a developer's run skips them with a
visible reason; under ``CI=true`` a missing or unreachable server fails the run instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from effectgate.store.base import with_schema
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore

PG_URL = os.environ.get("EFFECTGATE_TEST_PG_URL")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

StoreFactory = Callable[[], Store]


def require_pg() -> str:
    """The PostgreSQL URL, or skip (locally) / fail (in CI) with the reason."""
    if not PG_URL:
        if IN_CI:
            pytest.fail("CI=true but EFFECTGATE_TEST_PG_URL is not set")
        pytest.skip("EFFECTGATE_TEST_PG_URL not set: PostgreSQL store tests skipped")
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=5):
            pass
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"cannot connect to PostgreSQL at EFFECTGATE_TEST_PG_URL: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    return PG_URL


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_factory(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[StoreFactory]:
    """A factory of store handles onto ONE fresh ledger (several handles = several processes)."""
    opened: list[Store] = []
    if request.param == "sqlite":
        path = os.path.join(str(tmp_path), "ledger.db")

        def factory() -> Store:
            s = SQLiteStore(path)
            opened.append(s)
            return s

        def cleanup() -> None:
            return None

        factory.url = f"sqlite:///{path}"  # type: ignore[attr-defined]
    else:
        url = require_pg()
        from effectgate.store.postgres import PostgresStore, drop_schema

        schema = f"t_{uuid.uuid4().hex[:12]}"

        def factory() -> Store:
            s = PostgresStore(url, schema=schema)
            opened.append(s)
            return s

        def cleanup() -> None:
            drop_schema(url, schema)

        factory.url = with_schema(url, schema)  # type: ignore[attr-defined]
    try:
        yield factory
    finally:
        for s in opened:
            s.close()
        cleanup()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory()
