"""B1: one caller, N actions end to end, against the raw two-commit loop on the same store.

effectgate's side is ``Gate.submit`` on raw intent bytes: strict parse, validation, canonical
form and fingerprint, policy, one transaction journalling proposed -> validated -> submitted, the
in-process paper-venue call, and the receipt's transaction. The floor is the same two commits as
plain SQL on the same ``operations`` table (created by the store's own migration) through a
connection of its own: ``INSERT`` the submitted row, commit; conditional ``UPDATE`` to
acknowledged, commit. Nothing else: no parse, no audit rows, no venue.

The two loops alternate in rounds on one ledger, so disk state, cache and WAL size drift alike for
both, and each starts with a warm-up that is not timed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from effectgate._core.states import State
from effectgate._execute.executor import Gate
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.common import (
    INTENT_BODY,
    Figure,
    SQLiteCommitCounter,
    Target,
    bench_gate,
    pg_commit_count,
    summarise,
)
from effectgate.errors import StoreError
from effectgate.examples import default_registry
from effectgate.store.base import dumps

if TYPE_CHECKING:
    from effectgate.store.sqlite import SQLiteStore

__all__ = ["FloorRow", "floor_row", "pg_floor", "run", "sqlite_sides"]

ROUNDS = 5
WARMUP = 100
#: Actions per side in the untimed pass whose commits are counted (see ``_alternate``).
COUNTED = 300

FloorRow = tuple[str, str, str, str, str, str, str, str]


def floor_row() -> FloorRow:
    """The column values effectgate writes for the B1 intent, computed once outside any loop.

    (action, fingerprint, intent, effect, tier, reason, policy_version, venue state)
    """
    parsed = default_registry().parse("submit_order", INTENT_BODY)
    return (
        "submit_order",
        parsed.fingerprint,
        dumps(parsed.snapshot),
        dumps(parsed.effect),
        "validate",
        "value 400.00 within limit 1000000000",
        "limit-1",
        "acknowledged",
    )


def run(target: Target, n: int) -> list[Figure]:
    if target.dialect == "sqlite":
        return [_sqlite(target, n, "FULL"), _sqlite(target, n, "OFF")]
    return [_postgres(target, n)]


# --- the two loops ------------------------------------------------------------------------------


def _gate_loop(
    gate: Gate, prefix: str, start: int, count: int, latencies: list[float] | None
) -> None:
    clock = time.perf_counter
    submit = gate.submit
    for i in range(start, start + count):
        t0 = clock()
        row = submit("submit_order", f"{prefix}{i}", INTENT_BODY)
        if latencies is not None:
            latencies.append(clock() - t0)
        if row.state is not State.ACKNOWLEDGED:
            raise StoreError(f"B1 action {prefix}{i} ended {row.state.value}, not acknowledged")


def _alternate(
    n: int,
    eg: Callable[[int, int, list[float] | None], None],
    floor: Callable[[int, int, list[float] | None], None],
    on_count: Callable[[str, bool], None],
) -> dict[str, Any]:
    """Warm both up, count their commits in an untimed pass, then run them in alternating
    timed rounds; per-side seconds, latencies and the counted pass's commits.

    Commits are counted on the wire (``on_count(side, starting)`` around each side's counted
    pass) but not in the timed rounds: SQLite's trace callback expands every statement with
    its bound values, which costs effectgate's ten statements more than the floor's six
    (25-53 us of CPU per action in two measurements) and would be timed as the library's own
    cost. The path is the same in both passes: every action of either must end acknowledged.

    Each side's process CPU time is kept beside its wall time: on a shared machine the wall
    clock also counts other processes, this process's CPU does not (the library's own cost).
    """
    eg(0, WARMUP, None)
    floor(0, WARMUP, None)
    for side, fn in (("eg", eg), ("floor", floor)):
        on_count(side, True)
        fn(WARMUP, COUNTED, None)
        on_count(side, False)
    start = WARMUP + COUNTED
    spent = {"eg": 0.0, "floor": 0.0}
    cpu = {"eg": 0.0, "floor": 0.0}
    lat: dict[str, list[float]] = {"eg": [], "floor": []}
    per_round = max(1, n // ROUNDS)
    done = 0
    r = 0
    while done < n:
        count = min(per_round, n - done)
        order = (("eg", eg), ("floor", floor)) if r % 2 == 0 else (("floor", floor), ("eg", eg))
        for side, fn in order:
            t0, c0 = time.perf_counter(), time.process_time()
            fn(start + done, count, lat[side])
            cpu[side] += time.process_time() - c0
            spent[side] += time.perf_counter() - t0
        done += count
        r += 1
    return {"spent": spent, "lat": lat, "cpu": cpu}


def _figure(
    variant: str, n: int, result: dict[str, Any], commits: dict[str, int], durability_off: bool
) -> Figure:
    spent, lat = result["spent"], result["lat"]
    eg_rate, floor_rate = n / spent["eg"], n / spent["floor"]
    cpu_us = {side: round(1e6 * result["cpu"][side] / n, 1) for side in ("eg", "floor")}
    notes: dict[str, Any] = {
        "n": n,
        "effectgate": {
            **summarise(lat["eg"]),
            "commits_per_action": commits["eg"] / COUNTED,
            "cpu_us_per_action": cpu_us["eg"],
        },
        "floor": {
            **summarise(lat["floor"]),
            "commits_per_action": commits["floor"] / COUNTED,
            "cpu_us_per_action": cpu_us["floor"],
        },
    }
    if durability_off:
        notes["overhead_us_per_action"] = round(1e6 / eg_rate - 1e6 / floor_rate, 1)
        # The same, in this process's CPU time (what the library costs, whatever else runs).
        notes["cpu_overhead_us_per_action"] = round(cpu_us["eg"] - cpu_us["floor"], 1)
    return Figure("B1", variant, "actions/s", eg_rate, floor_rate, notes)


# --- SQLite --------------------------------------------------------------------------------------

_SQLITE_INSERT = (
    "INSERT INTO operations (scope, operation_id, op_key, action, fingerprint, state, intent, "
    "effect, tier, reason, policy_version, created_at, updated_at, submitted_at) "
    "VALUES (?,?,?,?,?,'submitted',?,?,?,?,?,?,?,?)"
)
_SQLITE_UPDATE = (
    "UPDATE operations SET state = 'acknowledged', updated_at = ?, version = version + 1, "
    "venue_id = ? WHERE scope = ? AND operation_id = ? AND state = 'submitted'"
)


def _sqlite_floor(
    conn: sqlite3.Connection, row: FloorRow
) -> Callable[[int, int, list[float] | None], None]:
    action, fp, intent, effect, tier, reason, version, _ = row
    execute = conn.execute
    clock = time.perf_counter

    def loop(start: int, count: int, latencies: list[float] | None) -> None:
        for i in range(start, start + count):
            t0 = clock()
            op = f"f{i}"
            now = time.time()
            execute("BEGIN IMMEDIATE")
            execute(
                _SQLITE_INSERT,
                (
                    "floor",
                    op,
                    f"floor:{op}",
                    action,
                    fp,
                    intent,
                    effect,
                    tier,
                    reason,
                    version,
                    now,
                    now,
                    now,
                ),
            )
            execute("COMMIT")
            execute("BEGIN IMMEDIATE")
            cur = execute(_SQLITE_UPDATE, (now, f"V-{i}", "floor", op))
            if cur.rowcount != 1:
                raise StoreError(f"floor update of {op} matched {cur.rowcount} rows")
            execute("COMMIT")
            if latencies is not None:
                latencies.append(clock() - t0)

    return loop


def sqlite_sides(path: str, synchronous: str) -> tuple[SQLiteStore, Gate, sqlite3.Connection]:
    """Both sides of B1 on one SQLite file: the store, its bench gate, and the floor's own
    autocommit connection with the same ``synchronous`` (and a busy timeout, should a
    checkpoint hold the lock). The caller closes the connection and the store."""
    from effectgate.store.sqlite import SQLiteStore

    store = SQLiteStore(path, synchronous=synchronous)
    gate = bench_gate(store, PaperAdapter(PaperVenue()))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return store, gate, conn


def _sqlite(target: Target, n: int, synchronous: str) -> Figure:
    with target.sqlite_file(f"b1-{synchronous.lower()}") as path:
        store, gate, conn = sqlite_sides(path, synchronous)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            commits = {"eg": 0, "floor": 0}
            counting: dict[str, SQLiteCommitCounter] = {}

            def on_count(side: str, starting: bool) -> None:
                # The trace callback is attached for the counted pass only (see _alternate).
                if starting:
                    counting[side] = (
                        SQLiteCommitCounter.on_store(store)
                        if side == "eg"
                        else SQLiteCommitCounter(conn)
                    )
                else:
                    counter = counting.pop(side)
                    counter.stop()
                    commits[side] += counter.commits

            result = _alternate(
                n,
                lambda s, c, lat: _gate_loop(gate, "e", s, c, lat),
                _sqlite_floor(conn, floor_row()),
                on_count,
            )
        finally:
            conn.close()
            store.close()
    variant = f"SQLite {mode.upper()} synchronous={synchronous}"
    return _figure(variant, n, result, commits, durability_off=synchronous == "OFF")


# --- PostgreSQL ----------------------------------------------------------------------------------

_PG_INSERT = _SQLITE_INSERT.replace("?", "%s")
_PG_UPDATE = _SQLITE_UPDATE.replace("?", "%s")


def pg_floor(
    url: str,
) -> tuple[Callable[[str, int, int, list[float] | None], None], Callable[[], None]]:
    """The raw PostgreSQL floor on the schema of ``url``: ``(loop, close)``.

    ``loop(prefix, start, count, latencies)`` runs operations ``prefix + i`` for ``i`` in
    ``start .. start + count``. Each statement runs alone on an autocommit connection: its own
    transaction, one round trip, prepared by psycopg after five runs. The least any client can
    do (cheaper on the client than BEGIN/statement/COMMIT pipelined, same round trips).
    """
    import psycopg
    from psycopg import sql

    from effectgate.store.postgres import split_schema

    conninfo, schema = split_schema(url)
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema or "")))
    action, fp, intent, effect, tier, reason, version, _ = floor_row()
    clock = time.perf_counter

    def loop(prefix: str, start: int, count: int, latencies: list[float] | None) -> None:
        for i in range(start, start + count):
            t0 = clock()
            op = f"{prefix}{i}"
            now = time.time()
            conn.execute(
                _PG_INSERT,
                (
                    "floor",
                    op,
                    f"floor:{op}",
                    action,
                    fp,
                    intent,
                    effect,
                    tier,
                    reason,
                    version,
                    now,
                    now,
                    now,
                ),
            )
            cur = conn.execute(_PG_UPDATE, (now, f"V-{i}", "floor", op))
            if cur.rowcount != 1:
                raise StoreError(f"floor update of {op} matched {cur.rowcount} rows")
            if latencies is not None:
                latencies.append(clock() - t0)

    return loop, conn.close


def _postgres(target: Target, n: int) -> Figure:
    from effectgate.store import open_store

    with target.pg_schema("b1") as url:
        store = open_store(url, create=True)
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        loop, close = pg_floor(url)

        commits = {"eg": 0, "floor": 0}
        marks: dict[str, int] = {}

        def on_count(side: str, starting: bool) -> None:
            if starting:
                marks[side] = pg_commit_count(url)
            else:
                commits[side] += pg_commit_count(url) - marks[side]

        try:
            result = _alternate(
                n,
                lambda s, c, lat: _gate_loop(gate, "e", s, c, lat),
                lambda s, c, lat: loop("f", s, c, lat),
                on_count,
            )
        finally:
            close()
            store.close()
    return _figure(
        "PostgreSQL, 1 connection, synchronous_commit=on", n, result, commits, durability_off=False
    )
