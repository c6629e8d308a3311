import os
import sys
import time
import uuid

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop, pg_floor
from effectgate.bench.common import bench_gate
from effectgate.store import open_store
from effectgate.store.base import with_schema

PG = os.environ.get("PG", "postgresql://postgres@127.0.0.1:5432/eg_bench")
url = with_schema(PG, "cpu_" + uuid.uuid4().hex[:6])
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
        name = s[s.index("(") + 1 : s.rindex(")")]
        if not name.startswith("postgres"):
            continue
        fields = s[s.rindex(")") + 2 :].split()
        t += int(fields[11]) + int(fields[12])
    return t / TICK


n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
store = open_store(url, create=True)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
floor, close = pg_floor(url)
_gate_loop(gate, "w", 0, 200, None)
floor("fw", 0, 200, None)


def meas(fn):
    s0, c0, t0 = pgcpu(), time.process_time(), time.perf_counter()
    fn()
    return (
        (time.perf_counter() - t0) / n * 1e6,
        (time.process_time() - c0) / n * 1e6,
        (pgcpu() - s0) / n * 1e6,
    )


for k in range(2):
    print(
        "eg    wall %.0f client %.0f server %.0f"
        % meas(lambda: _gate_loop(gate, f"e{k}-", 0, n, None))
    )
    print("floor wall %.0f client %.0f server %.0f" % meas(lambda: floor(f"f{k}-", 0, n, None)))
close()
store.close()
