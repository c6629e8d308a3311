import os
import sys
import uuid

from pgproc import per_action

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop, pg_floor
from effectgate.bench.common import bench_gate
from effectgate.store import open_store
from effectgate.store.base import with_schema

PG = os.environ.get("PG", "postgresql://postgres@127.0.0.1:5432/eg_bench")
url = with_schema(PG, "cpu_" + uuid.uuid4().hex[:6])
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
store = open_store(url, create=True)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
floor, close = pg_floor(url)
_gate_loop(gate, "w", 0, 200, None)
floor("fw", 0, 200, None)


for k in range(2):
    print(
        "eg    wall %.0f client %.0f server %.0f"
        % per_action(lambda: _gate_loop(gate, f"e{k}-", 0, n, None), n)
    )
    print(
        "floor wall %.0f client %.0f server %.0f"
        % per_action(lambda: floor(f"f{k}-", 0, n, None), n)
    )
close()
store.close()
