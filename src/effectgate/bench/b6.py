"""B6: a fleet of agents on one boundary against a slow venue.

A agents each submit actions back to back, distinct operation keys, against the paper venue
answering every dispatch after L ms (``PaperAdapter(latency=L)``), as Stripe, AWS or an
exchange would. The reference is the ideal A / L actions per second: a boundary that adds
nothing. The ratio says how much of the fleet's throughput the boundary keeps.

Variants: ``in-process`` (A threads calling ``Gate.submit`` on one gate) and ``HTTP`` (the
service as ``effectgate serve`` in its own process, A keep-alive clients from another process;
the same driver as B5). Reported beside throughput: p50/p99 end-to-end latency, p99 *added*
latency (end-to-end minus L), write commits per action and CPU per action (the benchmark's
process in process, the server's over HTTP).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from effectgate._core.states import State
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.common import (
    INTENT_BODY,
    Figure,
    SQLiteCommitCounter,
    Target,
    bench_gate,
    percentile,
    pg_commit_count,
    summarise,
)
from effectgate.errors import StoreError

__all__ = ["AGENTS", "LATENCY_MS", "in_process", "over_http", "run"]

AGENTS = (256,)
LATENCY_MS = 100.0
#: PostgreSQL connections for a fleet (``pool_max_size``; the default 4 suits a handful of
#: callers: at 256 agents commits queue for a connection, 0.52x against 0.68x with 32).
PG_POOL = 32
PG_OPTIONS = {"max_size": PG_POOL}
#: Actions per agent in the timed part (and a first one each, untimed, to warm up).
PER_AGENT = 30


def run(
    target: Target,
    n: int | None,
    *,
    agents: tuple[int, ...] = AGENTS,
    latency_ms: float = LATENCY_MS,
    smoke: bool = False,
) -> list[Figure]:
    """Both variants at each fleet size; ``n`` actions in all (default ``PER_AGENT`` each)."""
    figures = []
    for a in agents:
        count = n or a * PER_AGENT
        figures.append(in_process(target, a, count, latency_ms))
        figures.append(over_http(target, a, count, latency_ms))
    return figures


def _ideal(agents: int, latency_ms: float) -> float:
    return agents / (latency_ms / 1000.0)


def _cpu() -> float:
    # process_time has nanosecond resolution; os.times ticks at 10 ms, too coarse for small runs
    return time.process_time()


def in_process(target: Target, agents: int, n: int, latency_ms: float) -> Figure:
    """``agents`` threads on one gate, ``n`` actions in all, each dispatch taking ``latency_ms``."""
    from effectgate.store import open_store

    if target.dialect == "sqlite":
        cm: Any = target.sqlite_file(f"b6-{agents}")
        url = f"sqlite:///{cm.__enter__()}"
    else:
        cm = target.pg_schema(f"b6a{agents}")
        url = cm.__enter__()
    try:
        store = open_store(url, create=True, **({} if target.dialect == "sqlite" else PG_OPTIONS))
        try:
            gate = bench_gate(store, PaperAdapter(PaperVenue(), latency=latency_ms / 1000.0))
            return _fleet(gate, store, url, target.dialect, agents, n, latency_ms)
        finally:
            store.close()
    finally:
        cm.__exit__(None, None, None)


def _fleet(
    gate: Any, store: Any, url: str, dialect: str, agents: int, n: int, latency_ms: float
) -> Figure:
    lat: list[float] = []
    errors: list[str] = []
    start = threading.Barrier(agents + 1)

    def agent(a: int) -> None:
        mine: list[float] = []
        try:
            gate.submit("submit_order", f"w{a}", INTENT_BODY)  # warm-up, untimed
            start.wait()
            for i in range(a, n, agents):
                t0 = time.perf_counter()
                op = gate.submit("submit_order", f"b6-{i}", INTENT_BODY)
                mine.append(time.perf_counter() - t0)
                if op.state is not State.ACKNOWLEDGED:
                    errors.append(f"b6-{i} ended {op.state.value}")
        except Exception as exc:  # reported, never a hung barrier
            errors.append(f"agent {a}: {type(exc).__name__}: {exc}")
            start.abort()
        lat.extend(mine)  # list.extend is atomic under the GIL

    threads = [threading.Thread(target=agent, args=(a,), daemon=True) for a in range(agents)]
    # Installed before any agent runs: setting a trace callback on a connection another thread
    # is executing on waits for SQLite's mutex while holding the GIL, and deadlocks.
    counter = SQLiteCommitCounter.on_store(store) if dialect == "sqlite" else None
    for t in threads:
        t.start()
    try:
        start.wait(timeout=120)
    except threading.BrokenBarrierError as exc:
        raise StoreError(f"B6 warm-up failed: {errors[:1]}") from exc
    commits0 = counter.commits if counter else pg_commit_count(url)
    cpu0, t0 = _cpu(), time.perf_counter()
    for t in threads:
        t.join()
    seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    commits = (counter.commits if counter else pg_commit_count(url)) - commits0
    if counter:
        counter.stop()
    if errors:
        raise StoreError(f"B6 in process: {len(errors)} failures; first: {errors[0]}")
    return _figure("in-process", dialect, agents, n, seconds, lat, latency_ms, commits, cpu)


def _figure(
    door: str,
    dialect: str,
    agents: int,
    n: int,
    seconds: float,
    lat: list[float],
    latency_ms: float,
    commits: int | None,
    cpu: float,
) -> Figure:
    added = [x - latency_ms / 1000.0 for x in lat]
    store = "SQLite WAL FULL" if dialect == "sqlite" else "PostgreSQL"
    notes: dict[str, Any] = {
        "agents": agents,
        "latency_ms": latency_ms,
        "n": n,
        **summarise(lat),
        "p99_added_ms": round(percentile(added, 99) * 1000, 3),
        "cpu_us_per_action": round(1e6 * cpu / n, 1),
        "reference": "ideal: agents / latency",
    }
    if commits is not None:
        notes["commits_per_action"] = round(commits / n, 3)
    return Figure(
        "B6",
        f"{store}, {door}, agents={agents}",
        "actions/s",
        n / seconds,
        _ideal(agents, latency_ms),
        notes,
    )


def over_http(target: Target, agents: int, n: int, latency_ms: float, workers: int = 1) -> Figure:
    """The same fleet through ``effectgate serve --workers W``: ``agents`` keep-alive clients."""
    from effectgate.bench import b5

    args = (*b5.SERVE_ARGS, "--workers", str(workers))
    service = b5._service(target, f"b6h{agents}w{workers}", args, venue_latency=latency_ms / 1e3)
    with service as (url, token):
        before = service.cpu_seconds()
        commits0 = pg_commit_count(target.url) if target.dialect == "postgresql" else None
        result = b5.load_report(url, token, agents, n, door="http")
        cpu = service.cpu_seconds() - before
        commits = None
        if commits0 is not None:
            commits = pg_commit_count(target.url) - commits0
    return _figure(
        "HTTP",
        target.dialect,
        agents,
        n,
        result["seconds"],
        result["lat"],
        latency_ms,
        commits,
        cpu,
    )
