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
sys.path.append(str(Path(__file__).resolve().parents[2] / "2026-12-03-s33" / "tools"))
import psycopg
from lean_work import LeanAction, check_acknowledged, run_round
from pgproc import per_action
from recorder import swap

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


def encoded(p: Any, params: Any, op: str, now: float) -> tuple[Encoded, list[bytes | None]]:
    """One captured statement for action ``op`` at ``now``, encoded by its own wire form."""
    if isinstance(params, dict):
        params = {key: swap(v, "OPX0", op, started, now) for key, v in params.items()}
    else:
        params = [swap(v, "OPX0", op, started, now) for v in params]
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
for k in range(rounds):
    run_round(
        k,
        lambda fn: per_action(fn, n),
        {
            "floor": lambda k=k: floor(f"fa{k}-", 0, n, None),
            "replay": replay(f"r{k}-", None),
            "lean": replay(f"l{k}-", LeanAction(gate)),
            "effectgate": lambda k=k: _gate_loop(gate, f"g{k}-", 0, n, None),
            "floor2": lambda k=k: floor(f"fb{k}-", 0, n, None),
        },
        "c",
    )
done = {
    prefix: conn.execute(
        "SELECT count(*) FROM operations WHERE operation_id LIKE %s AND state = 'acknowledged'",
        (f"{prefix}_-%",),
    ).fetchone()[0]  # type: ignore[index]
    for prefix in ("r", "l")
}
check_acknowledged(done, n * rounds)
close()
conn.execute(f"DROP SCHEMA {schema} CASCADE")
conn.close()
store.close()
