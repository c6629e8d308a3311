"""The lean path's Python alone, warm: ``lean_work`` in a tight loop with no SQL between.

usage: python lean_parts.py [N]

Prints us per action (best of five) for the whole of it and for its largest piece, the
strict parse with validation: what that work costs when nothing evicts it between actions.
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit

from lean_work import LeanAction

from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.b1 import INTENT_BODY
from effectgate.bench.common import bench_gate
from effectgate.store.sqlite import SQLiteStore

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "p.db"), synchronous="OFF")
act = LeanAction(bench_gate(store, PaperAdapter(PaperVenue())))


def one() -> None:
    act.journal("op1")
    act.receipt("op1")


for name, fn in (
    ("lean_work, one action", one),
    ("of which the strict parse", lambda: act.registry.parse("submit_order", INTENT_BODY)),
):
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"{name}: {best:.1f} us")
store.close()
