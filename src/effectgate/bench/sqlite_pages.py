"""What a page costs under synchronous=FULL, and how many pages an action writes.

    python benchmarks/sqlite_pages.py --dir /path/on/the/disk/to/measure

1. A raw loop committing one row into each of K tables per transaction (K = 1, 2, 3, 5, 7):
   microseconds per commit. The slope is the price of one more dirty page (one more WAL frame
   the fsync waits for) on this disk.
2. WAL frames written per action by effectgate's B1 action and by the B1 floor on the same file
   (WAL size growth with autocheckpoint off, divided by the actions).
3. The same frames by B-tree: which table or index each frame of the first (journal) and second
   (receipt) commit of an action belongs to, decoded from the WAL's frame headers and named
   with ``dbstat``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _sqlite_floor, floor_row
from effectgate.bench.common import INTENT_BODY, bench_gate
from effectgate.store.sqlite import SQLiteStore

T = TypeVar("T")


def per_commit(directory: str, tables: list[int], n: int) -> dict[int, float]:
    work = tempfile.mkdtemp(prefix="eg-pages-", dir=directory)
    try:
        conn = sqlite3.connect(os.path.join(work, "pages.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        for t in range(max(tables)):
            conn.execute(f"CREATE TABLE t{t} (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
        pad = "x" * 300
        out = {}
        for k in tables:
            start = time.perf_counter()
            for _ in range(n):
                conn.execute("BEGIN IMMEDIATE")
                for t in range(k):
                    conn.execute(f"INSERT INTO t{t} VALUES (?, ?)", (str(random.random()), pad))
                conn.execute("COMMIT")
            out[k] = (time.perf_counter() - start) / n * 1e6
        conn.close()
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _both_sides(directory: str, n: int, measure: Callable[[str], T]) -> tuple[T, T]:
    """``measure(path)`` of the WAL that ``n`` B1 actions wrote, effectgate's then the floor's,
    on one fresh file (autocheckpoint off, the WAL emptied before each side's timed part)."""
    work = tempfile.mkdtemp(prefix="eg-frames-", dir=directory)
    try:
        path = os.path.join(work, "ledger.db")
        store = SQLiteStore(path, synchronous="FULL")
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        for i in range(300):
            gate.submit("submit_order", f"warm-{i}", INTENT_BODY)
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store._conn.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(n):
            gate.submit("submit_order", f"op-{i}", INTENT_BODY)
        effectgate = measure(path)
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("PRAGMA synchronous = FULL")
        loop = _sqlite_floor(conn, floor_row())
        loop(0, 300, None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        loop(300, n, None)
        floor = measure(path)
        conn.close()
        store.close()
        return effectgate, floor
    finally:
        shutil.rmtree(work, ignore_errors=True)


def frames_per_action(directory: str, n: int) -> tuple[float, float]:
    """WAL frames per action, effectgate then the floor (WAL size over frame size over n)."""

    def frames(path: str) -> float:
        page_size: int = struct.unpack(">I", Path(path + "-wal").read_bytes()[8:12])[0]
        return os.path.getsize(path + "-wal") / (page_size + 24) / n

    return _both_sides(directory, n, frames)


def _wal_commits(path: str, names: dict[int, str]) -> list[list[str]]:
    """The WAL's frames, grouped by commit, each named by the B-tree its page belongs to."""
    data = Path(path + "-wal").read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    commits: list[list[str]] = []
    current: list[str] = []
    offset = 32  # the WAL header; then frames of a 24-byte header and one page
    while offset + 24 <= len(data):
        page, size_after_commit = struct.unpack(">II", data[offset : offset + 8])
        current.append(names.get(page, "free or new"))
        if size_after_commit:  # non-zero only on a commit's last frame
            commits.append(current)
            current = []
        offset += 24 + page_size
    return commits


def _page_names(path: str) -> dict[int, str]:
    conn = sqlite3.connect(path)
    try:
        names = {
            int(page): str(name) for name, page in conn.execute("SELECT name, pageno FROM dbstat")
        }
    finally:
        conn.close()
    # Page 1 is the schema's root, but a commit rewrites it for the header (the file grew).
    names[1] = "page 1 (header)"
    return names


def frames_by_btree(directory: str, n: int) -> dict[str, list[dict[str, float]]]:
    """Frames per action by B-tree, for each of the two commits, effectgate then the floor."""
    effectgate, floor = _both_sides(
        directory, n, lambda path: _per_commit(_wal_commits(path, _page_names(path)), n)
    )
    return {"effectgate": effectgate, "floor": floor}


def _per_commit(commits: list[list[str]], n: int) -> list[dict[str, float]]:
    if len(commits) != 2 * n:
        raise RuntimeError(f"{len(commits)} commits in the WAL for {n} actions, not {2 * n}")
    first, second = Counter[str](), Counter[str]()
    for k, frames in enumerate(commits):
        (first if k % 2 == 0 else second).update(frames)
    return [{name: count / n for name, count in c.most_common()} for c in (first, second)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="the disk to measure")
    parser.add_argument("--n", type=int, default=2000, help="commits per K, actions for frames")
    args = parser.parse_args()
    costs = per_commit(args.dir, [1, 2, 3, 5, 7], args.n)
    print("tables per commit   us per commit")
    for k, us in costs.items():
        print(f"{k:>17}   {us:>13.0f}")
    print(f"about {(costs[7] - costs[1]) / 6:.0f} us per extra page per commit")
    eg, floor = frames_per_action(args.dir, min(args.n, 1000))
    print(f"WAL frames per action: effectgate {eg:.2f}, floor {floor:.2f}")
    for side, commits in frames_by_btree(args.dir, min(args.n, 1000)).items():
        for label, frames in zip(("journal commit", "receipt commit"), commits, strict=True):
            shown = ", ".join(f"{name} {count:.2f}" for name, count in frames.items())
            print(f"{side:<10} {label}: {sum(frames.values()):.2f} frames ({shown})")


if __name__ == "__main__":
    main()
