"""What a page costs under synchronous=FULL, and how many pages an action writes.

    python benchmarks/sqlite_pages.py --dir /path/on/the/disk/to/measure

1. A raw loop committing one row into each of K tables per transaction (K = 1, 2, 3, 5, 7):
   microseconds per commit. The slope is the price of one more dirty page (one more WAL frame
   the fsync waits for) on this disk.
2. WAL frames written per action by effectgate's B1 action and by the B1 floor on the same file
   (WAL size growth with autocheckpoint off, divided by the actions).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import tempfile
import time

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _sqlite_floor, floor_row
from effectgate.bench.common import INTENT_BODY, bench_gate
from effectgate.store.sqlite import SQLiteStore


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


def frames_per_action(directory: str, n: int) -> tuple[float, float]:
    work = tempfile.mkdtemp(prefix="eg-frames-", dir=directory)
    try:
        path = os.path.join(work, "ledger.db")
        store = SQLiteStore(path, synchronous="FULL")
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        for i in range(300):
            gate.submit("submit_order", f"warm-{i}", INTENT_BODY)
        frame = store._conn.execute("PRAGMA page_size").fetchone()[0] + 24
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store._conn.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(n):
            gate.submit("submit_order", f"op-{i}", INTENT_BODY)
        effectgate = os.path.getsize(path + "-wal") / frame / n
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("PRAGMA synchronous = FULL")
        loop = _sqlite_floor(conn, floor_row())
        loop(0, 300, None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        loop(300, n, None)
        floor = os.path.getsize(path + "-wal") / frame / n
        conn.close()
        store.close()
        return effectgate, floor
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


if __name__ == "__main__":
    main()
