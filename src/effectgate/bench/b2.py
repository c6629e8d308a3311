"""B2: PostgreSQL with 1, 2, 4 and 8 worker processes, distinct operation ids.

At each worker count, W processes each hold both sides: the B1 action loop (``Gate.submit`` on
raw intent bytes, paper venue in process) and the raw floor loop (the B1 PostgreSQL floor:
INSERT, then the conditional UPDATE, each one autocommit statement, so one commit and one round
trip), on one shared schema. The sides alternate in rounds (eg, floor, floor, eg, ...), every
worker running the same side at once, so transient server work (a checkpoint, autovacuum, the
WAL growing) falls on both sides alike rather than on whichever ran second. A side's throughput
is all its actions over the summed wall time of its rounds, each from the start signal to the
last worker done; p99 is over every action of every worker.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from multiprocessing.queues import Queue
from typing import Any

from effectgate.bench.common import Figure, Target, summarise

__all__ = ["run"]

COUNTS = (1, 2, 4, 8)
#: Rounds per side; sides alternate in the order eg, floor, floor, eg, ...
ROUNDS = 4


def _worker(
    url: str, name: str, commands: Queue[tuple[str, str, int] | None], out: Queue[Any]
) -> None:
    """Set up both sides, warm them, then run ``(side, prefix, count)`` commands until None."""
    from effectgate.adapters.paper import PaperAdapter, PaperVenue
    from effectgate.bench.b1 import _gate_loop, pg_floor
    from effectgate.bench.common import bench_gate
    from effectgate.store import open_store

    store = open_store(url, create=True)
    gate = bench_gate(store, PaperAdapter(PaperVenue()))
    floor, close = pg_floor(url)
    _gate_loop(gate, f"{name}we-", 0, 20, None)
    floor(f"{name}wf-", 0, 20, None)
    out.put(("ready", name))
    try:
        while (command := commands.get()) is not None:
            side, prefix, count = command
            lat: list[float] = []
            if side == "eg":
                _gate_loop(gate, prefix, 0, count, lat)
            else:
                floor(prefix, 0, count, lat)
            out.put(("done", lat))
    finally:
        close()
        store.close()


def _measure(url: str, workers: int, per_worker: int) -> dict[str, dict[str, Any]]:
    ctx = mp.get_context("spawn")
    out: Queue[Any] = ctx.Queue()
    inboxes: list[Queue[tuple[str, str, int] | None]] = [ctx.Queue() for _ in range(workers)]
    procs = [
        ctx.Process(target=_worker, args=(url, f"w{workers}-{k}-", inboxes[k], out), daemon=True)
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        out.get(timeout=120)
    sides: dict[str, dict[str, Any]] = {s: {"seconds": 0.0, "lat": []} for s in ("eg", "floor")}
    per_round = max(1, per_worker // ROUNDS)
    try:
        for r in range(ROUNDS * 2):
            side = ("eg", "floor", "floor", "eg")[r % 4]
            t0 = time.perf_counter()
            for k, inbox in enumerate(inboxes):
                inbox.put((side, f"{side}{workers}-{k}-r{r}-", per_round))
            lats = [out.get(timeout=600)[1] for _ in procs]
            sides[side]["seconds"] += time.perf_counter() - t0
            sides[side]["lat"].extend(x for lat in lats for x in lat)
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for p in procs:
            p.join(timeout=30)
    for p in procs:
        if p.exitcode != 0:
            raise RuntimeError(f"B2 worker exited with {p.exitcode}")
    for figures in sides.values():
        figures["rate"] = len(figures["lat"]) / figures["seconds"]  # one latency an action
    return sides


def run(target: Target, n: int, *, smoke: bool = False) -> list[Figure]:
    counts = (1, 2) if smoke else COUNTS
    figures = []
    with target.pg_schema("b2") as url:
        from effectgate.store import open_store

        open_store(url, create=True).close()  # migrate once
        for workers in counts:
            per_worker = max(ROUNDS, n // workers)
            both = _measure(url, workers, per_worker)
            eg, floor = both["eg"], both["floor"]
            figures.append(
                Figure(
                    "B2",
                    f"PostgreSQL, {workers} worker process{'es' if workers > 1 else ''}",
                    "actions/s",
                    eg["rate"],
                    floor["rate"],
                    {
                        "workers": workers,
                        # counted from the latencies, so a round that lost actions shows
                        "actions": len(eg["lat"]),
                        "floor_actions": len(floor["lat"]),
                        "rounds": ROUNDS,
                        "effectgate": summarise(eg["lat"]),
                        "floor": summarise(floor["lat"]),
                    },
                )
            )
    return figures
