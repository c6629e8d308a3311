"""B2: PostgreSQL with 1, 2, 4 and 8 worker processes, distinct operation ids.

At each worker count, W processes run the B1 action loop (``Gate.submit`` on raw intent bytes,
paper venue in process) on one shared schema, started together behind a barrier; then W
processes run the raw floor loop (the B1 PostgreSQL floor: INSERT, then the conditional UPDATE,
each one autocommit statement, so one commit and one round trip). Throughput is all actions over
the wall time from the barrier to the last worker done; p99 is over every action of every worker.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from effectgate.bench.common import Figure, Target, summarise

__all__ = ["run"]

COUNTS = (1, 2, 4, 8)


def _worker(
    side: str,
    url: str,
    prefix: str,
    n: int,
    ready: Queue[str],
    go: Event,
    out: Queue[dict[str, Any]],
) -> None:
    from effectgate.adapters.paper import PaperAdapter, PaperVenue
    from effectgate.bench.b1 import _gate_loop, pg_floor
    from effectgate.bench.common import bench_gate
    from effectgate.store import open_store

    lat: list[float] = []
    if side == "eg":
        store = open_store(url, create=True)
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        _gate_loop(gate, f"{prefix}w", 0, 20, None)  # warm-up
        ready.put(prefix)
        go.wait()
        t0 = time.perf_counter()
        _gate_loop(gate, prefix, 0, n, lat)
        seconds = time.perf_counter() - t0
        store.close()
    else:
        loop, close = pg_floor(url)
        loop(f"{prefix}w", 0, 20, None)
        ready.put(prefix)
        go.wait()
        t0 = time.perf_counter()
        loop(prefix, 0, n, lat)
        seconds = time.perf_counter() - t0
        close()
    out.put({"seconds": seconds, "lat": lat})


def _measure(side: str, url: str, workers: int, per_worker: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready: Queue[str] = ctx.Queue()
    out: Queue[dict[str, Any]] = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(
            target=_worker,
            args=(side, url, f"{side}{workers}-{k}-", per_worker, ready, go, out),
            daemon=True,
        )
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(timeout=30)
        if p.exitcode != 0:
            raise RuntimeError(f"B2 {side} worker exited with {p.exitcode}")
    lat = [x for r in results for x in r["lat"]]
    return {"rate": workers * per_worker / wall, "lat": lat}


def run(target: Target, n: int, *, smoke: bool = False) -> list[Figure]:
    counts = (1, 2) if smoke else COUNTS
    figures = []
    with target.pg_schema("b2") as url:
        from effectgate.store import open_store

        open_store(url, create=True).close()  # migrate once
        for workers in counts:
            per_worker = max(1, n // workers)
            eg = _measure("eg", url, workers, per_worker)
            floor = _measure("floor", url, workers, per_worker)
            figures.append(
                Figure(
                    "B2",
                    f"PostgreSQL, {workers} worker process{'es' if workers > 1 else ''}",
                    "actions/s",
                    eg["rate"],
                    floor["rate"],
                    {
                        "workers": workers,
                        "actions": workers * per_worker,
                        "effectgate": summarise(eg["lat"]),
                        "floor": summarise(floor["lat"]),
                    },
                )
            )
    return figures
