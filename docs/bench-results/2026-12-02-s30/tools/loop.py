import os
import sys
import tempfile

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import _gate_loop
from effectgate.bench.common import bench_gate

n = int(sys.argv[1])
target = sys.argv[2]
if target.startswith("postgresql"):
    import uuid

    from effectgate.store import open_store
    from effectgate.store.base import with_schema

    store = open_store(with_schema(target, "prof_" + uuid.uuid4().hex[:6]), create=True)
else:
    from effectgate.store.sqlite import SQLiteStore

    store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "l.db"), synchronous=target)
gate = bench_gate(store, PaperAdapter(PaperVenue()))
_gate_loop(gate, "w", 0, 300, None)
_gate_loop(gate, "e", 0, n, None)
