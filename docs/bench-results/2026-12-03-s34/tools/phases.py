"""Split one B1 action into its phases, effectgate beside the floor, on one SQLite file.

usage: python phases.py N FULL|OFF [ROUNDS]

effectgate's side wraps the store engine's ``begin`` and ``commit`` with clock reads, so each
action splits into: ``pre`` (submit to BEGIN: parse, policy, the journal's plan), ``body1``
(the journal's statements), ``commit1``, ``between`` (the venue call and the receipt's plan),
``body2``, ``commit2`` and ``post`` (COMMIT's return to submit's). ``effectgate bench``'s own
floor loop, on a connection of its own, is timed the same way around its BEGINs and COMMITs
(its ``pre``: the loop's own lines before its first BEGIN). The two sides alternate in
rounds; medians per phase, in us.

What it answers: how much of the gap is commit time (more WAL frames per commit) and how much
is Python, and how much Python runs after the last commit: the only part that could overlap an
fsync in a single caller's action (the rest builds what a commit writes, or is the venue call,
which waits for the journal's commit).
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import pairwise

from effectgate.bench.b1 import _sqlite_floor, floor_row, sqlite_sides
from effectgate.bench.common import INTENT_BODY
from effectgate.store import _sqlite_tx

NAMES = ("pre", "begin1", "body1", "commit1", "between", "begin2", "body2", "commit2", "post")

n, sync = int(sys.argv[1]), sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
clock = time.perf_counter
marks: list[float] = []
engine = _sqlite_tx.SQLiteEngine
real_begin, real_commit = engine.begin, engine.commit


def begin(self: object, conn: sqlite3.Connection) -> None:
    marks.append(clock())
    real_begin(self, conn)  # type: ignore[arg-type]
    marks.append(clock())


def commit(self: object, conn: sqlite3.Connection) -> None:
    marks.append(clock())
    real_commit(self, conn)  # type: ignore[arg-type]
    marks.append(clock())


engine.begin, engine.commit = begin, commit  # type: ignore[method-assign]
path = os.path.join(tempfile.mkdtemp(), "l.db")
store, gate, conn = sqlite_sides(path, sync)


def timed(side: str, action: Callable[[], object], out: list[list[float]] | None) -> None:
    """Run one action; append its phases (the gaps between the clock marks) to ``out``."""
    marks.clear()
    t0 = clock()
    action()
    t1 = clock()
    if len(marks) != 8:
        raise SystemExit(f"{side}: {len(marks)} clock marks, not 8 (two transactions)")
    if out is not None:
        out.append([b - a for a, b in pairwise([t0, *marks, t1])])


def eg(i: int, out: list[list[float]] | None) -> None:
    timed("effectgate", lambda: gate.submit("submit_order", f"e{i}", INTENT_BODY), out)


class _Marked:
    """The floor's connection, marking the clock around its BEGINs and COMMITs as the engine
    wrappers do for effectgate, so ``effectgate bench``'s own floor loop is what is timed."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._execute = conn.execute

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        edge = sql == "COMMIT" or sql.startswith("BEGIN")
        if edge:
            marks.append(clock())
        cur = self._execute(sql, params)
        if edge:
            marks.append(clock())
        return cur


floor_loop = _sqlite_floor(_Marked(conn), floor_row())  # type: ignore[arg-type]


def floor(i: int, out: list[list[float]] | None) -> None:
    timed("floor", lambda: floor_loop(i, 1, None), out)


for i in range(300):
    eg(i, None)
    floor(i, None)
split: dict[str, list[list[float]]] = {"eg": [], "floor": []}
per = n // rounds
for r in range(rounds):
    sides = (("eg", eg), ("floor", floor)) if r % 2 == 0 else (("floor", floor), ("eg", eg))
    for side, fn in sides:
        for i in range(1000 + r * per, 1000 + (r + 1) * per):
            fn(i, split[side])

print(f"SQLite synchronous={sync}, {per * rounds} actions per side in {rounds} alternating rounds")
print(f"{'phase':8s} {'effectgate':>11s} {'floor':>8s}   (median us per action)")
for j, name in enumerate(NAMES):
    e = statistics.median(r[j] for r in split["eg"])
    f = statistics.median(r[j] for r in split["floor"])
    print(f"{name:8s} {1e6 * e:11.1f} {1e6 * f:8.1f}")
tot = {s: statistics.median(sum(r) for r in split[s]) for s in split}
com = {s: statistics.median(r[3] + r[7] for r in split[s]) for s in split}
print(
    f"{'total':8s} {1e6 * tot['eg']:11.1f} {1e6 * tot['floor']:8.1f}   ratio of medians "
    f"{tot['floor'] / tot['eg']:.2f}x"
)
print(f"{'commits':8s} {1e6 * com['eg']:11.1f} {1e6 * com['floor']:8.1f}")
print(
    f"{'rest':8s} {1e6 * (tot['eg'] - com['eg']):11.1f} {1e6 * (tot['floor'] - com['floor']):8.1f}"
    "   (Python and the statements before COMMIT)"
)
