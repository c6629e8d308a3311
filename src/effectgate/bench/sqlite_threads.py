"""B1's action from T threads sharing one SQLite store: what group commit buys.

    python benchmarks/sqlite_threads.py --threads 1,4,16,40 --n 4000

Each thread runs ``Gate.submit`` on raw intent bytes (the B1 action, paper venue in process)
under distinct operation ids, on one ``SQLiteStore`` (WAL, ``synchronous=FULL``) in a fresh
directory. Prints actions/s, p50/p99 latency and COMMITs per action (counted from the
statements the connection runs): below 2 means bodies shared commits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.common import INTENT_BODY, bench_gate, percentile
from effectgate.store.sqlite import SQLiteStore


def measure(threads: int, n: int, directory: str) -> dict[str, float]:
    work = tempfile.mkdtemp(prefix="eg-threads-", dir=directory)
    store = SQLiteStore(os.path.join(work, "ledger.db"), synchronous="FULL")
    try:
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        for i in range(100):
            gate.submit("submit_order", f"warm-{i}", INTENT_BODY)
        commits = [0]
        store._conn.set_trace_callback(
            lambda sql: commits.__setitem__(0, commits[0] + (sql == "COMMIT"))
        )
        latencies: list[float] = []
        per = n // threads

        def worker(t: int) -> None:
            clock = time.perf_counter
            for i in range(per):
                t0 = clock()
                gate.submit("submit_order", f"t{t}-{i}", INTENT_BODY)
                latencies.append(clock() - t0)

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        start = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        seconds = time.perf_counter() - start
        store._conn.set_trace_callback(None)
        done = per * threads
        return {
            "threads": threads,
            "actions_per_s": done / seconds,
            "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "commits_per_action": commits[0] / done,
        }
    finally:
        store.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,4,16,40")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the ledger lives")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    rows = [measure(int(t), args.n, args.dir) for t in args.threads.split(",")]
    print(f"{'threads':>8} {'actions/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'commits/action':>15}")
    for r in rows:
        print(
            f"{r['threads']:>8} {r['actions_per_s']:>10,.0f} {r['p50_ms']:>8.2f} "
            f"{r['p99_ms']:>8.1f} {r['commits_per_action']:>15.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
