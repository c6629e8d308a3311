"""B1 with and without a run-call binding, on one ledger, in alternating rounds.

``python -m effectgate.bench.b1_bound [--store URL] [--n N]`` (``--store``: a ``postgresql://``
server for a fresh schema; otherwise a temporary SQLite file): the B1 action (``Gate.submit`` on
raw intent bytes, paper venue, receipt) unbound, and the same action bound to an open tool call
of a run (``run_call=``: the run's row, the call's row and the binding written in the journal's
transaction, docs/runs.md). Each bound action uses a call of its own, recorded outside the
timed loop. Prints actions/s and p50/p99 of both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable

from effectgate._core.runs import RunCall, RunCallKind, RunCallRef
from effectgate._core.states import State
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.common import INTENT_BODY, bench_gate, summarise
from effectgate.errors import StoreError
from effectgate.testing import temporary_store

__all__ = ["main", "run"]

ROUNDS = 6
WARMUP = 100


def run(url: str | None, n: int) -> dict[str, object]:
    with temporary_store(url) as store:
        gate = bench_gate(store, PaperAdapter(PaperVenue()))
        digest = hashlib.sha256(b"arguments").hexdigest()
        total = WARMUP + n
        for i in range(total):
            call = RunCall("bench-run", f"s{i:07d}", f"c{i}", RunCallKind.TOOL, digest, 9, tool="t")
            store.record_run_call("default", call, now=time.time(), actor="bench")

        def side(bound: bool) -> Callable[[int, int, list[float] | None], None]:
            prefix = "b" if bound else "u"

            def loop(start: int, count: int, lat: list[float] | None) -> None:
                for i in range(start, start + count):
                    ref = RunCallRef("bench-run", f"s{i:07d}", f"c{i}") if bound else None
                    t0 = time.perf_counter()
                    row = gate.submit("submit_order", f"{prefix}{i}", INTENT_BODY, run_call=ref)
                    if lat is not None:
                        lat.append(time.perf_counter() - t0)
                    if row.state is not State.ACKNOWLEDGED:
                        raise StoreError(f"{prefix}{i} ended {row.state.value}")

            return loop

        loops = {"unbound": side(False), "bound": side(True)}
        for fn in loops.values():
            fn(0, WARMUP, None)
        spent = dict.fromkeys(loops, 0.0)
        lat: dict[str, list[float]] = {k: [] for k in loops}
        per = max(1, n // ROUNDS)
        done, r = 0, 0
        while done < n:
            count = min(per, n - done)
            names = list(loops) if r % 2 == 0 else list(reversed(loops))
            for name in names:
                t0 = time.perf_counter()
                loops[name](WARMUP + done, count, lat[name])
                spent[name] += time.perf_counter() - t0
            done += count
            r += 1
        return {
            name: {"actions_per_s": round(n / spent[name], 1), **summarise(lat[name])}
            for name in loops
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=None, help="sqlite:///PATH or postgresql://...")
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    print(json.dumps({"store": (args.store or "temporary sqlite").split("@")[-1],
                      "n": args.n, **run(args.store, args.n)}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
