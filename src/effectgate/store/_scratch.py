"""A fresh, migrated ledger for a block, removed afterwards (tests, ``verify``, benchmarks)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from effectgate.store import open_store
from effectgate.store.base import with_schema
from effectgate.store.roles import Store

__all__ = ["temporary_store"]


@contextmanager
def temporary_store(url: str | None = None) -> Iterator[Store]:
    """A fresh, migrated ledger for the block, removed afterwards.

    ``url``: None for a SQLite file in a temporary folder; a ``postgresql://`` URL for a new
    schema there (dropped afterwards).
    """
    if url is None or url.startswith("sqlite"):
        folder = Path(tempfile.mkdtemp(prefix="effectgate-"))
        store = open_store(f"sqlite:///{folder / 'ledger.db'}", create=True)
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    from effectgate.store.postgres import drop_schema

    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = open_store(with_schema(url, schema), create=True)
    try:
        yield store
    finally:
        store.close()
        drop_schema(url, schema)
