"""B1 side by side with DBOS Transact, on the same store kind, in the same run.

    pip install -e '.[bench]'
    python benchmarks/dbos_compare.py --n 2000 \
        --pg postgresql://postgres@127.0.0.1:5432/eg_bench

For each store kind (SQLite in WAL mode with synchronous=FULL; PostgreSQL if ``--pg`` is given)
it runs, each in a fresh subprocess (DBOS is a process-wide singleton), in alternating rounds:

* effectgate: ``Gate.submit`` on raw intent bytes (strict parse, policy, journal, paper-venue
  call in process, receipt): the B1 workload of ``effectgate bench``;
* DBOS: one durable workflow per action, started under ``SetWorkflowID(operation id)`` (DBOS's
  idempotency key), whose single ``@DBOS.step`` makes the same paper-venue call. DBOS is given
  less to do than effectgate: no intent parse, no policy, no audit.

It prints actions/s for both and effectgate's ratio. The SQLite file for DBOS is switched to WAL
before DBOS opens it (DBOS leaves the journal mode at SQLite's default); synchronous stays at
SQLite's default, FULL, for both. On PostgreSQL both use the server's settings
(synchronous_commit=on) and one caller thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any


def _child_effectgate(url: str, n: int) -> dict[str, Any]:
    from effectgate.adapters.paper import PaperAdapter, PaperVenue
    from effectgate.bench.common import INTENT_BODY, bench_gate
    from effectgate.store import open_store

    store = open_store(url, create=True)
    gate = bench_gate(store, PaperAdapter(PaperVenue()))
    for i in range(100):  # warm-up
        gate.submit("submit_order", f"w{i}", INTENT_BODY)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        row = gate.submit("submit_order", f"op{i}", INTENT_BODY)
        if row.state.value != "acknowledged":
            raise RuntimeError(f"effectgate action {i} ended {row.state.value}")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return {"actions_per_s": n / seconds, "seconds": seconds, "cpu_us_per_action": cpu / n * 1e6}


def _child_dbos(url: str, n: int) -> dict[str, Any]:
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    from effectgate.adapters.paper import PaperVenue
    from effectgate.bench.common import INTENT_BODY

    venue = PaperVenue()
    effect = json.loads(INTENT_BODY)

    @DBOS.step()
    def place(key: str) -> str:
        venue_id, _ = venue.submit(key, "submit_order", effect)
        return venue_id

    @DBOS.workflow()
    def action(key: str) -> str:
        return place(key)

    config: DBOSConfig = {
        "name": "effectgate-bench",
        "system_database_url": url,
        "log_level": "ERROR",
    }
    DBOS(config=config)
    DBOS.launch()
    try:
        for i in range(100):  # warm-up
            with SetWorkflowID(f"w{i}"):
                action(f"w{i}")
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            with SetWorkflowID(f"op{i}"):
                action(f"op{i}")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        DBOS.destroy()
    if venue.effect_count != n + 100:
        raise RuntimeError(f"DBOS made {venue.effect_count} effects, not {n + 100}")
    return {"actions_per_s": n / seconds, "seconds": seconds, "cpu_us_per_action": cpu / n * 1e6}


def _spawn(kind: str, url: str, n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "effectgate.bench.dbos_compare",
            "--child",
            kind,
            "--url",
            url,
            "--n",
            str(n),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _sqlite_urls(directory: str, tag: str) -> tuple[str, str]:
    eg = os.path.join(directory, f"eg-{tag}.db")
    dbos = os.path.join(directory, f"dbos-{tag}.sqlite")
    conn = sqlite3.connect(dbos)
    conn.execute("PRAGMA journal_mode = WAL")  # persistent in the file: DBOS opens it in WAL
    conn.close()
    return f"sqlite:///{eg}", f"sqlite:///{dbos}"


def _pg_urls(base: str, tag: str) -> tuple[str, str, list[str]]:
    import psycopg

    from effectgate.store.base import with_schema

    suffix = uuid.uuid4().hex[:8]
    schema = f"eg_cmp_{tag}_{suffix}"
    db = f"dbos_cmp_{tag}_{suffix}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    head, _, _ = base.rpartition("/")
    return with_schema(base, schema), f"{head}/{db}", [schema, db]


def _pg_cleanup(base: str, schema: str, db: str) -> None:
    import psycopg

    from effectgate.store.postgres import drop_schema

    drop_schema(base, schema)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def compare(n: int, rounds: int, pg: str | None) -> list[dict[str, Any]]:
    rows = []
    kinds = ["sqlite"] + (["postgresql"] if pg else [])
    for kind in kinds:
        eg_rates, dbos_rates = [], []
        # Process CPU per action (all the child's threads): on a shared machine the wall-clock
        # rates move with the neighbours, the CPU a side spends per action much less.
        eg_cpu, dbos_cpu = [], []
        for r in range(rounds):
            with tempfile.TemporaryDirectory(prefix="eg-dbos-") as tmp:
                if kind == "sqlite":
                    eg_url, dbos_url = _sqlite_urls(tmp, str(r))
                    cleanup = None
                else:
                    if pg is None:
                        raise SystemExit("--pg URL is needed for the PostgreSQL comparison")
                    eg_url, dbos_url, names = _pg_urls(pg, str(r))
                    cleanup = names
                try:
                    order = ("eg", "dbos") if r % 2 == 0 else ("dbos", "eg")
                    for side in order:
                        if side == "eg":
                            got = _spawn("effectgate", eg_url, n)
                            eg_rates.append(got["actions_per_s"])
                            eg_cpu.append(got["cpu_us_per_action"])
                        else:
                            got = _spawn("dbos", dbos_url, n)
                            dbos_rates.append(got["actions_per_s"])
                            dbos_cpu.append(got["cpu_us_per_action"])
                finally:
                    if cleanup is not None and pg is not None:
                        _pg_cleanup(pg, cleanup[0], cleanup[1])
        eg_rate = sum(eg_rates) / len(eg_rates)
        dbos_rate = sum(dbos_rates) / len(dbos_rates)
        rows.append(
            {
                "store": kind,
                "n": n,
                "rounds": rounds,
                "effectgate_actions_per_s": eg_rate,
                "dbos_actions_per_s": dbos_rate,
                "ratio": eg_rate / dbos_rate,
                "effectgate_rounds": eg_rates,
                "dbos_rounds": dbos_rates,
                "effectgate_cpu_us_per_action": sum(eg_cpu) / len(eg_cpu),
                "dbos_cpu_us_per_action": sum(dbos_cpu) / len(dbos_cpu),
                "cpu_ratio": sum(dbos_cpu) / sum(eg_cpu),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="actions per side per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--pg",
        help="PostgreSQL base URL (a database you may create databases "
        "and schemas in); omitted: SQLite only",
    )
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", choices=["effectgate", "dbos"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = _child_effectgate if args.child == "effectgate" else _child_dbos
        print(json.dumps(fn(args.url, args.n)))
        return
    rows = compare(args.n, args.rounds, args.pg)
    print(f"{'store':<12}{'effectgate':>16}{'DBOS Transact':>16}{'ratio':>9}{'CPU ratio':>11}")
    for row in rows:
        print(
            f"{row['store']:<12}{row['effectgate_actions_per_s']:>12,.0f} a/s"
            f"{row['dbos_actions_per_s']:>12,.0f} a/s{row['ratio']:>8.1f}x"
            f"{row['cpu_ratio']:>10.1f}x  (CPU/action {row['effectgate_cpu_us_per_action']:,.0f}"
            f" vs {row['dbos_cpu_us_per_action']:,.0f} us)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
