import os
import resource
import sqlite3
import sys
import tempfile
import time

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop, _sqlite_floor, floor_row
from effectgate.bench.common import bench_gate
from effectgate.store.sqlite import SQLiteStore

n = int(sys.argv[1])
sync = sys.argv[2]
d = tempfile.mkdtemp(dir=os.environ.get("TMPD", None))
path = os.path.join(d, "l.db")
store = SQLiteStore(path, synchronous=sync)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
conn = sqlite3.connect(path, isolation_level=None)
conn.execute(f"PRAGMA synchronous = {sync}")
fl = _sqlite_floor(conn, floor_row())
_gate_loop(gate, "w", 0, 200, None)
fl(0, 200, None)
if os.environ.get("NOCKPT"):
    conn.execute("PRAGMA wal_autocheckpoint=0")
    store._conn.execute("PRAGMA wal_autocheckpoint=0") if hasattr(store, "_conn") else None
    print("ckpt", conn.execute("PRAGMA wal_checkpoint").fetchone())


def meas(fn):
    w0 = os.path.getsize(path + "-wal")
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    w1 = os.path.getsize(path + "-wal")
    return (
        t / n * 1e6,
        (r1.ru_utime - r0.ru_utime) / n * 1e6,
        (r1.ru_stime - r0.ru_stime) / n * 1e6,
        (w1 - w0) / n / 4120,
    )


for k in range(2):
    print(
        "eg    wall %.0f user %.0f sys %.0f frames %.2f"
        % meas(lambda: _gate_loop(gate, f"e{k}", 0, n, None))
    )
    print(
        "floor wall %.0f user %.0f sys %.0f frames %.2f" % meas(lambda: fl(1000 + k * n, n, None))
    )
