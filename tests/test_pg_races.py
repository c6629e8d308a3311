"""Races across processes: 8 executor processes submit the same 500 operation ids at once.

Every fourth id is also sent with changed payloads by the odd-numbered processes, so the first
insert to commit decides that id's fingerprint and every other payload must be refused. The venue
does NOT honour the key here, so a second dispatch would show as a second effect.
"""

from __future__ import annotations

import random
import time

import pytest

import faultkit

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PROCESSES = 8
OPERATIONS = 500


def variant_for(process: int, index: int) -> int:
    """0 (the shared payload) except odd processes on every fourth id (a changed payload)."""
    if index % 4 == 0 and process % 2 == 1:
        return 1 + process % 3
    return 0


@pytest.mark.parametrize("store_factory", ["postgres"], indirect=True)
def test_eight_processes_same_ids_one_dispatch_each(store_factory) -> None:
    """Invariants 1 and 2 across processes: one dispatch per id, every changed payload refused
    (IdempotencyConflict), no deadlock (every process finishes inside its timeout)."""
    url = store_factory.url
    store = store_factory()
    ids = [f"race-{i:04d}" for i in range(OPERATIONS)]
    fingerprints = {v: faultkit.fingerprint(v) for v in range(4)}
    with faultkit.venue_server(honour_key=False) as (venue, venue_url):
        start_at = time.time() + 2.5  # every child imports and connects before the gun
        plans = []
        for p in range(PROCESSES):
            order = list(range(OPERATIONS))
            if p >= PROCESSES // 2:  # half in the same order (head-on), half shuffled
                random.Random(p).shuffle(order)
            plans.append([[ids[i], variant_for(p, i)] for i in order])
        children = [
            faultkit.spawn(
                "submit",
                {"store_url": url, "venue_url": venue_url, "ops": plan, "start_at": start_at},
            )
            for plan in plans
        ]
        results = [faultkit.finish(c, timeout=120) for c in children]
        calls = venue.calls
        per_key = [venue.effects_for(f"default:{op}") for op in ids]

    for r in results:
        assert r.returncode == 0 and r.result is not None, r.stderr[-2000:]
    stored = {op: store.get("default", op) for op in ids}
    wrong = refused = accepted = 0
    for plan, r in zip(plans, results, strict=True):
        outcomes = r.result["outcomes"]  # type: ignore[index]
        for op, v in plan:
            row = stored[op]
            if row is None:
                wrong += 1
                continue
            differs = row.fingerprint != fingerprints[v]
            refused += outcomes[op] == "conflict"
            accepted += outcomes[op] != "conflict"
            wrong += differs != (outcomes[op] == "conflict")
    totals = {
        k: sum(r.result["counts"][k] for r in results)  # type: ignore[index]
        for k in ("created", "replayed", "conflict", "store_errors", "indeterminate")
    }
    elapsed = max(r.result["seconds"] for r in results)  # type: ignore[index]
    print(
        f"\n[races] {PROCESSES} processes x {OPERATIONS} ids in {elapsed:.2f}s: "
        f"venue calls={calls} effects per id: min={min(per_key)} max={max(per_key)}; "
        f"outcomes={totals}; accepted={accepted} refused={refused} misclassified={wrong}"
    )
    assert calls == OPERATIONS and set(per_key) == {1}
    assert totals["created"] == OPERATIONS
    assert totals["store_errors"] == 0 and totals["indeterminate"] == 0
    assert wrong == 0 and refused > 0
    assert all(row is not None and row.state.value == "acknowledged" for row in stored.values())
