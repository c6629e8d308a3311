"""What PostgreSQL writes per action: effectgate's B1 action against the floor, by WAL record.

Runs N actions of each on a fresh schema and prints, per action, the WAL bytes and the records
by kind (``pg_walinspect``'s ``pg_get_wal_stats``; the extension is created if it is missing,
which needs a superuser). The LSN is the cluster's: run it with nothing else writing::

    python -m effectgate.bench.pg_wal --store postgresql://postgres@127.0.0.1:5432/eg_bench
"""

from __future__ import annotations

import argparse
from typing import Any

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import pg_floor
from effectgate.bench.common import INTENT_BODY, Target, _libpq_url, bench_gate
from effectgate.store import open_store

__all__ = ["main"]


def _stats(conn: Any, start: str, end: str, n: int) -> None:
    rows = conn.execute(
        'SELECT "resource_manager/record_type", count, combined_size '
        "FROM pg_get_wal_stats(%s, %s, true) WHERE count > 0 ORDER BY combined_size DESC",
        (start, end),
    ).fetchall()
    for kind, count, size in rows[:14]:
        print(f"  {kind:28} {count / n:6.2f} per action {size / n:7.0f} B")


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a postgresql:// URL")
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    target = Target(args.store)
    mon = psycopg.connect(_libpq_url(args.store), autocommit=True)
    mon.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    def lsn() -> str:
        row = mon.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        return str(row[0]) if row else "0/0"

    def size(a: str, b: str) -> float:
        row = mon.execute("SELECT %s::pg_lsn - %s::pg_lsn", (b, a)).fetchone()
        return float(row[0]) / args.n if row else 0.0

    with target.pg_schema("wal") as url:
        store = open_store(url, create=True)
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        loop, close = pg_floor(url)
        try:
            for i in range(200):  # warm-up: prepared statements, caches
                gate.submit("submit_order", f"w{i}", INTENT_BODY)
            loop("fw", 0, 200, None)
            a = lsn()
            for i in range(args.n):
                gate.submit("submit_order", f"p{i}", INTENT_BODY)
            b = lsn()
            loop("f", 0, args.n, None)
            c = lsn()
        finally:
            close()
            store.close()
    print(f"effectgate: {size(a, b):.0f} B of WAL per action")
    _stats(mon, a, b, args.n)
    print(f"floor: {size(b, c):.0f} B of WAL per action")
    _stats(mon, b, c, args.n)
    mon.close()


if __name__ == "__main__":
    main()
