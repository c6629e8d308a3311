"""B1 on PostgreSQL: the floor, the replayed trips, the lean bound and effectgate, same rounds.

usage: python pg_lean.py N [ROUNDS]   (PG: the server's URL, default the bench database)

Captures the two trips (journal, receipt) of one real B1 action as the wire layer encodes
them, then times per round: the floor (``effectgate bench``'s own); the two trips replayed
with the id swapped in (no other Python); the lean bound (the same trips with ``lean_work``'s
Python before each, where the real path does it); effectgate's own loop; the floor again.
Each figure is wall, this process's CPU (c) and every ``postgres`` process's CPU (s), in us per
action (``pgproc`` of the 2026-12-02 sitting). A one-off measurement, not an API.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "2026-12-02-s30" / "tools"))
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
captured: list[list[tuple[Any, list[bytes | None]]]] = []
real_trip = pc.trip


def spy(conn: Any, statements: Any) -> Any:
    captured.append([(p, p.encode(params)) for p, params in statements])
    return real_trip(conn, statements)


pc.trip = spy
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


TRIPS = [[(Encoded(p), vals) for p, vals in t] for t in (journal, receipt)]
conn = psycopg.connect(PG, autocommit=True)
conn.execute(f"SET search_path TO {schema}")


def bound(p: Encoded, vals: list[bytes | None], oid: bytes) -> tuple[Encoded, list[Any]]:
    return p, [None if v is None else v.replace(b"OPX0", oid) for v in vals]


def replay(prefix: str, lean: LeanAction | None) -> Callable[[], None]:
    def run() -> None:
        for i in range(n):
            op = f"{prefix}{i}"
            oid = op.encode()
            for k, stmts in enumerate(TRIPS):
                if lean is not None:
                    (lean.journal if k == 0 else lean.receipt)(op)
                trip(conn, [bound(p, vals, oid) for p, vals in stmts])

    return run


floor, close = pg_floor(url)
replay("w", None)()
replay("wl", LeanAction(gate))()
floor("fw", 0, 100, None)


def fmt(x: tuple[float, float, float]) -> str:
    return "{:.0f} (c{:.0f} s{:.0f})".format(*x)


for k in range(rounds):
    f1 = per_action(lambda k=k: floor(f"f{k}-", 0, n, None), n)
    rp = per_action(replay(f"r{k}-", None), n)
    ln = per_action(replay(f"l{k}-", LeanAction(gate)), n)
    eg = per_action(lambda k=k: _gate_loop(gate, f"g{k}-", 0, n, None), n)
    f2 = per_action(lambda k=k: floor(f"f2{k}-", 0, n, None), n)
    fl = (f1[0] + f2[0]) / 2
    print(
        f"round {k}: floor {fmt(f1)} / {fmt(f2)}  replay {fmt(rp)} {fl / rp[0]:.2f}x  "
        f"lean {fmt(ln)} {fl / ln[0]:.2f}x  effectgate {fmt(eg)} {fl / eg[0]:.2f}x",
        flush=True,
    )
close()
conn.close()
store.close()
