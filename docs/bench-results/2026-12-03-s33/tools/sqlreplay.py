"""B1's SQL on SQLite with no effectgate code around it, beside the floor and the gate itself.

usage: python sqlreplay.py N FULL|OFF [ROUNDS]

Records the statements and parameters of one real B1 action on the store's own cursors (the
body's and the transaction engine's), then replays them N times on the store's connection, so
the chain function is registered and the pragmas are the store's. Each replayed action rewrites
the recorded operation id in every text parameter and puts the current time in the recorded
timestamps; its parameters are built before the timed loop. Each round times, on one file:
the floor, the replay, effectgate's own loop, the floor again. Reaches into private attributes
(`_cur`, `_gate.engine._cur`): a one-off measurement, not an API.
"""

import os
import sys
import tempfile
from collections.abc import Callable

from recorder import for_actions, record_action
from recorder import measure as measure_n

from effectgate.bench.b1 import _gate_loop, _sqlite_floor, floor_row, sqlite_sides

n = int(sys.argv[1])
sync = sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
path = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TMPD")), "l.db")
store, gate, conn = sqlite_sides(path, sync)
floor = _sqlite_floor(conn, floor_row())
_gate_loop(gate, "w", 0, 200, None)
floor(0, 200, None)

statements, started = record_action(store, gate)
print(f"{len(statements)} statements per action:", [s[1].split()[0] for s in statements])


def replay(start: int, count: int) -> Callable[[], None]:
    work = for_actions(statements, started, "p", start, count)

    def run() -> None:
        for _, action in work:
            for cur, sql, params in action:
                cur.execute(sql, params)

    return run


def measure(fn: Callable[[], None]) -> tuple[float, float, float]:
    return measure_n(fn, n)


base = 100_000
for k in range(rounds):
    f1 = measure(lambda k=k: floor(base + k * 3 * n, n, None))
    rp = measure(replay(base + k * n, n))
    eg = measure(lambda k=k: _gate_loop(gate, f"e{k}_", 0, n, None))
    f2 = measure(lambda k=k: floor(base + k * 3 * n + n, n, None))
    fl = (f1[0] + f2[0]) / 2
    print(
        f"round {k}: floor {f1[0]:.0f}/{f2[0]:.0f} us  "
        f"replay(no python) {rp[0]:.0f} us (user {rp[1]:.0f} sys {rp[2]:.0f})  "
        f"effectgate {eg[0]:.0f} us (user {eg[1]:.0f} sys {eg[2]:.0f})  "
        f"ratio replay {fl / rp[0]:.2f}x  effectgate {fl / eg[0]:.2f}x"
    )
