"""Fresh SQLite ledgers for the seeds: one migrated template per process, copied per seed.

Migrating a new ledger runs every migration's DDL (about 10 ms, a tenth of a seed); copying a
closed, migrated file is a fraction of that. The copy is a byte-for-byte fresh ledger: an empty
ledger's migrations write no audit entry and draw nothing random, so what a seed sees is the
same as from ``open_store(..., create=True)`` (only ``schema_migrations.applied_at``, which no
history reads, is the template's).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from effectgate.store import open_store

__all__ = ["copy_fresh_ledger"]

_template: Path | None = None


def _build_template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="effectgate-sim-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "ledger.db"
    # Closing the only connection checkpoints the WAL into the file: the file alone is whole.
    open_store(f"sqlite:///{path}", create=True, synchronous="OFF").close()
    for leftover in ("ledger.db-wal", "ledger.db-shm"):
        if (folder / leftover).exists():
            raise RuntimeError(f"the template ledger left {leftover} behind: it is not whole")
    return path


def copy_fresh_ledger(path: Path) -> None:
    """Write a freshly migrated, empty SQLite ledger at ``path`` (which must not exist)."""
    global _template
    if path.exists():
        raise FileExistsError(f"{path} exists: a seed's ledger must start empty")
    if _template is None or not _template.exists():
        _template = _build_template()
    shutil.copyfile(_template, path)
