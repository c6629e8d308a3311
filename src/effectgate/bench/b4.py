"""B4: the reconciler's sweep over a large ledger, against raw keyed paging plus the comparison.

The ledger is written straight into the store's ``operations`` table by bulk insert (``executemany``
in a few big transactions on SQLite, ``COPY`` on PostgreSQL): 98% acknowledged, 2% uncertain
(``submitted`` an hour ago). The venue is :class:`SyntheticVenue`, an adapter that computes its
records from the row number instead of storing them, so the venue costs no memory and the
measured process's peak RSS is the sweep's own: half of the uncertain rows (1% of all rows) have no
venue record (crashed before dispatch), 100 venue records are orphans and 10 keys carry two
records (duplicate effects).

Each measurement runs in a fresh subprocess so its peak RSS (``ru_maxrss``) is its own:

* ``sweep``: ``Reconciler.sweep()`` on the freshly generated ledger: it confirms 1% of the rows,
  writes off 1% (each a durable compare-and-set) and records 110 divergences;
* ``resweep``: the same sweep again (steady state: nothing left to repair);
* ``floor``: the same keyed page query as plain SQL, merge-joined with the same venue iterator,
  classifying every key (the set comparison), writing nothing.
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import groupby
from typing import Any

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    OutboundRequest,
    Receipt,
    VenueRecord,
)
from effectgate.bench.b1 import floor_row
from effectgate.bench.common import Figure, Target
from effectgate.errors import AdapterError, ConfigError

__all__ = ["SyntheticVenue", "generate_sqlite", "run"]

SCOPE = "b4"
WIDTH = 9  # zero-padded row numbers: key order is row order
PREFIX = f"{SCOPE}:op-"
PAGE = 1000
AGE = 3600.0  # rows were settled / submitted an hour ago: past every horizon


def key(i: int) -> str:
    return f"{PREFIX}{i:0{WIDTH}d}"


def uncertain(i: int) -> bool:
    return i % 50 == 3


def missing(i: int) -> bool:
    """No venue record: half of the uncertain rows (crashed between journal and call)."""
    return i % 100 == 3


class SyntheticVenue(Adapter):
    """Venue records as a pure function of the row number: O(1) memory at any size."""

    name = "paper"

    def __init__(self, rows: int) -> None:
        if rows < 1000:
            raise ConfigError("B4 needs at least 1000 rows")
        self.rows = rows
        self.orphans = frozenset(k * (rows // 100) + 7 for k in range(100))
        self.duplicates = frozenset(k * (rows // 10) + 11 for k in range(10))

    def records_for(self, i: int) -> list[VenueRecord]:
        """Every record whose key sorts between key(i) (inclusive) and key(i + 1)."""
        k = key(i)
        out: list[VenueRecord] = []
        if not missing(i):
            out.append(VenueRecord(k, f"V{i:0{WIDTH}d}"))
            if i in self.duplicates:
                out.append(VenueRecord(k, f"V{i:0{WIDTH}d}b"))
        if i in self.orphans:
            out.append(VenueRecord(f"{k}~orphan", f"O{i:0{WIDTH}d}"))
        return out

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        i = 0 if after is None else int(after.operation_key[len(PREFIX) : len(PREFIX) + WIDTH])
        page: list[VenueRecord] = []
        while i < self.rows and len(page) < limit:
            for record in self.records_for(i):
                if (after is None or record > after) and len(page) < limit:
                    page.append(record)
            i += 1
        return page

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        i = int(operation_key[len(PREFIX) : len(PREFIX) + WIDTH])
        return [r.venue_id for r in self.records_for(i) if r.operation_key == operation_key]

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise AdapterError("the B4 venue is read-only")


# --- generation -----------------------------------------------------------------------------------


def _rows(n: int, now: float) -> Iterator[tuple[Any, ...]]:
    action, fp, intent, effect, tier, reason, version, _ = floor_row()
    old = now - AGE
    for i in range(n):
        op = f"op-{i:0{WIDTH}d}"
        if uncertain(i):
            yield (
                SCOPE,
                op,
                key(i),
                action,
                fp,
                "submitted",
                intent,
                effect,
                tier,
                reason,
                version,
                None,
                old,
                old,
                old,
            )
        else:
            yield (
                SCOPE,
                op,
                key(i),
                action,
                fp,
                "acknowledged",
                intent,
                effect,
                tier,
                reason,
                version,
                f"V{i:0{WIDTH}d}",
                old,
                old,
                old,
            )


_INSERT = (
    "INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, "
    "intent, effect, tier, reason, policy_version, venue_id, created_at, updated_at, "
    "submitted_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def generate_sqlite(path: str, n: int) -> None:
    """Create the store's schema (its own migration) and bulk-load ``n`` rows."""
    from effectgate.store.sqlite import SQLiteStore

    SQLiteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # setup only; the sweep runs at FULL
        rows = _rows(n, time.time())
        while True:
            chunk = [r for _, r in zip(range(200_000), rows, strict=False)]
            if not chunk:
                break
            conn.execute("BEGIN")
            conn.executemany(_INSERT, chunk)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


# --- the measured children ---------------------------------------------------------------------


def _reset_peak() -> None:
    """Forget the high-water mark inherited from the parent across fork and exec (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_mib() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child_sweep(url: str, rows: int) -> dict[str, Any]:
    from effectgate._execute.reconciler import Reconciler
    from effectgate.bench.common import bench_policy  # noqa: F401 - warm imports before timing
    from effectgate.examples import default_registry
    from effectgate.store import open_store

    store = open_store(url, create=True)
    venue = SyntheticVenue(rows)
    rec = Reconciler(
        store=store,
        registry=default_registry(),
        adapters={"paper": venue},
        page_size=PAGE,
        keep_repaired=False,
    )
    out: dict[str, Any] = {"rss_start_mib": _peak_mib()}
    for label in ("sweep", "resweep"):
        t0 = time.perf_counter()
        report = rec.sweep()
        out[label] = {
            "seconds": time.perf_counter() - t0,
            "ledger_rows": report.ledger_rows,
            "venue_records": report.venue_records,
            "confirmed": report.confirmed,
            "written_off": report.written_off,
            "quarantined": report.quarantined,
            "divergences": report.divergences_seen,
            "new_divergences": len(report.new_divergences),
            "peak_rss_mib": _peak_mib(),
        }
    store.close()
    return out


def child_floor(url: str, rows: int) -> dict[str, Any]:
    """Plain keyed paging with the store's page query, merge-joined with the same venue."""
    from effectgate._execute.adapter import iter_records
    from effectgate.store.base import parse_store_url

    venue = SyntheticVenue(rows)
    start_rss = _peak_mib()
    t0 = time.perf_counter()
    dialect, target = parse_store_url(url)
    if dialect != "sqlite":
        raise ConfigError("floor child: SQLite only in this build")
    conn = sqlite3.connect(target)
    sql = (
        "SELECT op_key, action, state, venue_id, submitted_at, updated_at FROM operations "
        "WHERE op_key > ? AND action IN (?,?) ORDER BY op_key LIMIT ?"
    )

    def ledger() -> Iterator[tuple[Any, ...]]:
        after = ""
        while True:
            page = conn.execute(sql, (after, "cancel_order", "submit_order", PAGE)).fetchall()
            yield from page
            if len(page) < PAGE:
                return
            after = page[-1][0]

    counts = {"match": 0, "confirm": 0, "absent": 0, "orphan": 0, "duplicate": 0}
    venue_groups = groupby(iter_records(venue, PAGE), key=lambda r: r.operation_key)
    led = ledger()
    entry = next(led, None)
    group = next(venue_groups, None)
    n_rows = 0
    while entry is not None or group is not None:
        if entry is not None and (group is None or entry[0] < group[0]):
            n_rows += 1
            counts["absent"] += 1
            entry = next(led, None)
            continue
        if group is None:
            break
        ids = [r.venue_id for r in group[1]]
        if entry is None or entry[0] > group[0]:
            counts["orphan"] += 1
        else:
            n_rows += 1
            if len(ids) > 1:
                counts["duplicate"] += 1
            elif entry[2] == "submitted":
                counts["confirm"] += 1
            elif entry[3] == ids[0]:
                counts["match"] += 1
            entry = next(led, None)
        group = next(venue_groups, None)
    conn.close()
    return {
        "floor": {
            "seconds": time.perf_counter() - t0,
            "ledger_rows": n_rows,
            **counts,
            "peak_rss_mib": _peak_mib(),
        },
        "rss_start_mib": start_rss,
    }


def _spawn(kind: str, url: str, rows: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "effectgate.bench.b4", kind, url, str(rows)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ConfigError(f"B4 {kind} child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run(target: Target, sizes: tuple[int, ...]) -> list[Figure] | str:
    if target.dialect != "sqlite":
        return "B4 runs on SQLite in this build (a PostgreSQL COPY loader is not written yet)"
    figures: list[Figure] = []
    for rows in sizes:
        figures.extend(_one(target, rows))
    return figures


def _one(target: Target, rows: int) -> list[Figure]:
    if target.dialect != "sqlite":
        raise ConfigError("B4 runs on SQLite in this build (PostgreSQL COPY loader: not yet)")
    with target.sqlite_file(f"b4-{rows}") as path:
        t0 = time.perf_counter()
        generate_sqlite(path, rows)
        gen = time.perf_counter() - t0
        url = f"sqlite:///{path}"
        floor = _spawn("floor", url, rows)
        eg = _spawn("sweep", url, rows)
    return figures_for(rows, gen, eg, floor)


def figures_for(rows: int, gen: float, eg: dict[str, Any], floor: dict[str, Any]) -> list[Figure]:
    fl = floor["floor"]
    out = []
    for label in ("sweep", "resweep"):
        s = eg[label]
        if s["ledger_rows"] != rows:
            raise ConfigError(f"B4 {label} saw {s['ledger_rows']} ledger rows, not {rows}")
        notes = {
            "rows": rows,
            "seconds": round(s["seconds"], 2),
            "floor_seconds": round(fl["seconds"], 2),
            "peak_rss_mib": round(s["peak_rss_mib"], 1),
            "floor_peak_rss_mib": round(fl["peak_rss_mib"], 1),
            "confirmed": s["confirmed"],
            "written_off": s["written_off"],
            "quarantined": s["quarantined"],
            "divergences": s["divergences"],
        }
        if label == "sweep":
            notes["generate_seconds"] = round(gen, 1)
        kind = "first sweep (repairs 2%)" if label == "sweep" else "repeat sweep"
        variant = f"{rows:,} rows, {kind}"
        figures_rate = rows / s["seconds"]
        out.append(Figure("B4", variant, "rows/s", figures_rate, rows / fl["seconds"], notes))
    return out


def main(argv: list[str]) -> None:
    _reset_peak()
    kind, url, rows = argv[0], argv[1], int(argv[2])
    result = child_sweep(url, rows) if kind == "sweep" else child_floor(url, rows)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
