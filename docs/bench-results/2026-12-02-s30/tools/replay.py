"""Replay eg's hot statements (captured) with fresh ids; server CPU per action vs the floor."""

import json
import os
import sys
import time
import uuid

import psycopg

import effectgate.store._postgres_conn as pc
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop, pg_floor
from effectgate.bench.common import bench_gate
from effectgate.store import open_store
from effectgate.store._postgres_wire import Prepared, trip
from effectgate.store.base import with_schema

PG = os.environ.get("PG", "postgresql://postgres@127.0.0.1:5432/eg_bench")
schema = "rp_" + uuid.uuid4().hex[:6]
url = with_schema(PG, schema)
captured = []
orig = pc.trip


def spy(conn, statements):
    captured.append([(p, p.encode(params)) for p, params in statements])
    return orig(conn, statements)


pc.trip = spy
store = open_store(url, create=True)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
_gate_loop(gate, "OPX", 0, 1, None)
pc.trip = orig
journal, receipt = captured[0], captured[1]
# variants: env EDIT=python expr over text
edits = os.environ.get("EDIT")


def variant(p, vals):
    text = " ".join(p.text.decode().split())
    if edits:
        for a, b in json.loads(edits):
            if a in text:
                USED.add(a)
            text = text.replace(a, b)
    return Prepared(b"v_" + p.name, text.encode(), p.names, p.types), vals


USED = set()
journal = [variant(p, v) for p, v in journal]
if os.environ.get("DROPLOCK"):
    journal = journal[1:]
receipt = [variant(p, v) for p, v in receipt]
if edits and len(USED) != len(json.loads(edits)):
    raise SystemExit(f"edit not applied {USED}")
TICK = os.sysconf("SC_CLK_TCK")


def pgcpu():
    t = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        if not s[s.index("(") + 1 :].startswith("postgres"):
            continue
        fields = s[s.rindex(")") + 2 :].split()
        t += int(fields[11]) + int(fields[12])
    return t / TICK


conn = psycopg.connect(PG, autocommit=True)
conn.execute(f"SET search_path TO {schema}")
for ddl in json.loads(os.environ.get("DDL", "[]")):
    conn.execute(ddl)


def run_eg(prefix, n):
    for i in range(n):
        oid = f"{prefix}{i}".encode()
        for stmts in (journal, receipt):
            batch = []
            for p, vals in stmts:
                vv = [None if v is None else v.replace(b"OPX0", oid) for v in vals]
                batch.append((p, vv))
            res = trip(conn, [(FixedP(p), vv) for p, vv in batch])


class FixedP:
    __slots__ = ("name", "p", "text", "types")

    def __init__(self, p):
        self.p = p
        self.name = p.name
        self.text = p.text
        self.types = p.types

    def encode(self, vals):
        return vals


floor, close = pg_floor(url)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
run_eg("w", 100)
floor("fw", 0, 100, None)


def meas(fn):
    s0, c0, t0 = pgcpu(), time.process_time(), time.perf_counter()
    fn()
    return (
        (time.perf_counter() - t0) / n * 1e6,
        (time.process_time() - c0) / n * 1e6,
        (pgcpu() - s0) / n * 1e6,
    )


for k in range(3):
    print("eg-sql wall %.0f client %.0f server %.0f" % meas(lambda: run_eg(f"e{k}-", n)))
    print("floor  wall %.0f client %.0f server %.0f" % meas(lambda: floor(f"f{k}-", 0, n, None)))
close()
store.close()
