"""B1 on PostgreSQL: the floor, the replayed trips, the lean path and effectgate, same rounds.

usage: python pg_lean.py N [ROUNDS]   (PG: the server's URL, default the bench database)

Captures the two trips (journal, receipt) of one real B1 action as handed to the wire layer,
then times per round: the floor (``effectgate bench``'s own); the two trips replayed, each
action's id and instants swapped in and its parameters encoded before the timed loop (no other
Python); the lean path (the same trips with ``lean_work``'s Python before each, where the real
path does that work); effectgate's own loop; the floor again. Each figure is wall, this
process's CPU (c) and every ``postgres`` process's CPU (s), in us per action (``pgproc`` of the
2026-12-02 sitting). A one-off measurement, not an API.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2] / "2026-12-02-s30" / "tools"))
import psycopg
from lean_work import LeanAction
from pgproc import per_action

import effectgate.store._postgres_conn as pc
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop, pg_floor
from effectgate.bench.common import bench_gate
from effectgate.store import open_store
from effectgate.store._postgres_wire import trip
from effectgate.store.base import with_schema

PG = os.environ.get("PG", "postgresql://postgres@127.0.0.1:5432/eg_bench")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
schema = "lean_" + uuid.uuid4().hex[:6]
url = with_schema(PG, schema)
store = open_store(url, create=True)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
captured: list[list[tuple[Any, Any]]] = []
real_trip = pc.trip


def spy(conn: Any, statements: Any) -> Any:
    captured.append(list(statements))
    return real_trip(conn, statements)


pc.trip = spy
started = time.time()
_gate_loop(gate, "OPX", 0, 1, None)
pc.trip = real_trip
journal, receipt = captured


class Encoded:
    """A captured statement whose parameters are already on the wire's terms."""

    __slots__ = ("name", "text", "types")

    def __init__(self, p: Any) -> None:
        self.name, self.text, self.types = p.name, p.text, p.types

    def encode(self, vals: Any) -> Any:
        return vals


TRIPS = (journal, receipt)
conn = psycopg.connect(PG, autocommit=True)
conn.execute(f"SET search_path TO {schema}")


def _swap(v: Any, op: str, now: float) -> Any:
    if isinstance(v, str) and "OPX0" in v:
        return v.replace("OPX0", op)
    if isinstance(v, float) and v > started - 1:
        return now
    return v


def encoded(p: Any, params: Any, op: str, now: float) -> tuple[Encoded, list[bytes | None]]:
    """One captured statement for action ``op`` at ``now``, encoded by its own wire form."""
    if isinstance(params, dict):
        params = {key: _swap(v, op, now) for key, v in params.items()}
    else:
        params = [_swap(v, op, now) for v in params]
    return Encoded(p), p.encode(params)


def replay(prefix: str, lean: LeanAction | None) -> Callable[[], None]:
    """Both trips of ``n`` actions, encoded before the timed loop; ``lean``'s Python before
    each trip when given."""
    work = []
    for i in range(n):
        op, now = f"{prefix}{i}", time.time()
        work.append((op, [[encoded(p, ps, op, now) for p, ps in t] for t in TRIPS]))

    def run() -> None:
        for op, trips in work:
            if lean is not None:
                lean.journal(op)
            trip(conn, trips[0])
            if lean is not None:
                lean.receipt(op)
            trip(conn, trips[1])

    return run


floor, close = pg_floor(url)
replay("w", None)()
replay("wl", LeanAction(gate))()
floor("fw", 0, 100, None)
_gate_loop(gate, "gw", 0, 200, None)


def fmt(x: tuple[float, float, float]) -> str:
    return "{:.0f} (c{:.0f} s{:.0f})".format(*x)


for k in range(rounds):
    f1 = per_action(lambda k=k: floor(f"fa{k}-", 0, n, None), n)
    rp = per_action(replay(f"r{k}-", None), n)
    ln = per_action(replay(f"l{k}-", LeanAction(gate)), n)
    eg = per_action(lambda k=k: _gate_loop(gate, f"g{k}-", 0, n, None), n)
    f2 = per_action(lambda k=k: floor(f"fb{k}-", 0, n, None), n)
    fl = (f1[0] + f2[0]) / 2
    print(
        f"round {k}: floor {fmt(f1)} / {fmt(f2)}  replay {fmt(rp)} {fl / rp[0]:.2f}x  "
        f"lean {fmt(ln)} {fl / ln[0]:.2f}x  effectgate {fmt(eg)} {fl / eg[0]:.2f}x",
        flush=True,
    )
# Every replayed action wrote its row and moved it on: nothing was skipped as a conflict.
for prefix in ("r", "l"):
    done = conn.execute(
        "SELECT count(*) FROM operations WHERE operation_id LIKE %s AND state = 'acknowledged'",
        (f"{prefix}_-%",),
    ).fetchone()
    if done is None or done[0] != n * rounds:
        raise SystemExit(f"{prefix}: {done} acknowledged rows, expected {n * rounds}")
close()
conn.execute(f"DROP SCHEMA {schema} CASCADE")
conn.close()
store.close()
