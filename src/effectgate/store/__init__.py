"""Ledger stores: the role protocols, the embedded SQLite store and the PostgreSQL store."""

from __future__ import annotations

from typing import Any

from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """Open a store by URL: ``sqlite:///path/to/ledger.db`` or ``postgresql://...``."""
    from effectgate.store.base import parse_store_url

    dialect, target = parse_store_url(url)
    if dialect == "sqlite":
        return SQLiteStore(target, **options)
    from effectgate.store.postgres import PostgresStore  # imported lazily: psycopg is heavier

    return PostgresStore(target, **options)
