"""B3: duplicates and kill -9: N operation ids, each sent 2-8 times by concurrent executors.

The venue is the paper venue over real HTTP on loopback (a thread of this process), honouring the
operation key and counting every ``POST`` per key, so a second dispatch of one key would show even
though the venue would not apply it twice. Executors are separate processes sharing one ledger;
each claims the next submission from a shared counter. Now and then an executor arms the
``after_journal`` crash point and SIGKILLs itself at its next fresh dispatch: the row is durably
``submitted`` and the venue never heard of it. A replacement executor takes over the queue.

Recovery is what a harness does: once the visibility horizon has passed, one reconciler sweep
writes the never-sent rows off as ``failed`` (absent at the venue past the horizon: proof), and
the harness re-authorises each of those actions under a new operation id (a continuation,
invariant 9; effectgate itself never re-sends a ``submitted`` row). The run passes only if, after
that, the venue received exactly N calls, at most one per key, one effect per logical action, and
no row is left uncertain.

There is no raw floor for B3; its figures are correctness counts and two latencies: the repeat
call (a duplicate answered from the ledger) next to a first call, and the time to full recovery.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import secrets
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate.adapters.paper import PaperVenue
from effectgate.bench.common import INTENT_BODY, Figure, Target, bench_policy, summarise
from effectgate.errors import ConfigError
from effectgate.examples import cancel_order_class, submit_order_class

__all__ = ["CountingVenue", "run"]

HORIZON = 1.0  # seconds: the paper venue shows writes at once; 1 s of slack is plenty
KEY_RETENTION = 3600.0


class CountingVenue(PaperVenue):
    """The paper venue, counting every submit call per operation key (before applying it)."""

    def __init__(self) -> None:
        super().__init__(honour_key=True)
        self.calls_by_key: dict[str, int] = {}
        self._count_lock = threading.Lock()

    def submit(self, operation_key: str, action: str, effect: Any) -> tuple[str, bool]:
        with self._count_lock:
            self.calls_by_key[operation_key] = self.calls_by_key.get(operation_key, 0) + 1
        return super().submit(operation_key, action, effect)


def registry(adapter: str) -> Registry:
    return Registry(
        [
            submit_order_class(adapter, HORIZON, KEY_RETENTION),
            cancel_order_class(adapter, HORIZON, KEY_RETENTION),
        ]
    )


def _worker(
    url: str,
    venue_url: str,
    api_key: str,
    plan: list[int],
    cursor: Synchronized[int],
    die_after: int | None,
    results: Queue[dict[str, Any]],
) -> None:
    """One executor process: claim submissions until none are left (or until it is killed)."""
    from effectgate._execute import crashpoints
    from effectgate._execute.executor import Gate
    from effectgate.adapters.http import HttpVenueAdapter
    from effectgate.store import open_store

    store = open_store(url, create=True)
    adapter = HttpVenueAdapter(venue_url, credential=api_key, timeout=30.0)
    gate = Gate(
        store=store, registry=registry("http"), adapters={"http": adapter}, policy=bench_policy()
    )
    fresh: list[float] = []
    repeat: list[float] = []
    done = 0
    while True:
        with cursor.get_lock():
            index = cursor.value
            cursor.value += 1
        if index >= len(plan):
            break
        if die_after is not None and done == die_after:
            crashpoints.arm("after_journal")  # SIGKILL at the next fresh dispatch
        t0 = time.perf_counter()
        row = gate.submit("submit_order", f"b3-{plan[index]:06d}", INTENT_BODY)
        (repeat if row.replayed else fresh).append(time.perf_counter() - t0)
        done += 1
    results.put({"fresh": fresh, "repeat": repeat})
    adapter.close()
    store.close()


def run(
    target: Target, n: int, *, smoke: bool = False, workers: int = 4, kills: int | None = None
) -> list[Figure]:
    from effectgate.adapters._paper_server import serve_paper_venue

    kills = kills if kills is not None else (2 if smoke else 20)
    rng = random.Random(6)
    copies = {j: rng.randint(2, 8) for j in range(n)}
    plan = [j for j, c in copies.items() for _ in range(c)]
    rng.shuffle(plan)
    api_key = secrets.token_urlsafe(16)
    venue = CountingVenue()
    with _ledger(target) as url, serve_paper_venue(venue, api_key=api_key) as server:
        load = _load(url, server.url, api_key, plan, workers, kills, rng)
        t_end = time.perf_counter()
        recovery = _recover(url, server.url, api_key, t_end)
        check = _verify(url, venue, n)
    total_calls = sum(venue.calls_by_key.values())
    notes = {
        "ids": n,
        "submissions": len(plan),
        "workers": workers,
        "executors_killed": load["killed"],
        "venue_calls": total_calls,
        "venue_effects": venue.effect_count,
        "max_calls_per_key": max(venue.calls_by_key.values(), default=0),
        "rows_written_off_then_reauthorised": recovery["continued"],
        "left_uncertain": check["uncertain"],
    }
    ok = (
        total_calls == n
        and venue.effect_count == n
        and notes["max_calls_per_key"] == 1
        and check["uncertain"] == 0
        and check["logical_actions_applied"] == n
    )
    if not ok:
        raise ConfigError(f"B3 FAILED exactly-once: {notes} {check}")
    return [
        Figure(
            "B3",
            f"{target.label}: venue calls after recovery (must equal ids)",
            "calls",
            float(total_calls),
            float(n),
            notes,
        ),
        Figure(
            "B3",
            "submissions under duplicates and kills",
            "submissions/s",
            len(plan) / load["seconds"],
            None,
            {"first_call": summarise(load["fresh"]), "repeat_call": summarise(load["repeat"])},
        ),
        Figure(
            "B3",
            "time to full recovery",
            "s",
            recovery["seconds"],
            None,
            {
                "visibility_horizon_s": HORIZON,
                "wait_for_horizon_s": round(recovery["waited"], 3),
                "sweep_and_continuations_s": round(recovery["seconds"] - recovery["waited"], 3),
            },
            better="lower",
        ),
    ]


def _ledger(target: Target) -> Any:
    from contextlib import contextmanager

    @contextmanager
    def ctx() -> Any:
        if target.dialect == "sqlite":
            with target.sqlite_file("b3") as path:
                from effectgate.store.sqlite import SQLiteStore

                SQLiteStore(path).close()  # migrate once, before the executors race
                yield f"sqlite:///{path}"
        else:
            with target.pg_schema("b3") as url:
                from effectgate.store import open_store

                open_store(url, create=True).close()
                yield url

    return ctx()


def _load(
    url: str,
    venue_url: str,
    api_key: str,
    plan: list[int],
    workers: int,
    kills: int,
    rng: random.Random,
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    cursor: Synchronized[int] = ctx.Value("q", 0)
    results: Queue[dict[str, Any]] = ctx.Queue()
    budget = kills
    killed = 0
    per_worker = max(1, len(plan) // workers)

    def spawn() -> Any:
        nonlocal budget
        die = None
        if budget > 0:
            budget -= 1
            die = rng.randint(1, max(2, per_worker // max(1, kills // workers + 1)))
        p = ctx.Process(
            target=_worker, args=(url, venue_url, api_key, plan, cursor, die, results), daemon=True
        )
        p.start()
        return p

    t0 = time.perf_counter()
    live = [spawn() for _ in range(workers)]
    fresh: list[float] = []
    repeat: list[float] = []
    finished = 0
    while live:
        time.sleep(0.01)
        while not results.empty():
            r = results.get()
            fresh.extend(r["fresh"])
            repeat.extend(r["repeat"])
            finished += 1
        for p in list(live):
            if p.exitcode is None:
                continue
            live.remove(p)
            if p.exitcode == -9:
                killed += 1
                if cursor.value < len(plan):
                    live.append(spawn())
            elif p.exitcode != 0:
                raise ConfigError(f"B3 executor exited with {p.exitcode}")
    seconds = time.perf_counter() - t0
    while finished < workers and not results.empty():
        r = results.get()
        fresh.extend(r["fresh"])
        repeat.extend(r["repeat"])
        finished += 1
    return {"seconds": seconds, "killed": killed, "fresh": fresh, "repeat": repeat}


def _recover(url: str, venue_url: str, api_key: str, t_end: float) -> dict[str, Any]:
    """Sweep past the horizon, then re-authorise every written-off action under a new id."""
    from effectgate._execute.executor import Gate
    from effectgate._execute.reconciler import Reconciler
    from effectgate.adapters.http import HttpVenueAdapter
    from effectgate.store import open_store

    store = open_store(url, create=True)
    adapter = HttpVenueAdapter(venue_url, credential=api_key, timeout=30.0)
    reg = registry("http")
    try:
        last = max(
            (
                r.submitted_at or 0.0
                for r in store.list_operations(state=State.SUBMITTED, limit=1_000_000)
            ),
            default=0.0,
        )
        wait = max(0.0, last + HORIZON - time.time())
        time.sleep(wait)
        rec = Reconciler(store=store, registry=reg, adapters={"http": adapter}, keep_repaired=False)
        rec.sweep()
        gate = Gate(store=store, registry=reg, adapters={"http": adapter}, policy=bench_policy())
        failed = store.list_operations(state=State.FAILED, limit=1_000_000)
        for row in failed:
            if row.operation_id.endswith(".r1"):
                raise ConfigError(f"continuation {row.operation_id} failed too")
            again = gate.submit("submit_order", f"{row.operation_id}.r1", INTENT_BODY)
            if again.state is not State.ACKNOWLEDGED:
                raise ConfigError(f"continuation of {row.operation_id} ended {again.state}")
    finally:
        adapter.close()
        store.close()
    return {"seconds": time.perf_counter() - t_end, "waited": wait, "continued": len(failed)}


def _verify(url: str, venue: CountingVenue, n: int) -> dict[str, int]:
    from effectgate.store import open_store

    store = open_store(url, create=True)
    try:
        uncertain = len(store.list_operations(state=State.SUBMITTED, limit=1_000_000))
        applied = 0
        for j in range(n):
            key = f"default:b3-{j:06d}"
            effects = venue.effects_for(key) + venue.effects_for(f"{key}.r1")
            if effects != 1:
                raise ConfigError(f"B3: logical action b3-{j:06d} has {effects} effects")
            applied += 1
    finally:
        store.close()
    return {"uncertain": uncertain, "logical_actions_applied": applied}
