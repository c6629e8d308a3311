"""Ledger stores: the role protocols, the embedded SQLite store and the PostgreSQL store."""

from __future__ import annotations

import os
from typing import Any

from effectgate.errors import ConfigError, LedgerNotFound
from effectgate.store.base import parse_store_url
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "open_store"]


def open_store(url: str, *, create: bool = False, **options: Any) -> Store:
    """Open a ledger by URL: ``sqlite:///relative/ledger.db``, ``sqlite:////abs/ledger.db`` or
    ``postgresql://...`` (``?schema=NAME``).

    Opening never creates a ledger unless ``create=True``: a SQLite file that does not exist, or
    a PostgreSQL schema that was never migrated, raises :class:`LedgerNotFound` naming what was
    looked for, so a mistyped path cannot silently start an empty ledger (where a retry of an
    acknowledged operation would be sent again). An existing ledger is migrated forward.
    """
    dialect, target = parse_store_url(url)
    if dialect == "sqlite":
        try:
            return SQLiteStore(target, create=create, **options)
        except LedgerNotFound as exc:
            if target.startswith("/") or target == ":memory:":
                raise
            raise LedgerNotFound(
                f"{exc.message}. {url!r} names a path relative to the working directory "
                f"({os.getcwd()}); for the absolute path /{target} write "
                f"'sqlite:////{target}'"
            ) from exc
    try:
        from effectgate.store.postgres import PostgresStore  # lazily: psycopg is an extra
    except ImportError as exc:
        raise ConfigError(
            "the PostgreSQL store needs the postgres extra: pip install 'effectgate[postgres]'"
        ) from exc
    return PostgresStore(target, create=create, **options)
