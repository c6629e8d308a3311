"""Each control across real processes: separate interpreters, separate store connections.

A child process runs a gate (or an operator) against the same ledger URL and prints what it saw
as JSON. Nothing is shared in memory, so whatever holds, holds because of the store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from effectgate import Operator, State
from effectgate.examples import default_registry

pytestmark = pytest.mark.slow

CHILD = r"""
import json, sys, time
from decimal import Decimal
from effectgate import BreakerConfig, Gate, LimitPolicy, Operator, PolicySet
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store import open_store

args = json.loads(sys.argv[1])
store = open_store(args["url"], create=True)
registry = default_registry()
if args["role"] == "operator":
    op = Operator(store=store, registry=registry)
    getattr(op, args["call"])(*args.get("args", []), **args.get("kwargs", {}))
    print(json.dumps({"ok": True}))
    sys.exit(0)
venue = PaperVenue()
breakers = {"submit_order": BreakerConfig(**args["breaker"])} if args.get("breaker") else None
gate = Gate(store=store, registry=registry, adapters={"paper": PaperAdapter(venue)},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000")),
                              "cancel_order": LimitPolicy(Decimal("1"))}), breakers=breakers)
while time.time() < args.get("start_at", 0):
    time.sleep(0.005)
states = {}
for op_id, qty in args["ops"]:
    row = gate.submit("submit_order", op_id, {**EXAMPLE_ORDER, "quantity": qty})
    states[op_id] = row.state.value
for op_id in args.get("dispatch", []):
    states[op_id] = gate.dispatch(op_id).state.value
print(json.dumps({"states": states, "venue_calls": venue.calls}))
"""


def run_child(payload: dict, *, wait: bool = True) -> subprocess.Popen | dict:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(payload)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return finish(proc) if wait else proc


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_switch_flipped_in_one_process_stops_dispatch_in_another(store_factory) -> None:
    """Invariant 7: an operator process flips the switch; an executor process, already
    holding a validated row, cannot dispatch it or anything new; releasing lets it go."""
    url = store_factory.url
    run_child({"url": url, "role": "gate", "ops": [["warm-up", "1"]]})
    run_child(
        {
            "url": url,
            "role": "operator",
            "call": "kill",
            "args": ["submit_order"],
            "kwargs": {"operator": "alice", "reason": "drill"},
        }
    )
    held = run_child({"url": url, "role": "gate", "ops": [["op-1", "4"], ["op-2", "2"]]})
    assert held == {"states": {"op-1": "validated", "op-2": "validated"}, "venue_calls": 0}
    run_child(
        {
            "url": url,
            "role": "operator",
            "call": "release",
            "args": ["submit_order"],
            "kwargs": {"operator": "alice"},
        }
    )
    sent = run_child({"url": url, "role": "gate", "ops": [], "dispatch": ["op-1", "op-2"]})
    assert sent == {"states": {"op-1": "acknowledged", "op-2": "acknowledged"}, "venue_calls": 2}


def test_concurrent_processes_cannot_exceed_the_aggregate_envelope(store_factory) -> None:
    """The exposure axis is checked and charged in the store's transaction: six processes
    submitting at once together stay within it."""
    store = store_factory()
    Operator(store=store, registry=default_registry()).step(
        "submit_order",
        "exposure",
        {"limit": "4000", "window": 3600},
        evidence={"initial": True},
        operator="alice",
    )
    start_at = time.time() + 2.0
    procs = [
        run_child(
            {
                "url": store_factory.url,
                "role": "gate",
                "start_at": start_at,
                "ops": [[f"p{p}-{i}", "4"] for i in range(5)],
            },
            wait=False,
        )
        for p in range(6)
    ]
    results = [finish(p) for p in procs]  # type: ignore[arg-type]
    sent = sum(r["venue_calls"] for r in results)
    acknowledged = [row for row in store.list_operations(state=State.ACKNOWLEDGED, limit=100)]
    assert sent == len(acknowledged) == 10  # 10 x 400 = 4000, the rest held
    assert sum(Decimal(r.effect["quantity"]) * 100 for r in acknowledged) == Decimal("4000")
    assert len(store.list_operations(state=State.VALIDATED, limit=100)) == 20


def test_breaker_tripped_in_one_process_blocks_another(store_factory) -> None:
    """An open breaker is store state: the process that tripped it and every other one stop."""
    url = store_factory.url
    tripped = run_child(
        {
            "url": url,
            "role": "gate",
            "breaker": {"max_repeats": 1},
            "ops": [["a-1", "4"], ["a-2", "4"]],
        }
    )
    assert tripped["states"] == {"a-1": "acknowledged", "a-2": "validated"}
    other = run_child({"url": url, "role": "gate", "ops": [["b-1", "1"]]})
    assert other == {"states": {"b-1": "validated"}, "venue_calls": 0}
    store = store_factory()
    assert store.controls("submit_order").breaker_open


def test_shadow_mode_set_elsewhere_never_calls_the_venue(store_factory) -> None:
    url = store_factory.url
    run_child(
        {
            "url": url,
            "role": "operator",
            "call": "set_shadow",
            "args": ["submit_order", True],
            "kwargs": {"operator": "alice"},
        }
    )
    shadow = run_child({"url": url, "role": "gate", "ops": [["s-1", "4"], ["s-2", "1"]]})
    assert shadow == {"states": {"s-1": "shadowed", "s-2": "shadowed"}, "venue_calls": 0}
