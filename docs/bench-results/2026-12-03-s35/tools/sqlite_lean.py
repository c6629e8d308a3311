"""B1 on SQLite: the floor, the replayed SQL, the lean path and effectgate, in the same rounds.

usage: python sqlite_lean.py N FULL|OFF [ROUNDS]

Records the ten statements of one real B1 action on the store's own cursors (with the
2026-12-03-s33 sitting's ``record_action``), then times, on one file, per round: the floor; the
statements replayed (parameters built before the timed loop, no other Python); the lean path
(the same replay with ``lean_work``'s Python where the real path does that work: before the
journal's BEGIN and between the two transactions); effectgate's own loop; the floor again.
Reaches into private attributes (``_cur``, ``_gate.engine._cur``): a one-off measurement, not
an API.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2] / "2026-12-03-s33" / "tools"))
from lean_work import LeanAction
from recorder import record_action

from effectgate.bench.b1 import _gate_loop, _sqlite_floor, floor_row, sqlite_sides

n = int(sys.argv[1])
sync = sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
store, gate, conn = sqlite_sides(os.path.join(tempfile.mkdtemp(), "l.db"), sync)
floor = _sqlite_floor(conn, floor_row())
_gate_loop(gate, "w", 0, 200, None)
floor(0, 200, None)

statements, started = record_action(store, gate)
split = 1 + [sql.split()[0] for _, sql, _ in statements].index("COMMIT")
print(len(statements), "statements, journal's", split, [s.split()[0] for _, s, _ in statements])


def actions(prefix: str, start: int, count: int) -> list[tuple[str, list[Any]]]:
    """Per action: its id and its statements, the recorded id and instants replaced."""
    out = []
    for i in range(start, start + count):
        op, now = f"{prefix}{i}", time.time()
        stmts = [
            (cur, sql, tuple(_swap(p, op, now) for p in params)) for cur, sql, params in statements
        ]
        out.append((op, stmts))
    return out


def _swap(p: Any, op: str, now: float) -> Any:
    if isinstance(p, str) and "zq7" in p:
        return p.replace("zq7", op)
    if isinstance(p, float) and p > started - 1:
        return now
    return p


def replay(work: list[tuple[str, list[Any]]]) -> Callable[[], None]:
    def run() -> None:
        for _, stmts in work:
            for cur, sql, params in stmts:
                cur.execute(sql, params)

    return run


def lean(work: list[tuple[str, list[Any]]]) -> Callable[[], None]:
    act = LeanAction(gate)

    def run() -> None:
        for op, stmts in work:
            act.journal(op)
            for cur, sql, params in stmts[:split]:
                cur.execute(sql, params)
            act.receipt(op)
            for cur, sql, params in stmts[split:]:
                cur.execute(sql, params)

    return run


def measure(fn: Callable[[], None]) -> tuple[float, float, float]:
    """Wall, user and system microseconds per action."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return (
        wall / n * 1e6,
        (r1.ru_utime - r0.ru_utime) / n * 1e6,
        (r1.ru_stime - r0.ru_stime) / n * 1e6,
    )


def fmt(x: tuple[float, float, float]) -> str:
    return f"{x[0]:.0f} (u{x[1]:.0f} s{x[2]:.0f})"


base = 100_000
for k in range(rounds):
    f1 = measure(lambda k=k: floor(base + k * 3 * n, n, None))
    rp = measure(replay(actions(f"r{k}_", 0, n)))
    ln = measure(lean(actions(f"l{k}_", 0, n)))
    eg = measure(lambda k=k: _gate_loop(gate, f"e{k}_", 0, n, None))
    f2 = measure(lambda k=k: floor(base + k * 3 * n + n, n, None))
    fl = (f1[0] + f2[0]) / 2
    print(
        f"round {k}: floor {fmt(f1)} / {fmt(f2)} us  replay {fmt(rp)} {fl / rp[0]:.2f}x  "
        f"lean {fmt(ln)} {fl / ln[0]:.2f}x  effectgate {fmt(eg)} {fl / eg[0]:.2f}x",
        flush=True,
    )

# Every replayed action wrote its row and moved it on: nothing was skipped as a conflict.
for prefix in ("r", "l"):
    (done,) = conn.execute(
        "SELECT count(*) FROM operations WHERE operation_id GLOB ? AND state = 'acknowledged'",
        (f"{prefix}[0-9]*_*",),
    ).fetchone()
    if done != n * rounds:
        raise SystemExit(f"{prefix}: {done} acknowledged rows, expected {n * rounds}")
