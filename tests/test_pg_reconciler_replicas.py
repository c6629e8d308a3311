"""Reconciler replicas: three processes share one ledger and one venue with thousands of
uncertain rows. Leases (``FOR UPDATE SKIP LOCKED``) split the repairs, one replica at a time
holds the sweep (a session advisory lock), and the audit log shows each row repaired once.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import faultkit
from effectgate._core.states import State
from effectgate.store.base import NewOperation

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROWS = 3000
REPLICAS = 3
ORPHANS = 25


def expected_state(i: int) -> State:
    if i % 97 == 5:
        return State.QUARANTINED  # two venue records under one key
    if i % 3 == 0:
        return State.FAILED  # never reached the venue: written off past the horizon
    return State.ACKNOWLEDGED


@pytest.mark.parametrize("store_factory", ["postgres"], indirect=True)
def test_replicas_repair_every_row_once_and_report_once(store_factory) -> None:
    """Invariants 4 and 5 with replicas: every uncertain row is repaired exactly once (one
    audited transition out of 'submitted'), every divergence is stored and alarmed once."""
    from effectgate.store.postgres import PostgresStore

    url = store_factory.url
    fp = faultkit.fingerprint(0)
    # Setup only: commits need not wait for the disk (nothing here is under test yet).
    setup = PostgresStore(url, synchronous_commit="off", max_size=4)
    store = store_factory()
    ids = [f"rep-{i:05d}" for i in range(ROWS)]
    now = time.time()

    def journal(op: str) -> None:
        new = NewOperation(
            scope="default",
            operation_id=op,
            action="submit_order",
            fingerprint=fp,
            intent=faultkit.intent(),
            effect={"quantity": "4"},
            tier="validate",
            reason="within limits",
            policy_version="t",
        )
        setup.insert_operation(new, [State.PROPOSED, State.VALIDATED, State.SUBMITTED], now=now)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(journal, ids))
    setup.close()

    with faultkit.venue_server(honour_key=False) as (venue, venue_url):
        for i, op in enumerate(ids):
            state = expected_state(i)
            if state is not State.FAILED:
                venue.inject_record(f"default:{op}")
            if state is State.QUARANTINED:
                venue.inject_record(f"default:{op}")
        for j in range(ORPHANS):
            venue.inject_record(f"default:orphan-{j:03d}")
        started = time.perf_counter()
        start_at = time.time() + 2.0
        children = [
            faultkit.spawn(
                "reconcile",
                {
                    "store_url": url,
                    "venue_url": venue_url,
                    "offset": 120.0,
                    "page_size": 500,
                    "start_at": start_at,
                },
            )
            for _ in range(REPLICAS)
        ]
        results = [faultkit.finish(c, timeout=180) for c in children]
        wall = time.perf_counter() - started - 2.0

    for r in results:
        assert r.returncode == 0 and r.result is not None, r.stderr[-2000:]
    moves: Counter[str] = Counter()
    by_owner: Counter[str] = Counter()
    for event in store.iter_audit():
        if event.kind == "transition" and event.detail.get("from") == "submitted":
            moves[event.operation_id or ""] += 1
            by_owner[str(event.detail.get("owner"))] += 1
    finals = {op: store.get("default", op).state for op in ids}  # type: ignore[union-attr]
    stored = store.list_divergences(limit=10_000)
    alarmed = [tuple(d[:2]) for r in results for d in r.result["divergences"]]  # type: ignore[index]
    totals = [r.result["totals"] for r in results]  # type: ignore[index]
    expected_kinds = Counter(
        {
            "duplicate-effect": sum(expected_state(i) is State.QUARANTINED for i in range(ROWS)),
            "orphan": ORPHANS,
        }
    )

    print(
        f"\n[reconciler replicas] {REPLICAS} processes, {ROWS} uncertain rows, "
        f"{ORPHANS} orphans, {wall:.2f}s"
    )
    print(
        f"  repairs per replica: {sorted(by_owner.values(), reverse=True)}; sweeps per "
        f"replica: {[t['sweeps'] for t in totals]}; rounds: {[t['rounds'] for t in totals]}"
    )
    print(
        f"  transitions out of submitted per row: {sorted(Counter(moves.values()).items())}; "
        f"final states: {dict(Counter(s.value for s in finals.values()))}"
    )
    print(
        f"  divergences stored={len(stored)} {dict(Counter(d.kind for d in stored))}; alarmed "
        f"by replicas={len(alarmed)} (distinct {len(set(alarmed))})"
    )

    assert set(moves) == set(ids) and set(moves.values()) == {1}
    assert all(finals[op] is expected_state(i) for i, op in enumerate(ids))
    assert Counter(d.kind for d in stored) == expected_kinds
    assert len({(d.kind, d.op_key) for d in stored}) == len(stored)
    assert len(alarmed) == len(set(alarmed)) == len(stored)
    assert sum(by_owner.values()) == ROWS
