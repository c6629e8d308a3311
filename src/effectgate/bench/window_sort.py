"""What sorting a time window's venue records into key order costs, spilled or in memory.

    python -m effectgate.bench.window_sort --n 200000 --chunk 10000

The reconciler sorts a ``time_window`` venue's listing (Stripe, EC2) into operation-key order
with :func:`effectgate._execute.windowing.sorted_window`: runs of ``chunk`` records spilled to
temporary files and merged. This prints, for ``n`` synthetic records (random keys, one venue id
each), records per second and the Python heap's peak for the spilled sort and for one
in-memory sort of the whole window, so the choice of ``Reconciler.window_chunk`` (and of
spilling to files rather than to the store, docs/adapters.md) rests on figures. With
``--sqlite-scratch`` it also times the alternative: the same records written in ``chunk``-row
transactions to a scratch table of a SQLite file in WAL mode with ``synchronous=FULL`` (as the
ledger runs), read back in key order and deleted, with the longest time the write lock was held
(what every journal commit of a ledger in that file would wait behind).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

from effectgate._execute.adapter import VenueRecord
from effectgate._execute.windowing import SpillStats, sorted_window

__all__ = ["run"]


def _records(n: int, seed: int) -> Iterator[VenueRecord]:
    rng = random.Random(seed)
    for i in range(n):
        yield VenueRecord(f"default:op-{rng.randrange(10**9):09d}", f"pi_{i:012d}")


def _one(n: int, chunk: int, *, traced: bool) -> dict[str, Any]:
    stats = SpillStats()
    if traced:
        tracemalloc.start()
    began = time.perf_counter()
    last: VenueRecord | None = None
    seen = 0
    for rec in sorted_window(_records(n, 1), chunk=chunk, stats=stats):
        if last is not None and rec < last:
            raise RuntimeError("window sort out of order")
        last, seen = rec, seen + 1
    elapsed = time.perf_counter() - began
    peak = 0
    if traced:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if seen != n:
        raise RuntimeError(f"window sort yielded {seen} of {n} records")
    return {"runs": stats.spilled_runs, "seconds": elapsed, "peak_bytes": peak}


def sqlite_scratch(n: int, chunk: int) -> dict[str, Any]:
    """The store alternative on SQLite, in a throwaway file: insert, ordered read, delete."""
    with tempfile.TemporaryDirectory() as folder:
        db = sqlite3.connect(os.path.join(folder, "scratch.db"), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(
                "CREATE TABLE scratch (sweep TEXT, op_key TEXT, venue_id TEXT, "
                "PRIMARY KEY (sweep, op_key, venue_id)) WITHOUT ROWID"
            )
            began, longest = time.perf_counter(), 0.0  # generating the records counts, as above
            rows = [(r.operation_key, r.venue_id) for r in _records(n, 1)]
            for i in range(0, n, chunk):
                held = time.perf_counter()
                db.execute("BEGIN IMMEDIATE")
                db.executemany("INSERT INTO scratch VALUES ('s', ?, ?)", rows[i : i + chunk])
                db.execute("COMMIT")
                longest = max(longest, time.perf_counter() - held)
            seen = sum(
                1
                for _ in db.execute(
                    "SELECT op_key, venue_id FROM scratch WHERE sweep = 's' "
                    "ORDER BY op_key, venue_id"
                )
            )
            db.execute("DELETE FROM scratch WHERE sweep = 's'")
            elapsed = time.perf_counter() - began
        finally:
            db.close()
    if seen != n:
        raise RuntimeError(f"scratch table gave {seen} of {n} records")
    return {
        "records_per_s": round(n / elapsed) if elapsed else None,
        "write_lock_max_ms": round(longest * 1000, 1),
    }


def run(n: int, chunk: int) -> dict[str, Any]:
    """Timing from an untraced pass, heap peak from a traced one, for both sorts."""
    out: dict[str, Any] = {"n": n, "chunk": chunk}
    for name, size in (("spilled", chunk), ("in_memory", n + 1)):
        timed = _one(n, size, traced=False)
        traced = _one(n, size, traced=True)
        out[name] = {
            "runs": timed["runs"],
            "records_per_s": round(n / timed["seconds"]) if timed["seconds"] else None,
            "peak_heap_mib": round(traced["peak_bytes"] / 2**20, 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sqlite-scratch", action="store_true", help="also time a store spill")
    args = parser.parse_args()
    got = run(args.n, args.chunk)
    if args.sqlite_scratch:
        got["sqlite_scratch"] = sqlite_scratch(args.n, args.chunk)
    if args.json:
        print(json.dumps(got))
        return
    for name in ("spilled", "in_memory"):
        r = got[name]
        print(
            f"{name:<9} n={got['n']} runs={r['runs']} {r['records_per_s']:,} records/s "
            f"peak heap {r['peak_heap_mib']} MiB"
        )
    if "sqlite_scratch" in got:
        r = got["sqlite_scratch"]
        print(
            f"sqlite scratch table n={got['n']} {r['records_per_s']:,} records/s, write lock "
            f"held up to {r['write_lock_max_ms']} ms per {got['chunk']}-row transaction"
        )


if __name__ == "__main__":
    main()
