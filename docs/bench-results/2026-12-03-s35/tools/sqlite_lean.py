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
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2] / "2026-12-03-s33" / "tools"))
from lean_work import LeanAction, check_acknowledged, run_round
from recorder import for_actions, measure, record_action

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


Work = list[tuple[str, list[tuple[Any, str, tuple[Any, ...]]]]]


def replay(work: Work, act: LeanAction | None) -> Callable[[], None]:
    """The prepared actions' statements; with ``act``, its Python before each transaction."""

    def run() -> None:
        for op, stmts in work:
            if act is not None:
                act.journal(op)
            for cur, sql, params in stmts[:split]:
                cur.execute(sql, params)
            if act is not None:
                act.receipt(op)
            for cur, sql, params in stmts[split:]:
                cur.execute(sql, params)

    return run


base = 100_000
for k in range(rounds):
    run_round(
        k,
        lambda fn: measure(fn, n),
        {
            "floor": lambda k=k: floor(base + k * 3 * n, n, None),
            "replay": replay(for_actions(statements, started, f"r{k}_", 0, n), None),
            "lean": replay(for_actions(statements, started, f"l{k}_", 0, n), LeanAction(gate)),
            "effectgate": lambda k=k: _gate_loop(gate, f"e{k}_", 0, n, None),
            "floor2": lambda k=k: floor(base + k * 3 * n + n, n, None),
        },
        "u",
    )

done = {
    prefix: conn.execute(
        "SELECT count(*) FROM operations WHERE operation_id GLOB ? AND state = 'acknowledged'",
        (f"{prefix}[0-9]*_*",),
    ).fetchone()[0]
    for prefix in ("r", "l")
}
check_acknowledged(done, n * rounds)
