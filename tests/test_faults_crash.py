"""Crash points: a real executor process SIGKILLed at each named point, restarted, reconciled.

Runs on both stores (the ``store_factory`` fixture's ``.url``). The venue honours the key and runs
behind a real HTTP server in this process, so its call count survives every kill.
"""

from __future__ import annotations

import pytest

import faultkit
from effectgate._core.states import State
from effectgate._execute.crashpoints import CRASH_POINTS

pytestmark = [pytest.mark.slow]

OPS_PER_POINT = 2
EXPECTED = {  # crash point -> (venue effects per operation, final ledger state)
    "after_journal": (0, State.FAILED),  # never sent; written off past the horizon
    "after_venue_call": (1, State.ACKNOWLEDGED),  # sent; the reconciler confirms it
    "after_receipt": (1, State.ACKNOWLEDGED),  # sent and journalled before the kill
}


def test_sigkill_at_every_crash_point_then_restart_and_reconcile(store_factory) -> None:
    """Invariant 3 (and 1, 4): a kill after the journal leaves the row uncertain, never failed
    and never re-sent; restart + reconcile settles every row with one effect per sent operation."""
    url = store_factory.url
    store = store_factory()
    with faultkit.venue_server(honour_key=True) as (venue, venue_url):
        ops = {point: [f"op-{point}-{i}" for i in range(OPS_PER_POINT)] for point in CRASH_POINTS}
        exits: dict[str, list[int]] = {}
        after_kill: dict[str, list[str]] = {}
        for point, ids in ops.items():
            children = [
                faultkit.spawn(
                    "submit",
                    {"store_url": url, "venue_url": venue_url, "ops": [[op, 0]]},
                    crash_at=point,
                )
                for op in ids
            ]
            exits[point] = [faultkit.finish(c).returncode for c in children]
            after_kill[point] = [
                store.get("default", op).state.value  # type: ignore[union-attr]
                for op in ids
            ]
        calls_before_restart = venue.calls

        # Restart: a fresh executor retries every id. Nothing may be sent again.
        every = [[op, 0] for ids in ops.values() for op in ids]
        restart = faultkit.run_child(
            "submit", {"store_url": url, "venue_url": venue_url, "ops": every}
        )
        calls_after_restart = venue.calls

        # Reconcile inside the horizon: the never-sent rows stay uncertain and are reported.
        inside = faultkit.http_reconciler(store, venue_url, offset=0.0).run_once()
        # ... and past it: everything settles.
        past = faultkit.http_reconciler(store, venue_url, offset=120.0).run_once()

        effects = {
            point: [venue.effects_for(f"default:{op}") for op in ids] for point, ids in ops.items()
        }
        final = {
            point: [store.get("default", op).state for op in ids]  # type: ignore[union-attr]
            for point, ids in ops.items()
        }
        silent = [
            op
            for ids in ops.values()
            for op in ids
            if store.get("default", op).state is State.SUBMITTED
        ]  # type: ignore[union-attr]
        total_calls = venue.calls

    print(f"\n[crash points on {url.split(':')[0]}] covered={list(CRASH_POINTS)}")
    for point in CRASH_POINTS:
        print(
            f"  {point}: exit={exits[point]} state after kill={after_kill[point]} "
            f"venue effects per op={effects[point]} final={[s.value for s in final[point]]}"
        )
    print(
        f"  venue calls: before restart={calls_before_restart} after restart+retry="
        f"{calls_after_restart} total={total_calls}; restart outcomes="
        f"{restart.result['counts'] if restart.result else restart.stderr[-300:]}"
    )
    print(
        f"  reconcile inside horizon: still_uncertain={inside.still_uncertain} "
        f"confirmed={inside.confirmed}; past horizon: written_off={past.written_off}; "
        f"left non-terminal with no alarm={len(silent)}"
    )

    assert all(code == -9 for codes in exits.values() for code in codes)
    assert after_kill["after_journal"] == ["submitted"] * OPS_PER_POINT
    assert after_kill["after_venue_call"] == ["submitted"] * OPS_PER_POINT
    assert after_kill["after_receipt"] == ["acknowledged"] * OPS_PER_POINT
    assert restart.returncode == 0 and restart.result is not None
    assert restart.result["counts"]["replayed"] == len(every)
    assert calls_after_restart == calls_before_restart == 2 * OPS_PER_POINT
    assert inside.still_uncertain == OPS_PER_POINT  # reported, not silently stuck
    for point, (per_op, state) in EXPECTED.items():
        assert effects[point] == [per_op] * OPS_PER_POINT, point
        assert final[point] == [state] * OPS_PER_POINT, point
    assert not silent and total_calls == 2 * OPS_PER_POINT
