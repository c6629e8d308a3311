"""Cost of the controls on the hot path: N automatic actions end to end per process.

    python docs/controls_bench.py STORE_URL [--actions N] [--procs P]
                                  [--mode plain|breaker|envelope] [--src PATH]

``plain``: no control active (the fast path). ``breaker``: a breaker watches the class (signals are
recorded and read in the journal transaction). ``envelope``: an exposure window is set (checked and
charged in the journal transaction). ``--src`` runs another checkout's ``src`` (e.g. a ``git
archive`` of the commit before the controls) for a same-machine comparison. Use a fresh SQLite
file or PostgreSQL schema (``?schema=...``) per run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from decimal import Decimal


def worker(args: tuple[str | None, str, int, str, str]) -> tuple[int, float, float, float]:
    src, url, n, prefix, mode = args
    if src:
        sys.path.insert(0, src)
    from effectgate import Gate, LimitPolicy, PolicySet
    from effectgate.adapters.paper import PaperAdapter, PaperVenue
    from effectgate.examples import EXAMPLE_ORDER, default_registry
    from effectgate.store import open_store

    store = open_store(url, create=True)
    from effectgate import BreakerConfig

    breakers = (
        {"submit_order": BreakerConfig(window=60, max_repeats=10**9, max_rejection_rate=0.99)}
        if mode == "breaker"
        else None
    )
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        breakers=breakers,
    )
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        row = gate.submit("submit_order", f"{prefix}-{i}", EXAMPLE_ORDER)
        latencies.append(time.perf_counter() - t)
        if row.state.value != "acknowledged":
            raise SystemExit(f"unexpected state {row.state.value}")
    elapsed = time.perf_counter() - start
    store.close()
    latencies.sort()
    return n, elapsed, latencies[n // 2], latencies[int(n * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--mode", choices=("plain", "breaker", "envelope"), default="plain")
    parser.add_argument("--src")
    a = parser.parse_args()
    if a.src:
        sys.path.insert(0, a.src)
    if a.mode == "envelope":
        from effectgate import Operator
        from effectgate.examples import default_registry
        from effectgate.store import open_store

        store = open_store(a.url, create=True)
        Operator(store=store, registry=default_registry()).step(
            "submit_order",
            "exposure",
            {"limit": "1000000000", "window": 3600},
            evidence={"bench": True},
            operator="bench",
        )
        store.close()
    with mp.get_context("spawn").Pool(a.procs) as pool:
        results = pool.map(
            worker, [(a.src, a.url, a.actions, f"p{p}", a.mode) for p in range(a.procs)]
        )
    total = sum(r[0] for r in results)
    print(
        json.dumps(
            {
                "procs": a.procs,
                "mode": a.mode,
                "actions": total,
                "actions_per_s": round(total / max(r[1] for r in results), 1),
                "p50_ms": round(1000 * sorted(r[2] for r in results)[len(results) // 2], 3),
                "p99_ms": round(1000 * max(r[3] for r in results), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
