import os
import sys
import tempfile

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop
from effectgate.bench.common import bench_gate
from effectgate.store.sqlite import SQLiteStore

n = int(sys.argv[1])
d = tempfile.mkdtemp()
store = SQLiteStore(os.path.join(d, "l.db"), synchronous="OFF")
gate = bench_gate(store, PaperAdapter(PaperVenue()))
_gate_loop(gate, "w", 0, 100, None)
_gate_loop(gate, "e", 0, n, None)
