"""Replay eg's hot statements (captured) with fresh ids; server CPU per action vs the floor."""

import json
import os
import sys
import uuid

import psycopg
from pgproc import per_action

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
for key, text in json.loads(os.environ.get("WHOLE", "{}")).items():
    lst = journal if key[0] == "j" else receipt
    k = int(key[1:])
    p, v = lst[k]
    lst[k] = (Prepared(b"w" + p.name, text.encode(), p.names, p.types), v)
if edits and len(USED) != len(json.loads(edits)):
    raise SystemExit(f"edit not applied {USED}")
AUD = (
    "WITH aud_head AS (SELECT hash FROM audit_heads WHERE lane = $1::integer FOR UPDATE), "
    "aud_link AS (SELECT hash AS prev, encode(sha256(convert_to(hash || $2::text, 'UTF8')), 'hex') AS hash FROM aud_head), "
    "aud_ins AS (INSERT INTO audit_log (at, scope, operation_id, kind, detail, lane, prev_hash, hash) "
    "SELECT $3::float8, $4::text, $5::text, $6::text, $7::text, $1::integer, l.prev, l.hash FROM aud_link l RETURNING seq) "
    "UPDATE audit_heads SET seq = (SELECT seq FROM aud_ins), hash = (SELECT hash FROM aud_link) WHERE lane = $1::integer"
)


def P(name, text, n):
    return Prepared(name.encode(), text.encode(), tuple(str(i) for i in range(n)), (0,) * n)


if os.environ.get("SPLIT"):
    (lp, lv), (jp, jv) = journal
    ((rp, rv),) = receipt
    ins = " ".join(jp.text.decode().split())
    ops_sql = (
        "INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, intent, effect, tier, reason, policy_version, created_at, updated_at, submitted_at) "
        "VALUES ($2, $3, $4, $1, $5, $6, $7, $8, $9, $10, $11, $12::float8, $12::float8, $13::float8) ON CONFLICT DO NOTHING RETURNING 1"
    )
    split = os.environ["SPLIT"]
    journal0, receipt0 = journal, receipt
    journal = [
        (lp, lv),
        (P("s_ops", ops_sql, 13), jv[:13]),
        (
            P(
                "s_dl",
                "INSERT INTO dispatch_log (action, at, op_key, value_micros) VALUES ($1, $2::float8, $3, $4::bigint)",
                4,
            ),
            [jv[0], jv[11], jv[3], jv[13]],
        ),
        (P("s_aud", AUD, 7), jv[20:27]),
    ]
    upd = (
        "UPDATE operations SET state = $1, updated_at = $2::float8, version = version + 1, venue_id = coalesce($3, venue_id), detail = coalesce($4, detail), "
        "submitted_at = coalesce($5::float8, submitted_at), lease_owner = NULL, lease_until = NULL WHERE scope = $6 AND operation_id = $7 AND state = $8 RETURNING version, venue_id, detail, submitted_at"
    )
    receipt = [(P("s_upd", upd, 8), rv[:8]), (P("s_aud", AUD, 7), rv[8:15])]
    if split == "r":
        journal = journal0
    if split == "j":
        receipt = receipt0
    if split == "noaud":
        journal = journal[:3]
        receipt = receipt[:1]
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
            trip(conn, [(FixedP(p), vv) for p, vv in batch])


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


for k in range(3):
    print("eg-sql wall %.0f client %.0f server %.0f" % per_action(lambda: run_eg(f"e{k}-", n), n))
    print(
        "floor  wall %.0f client %.0f server %.0f"
        % per_action(lambda: floor(f"f{k}-", 0, n, None), n)
    )
close()
store.close()
