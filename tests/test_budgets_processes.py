"""Processes racing admissions on one plan account and one run budget (invariant 12: budgets and
reservations never overdraw, across processes), on both stores.

Child interpreters reserve leaves under one branch of one plan, and submit bound operations
against one budgeted run, as fast as they can from the same start time. Nothing is shared in
memory: whatever holds, holds because of the store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from effectgate._core.budgets import Resources, RunBudget
from effectgate._core.reservations import PlanPolicy, ReservationKind, ReservationRequest
from runkit import RUN, SCOPE, tool_call

pytestmark = pytest.mark.slow

DIGEST = "f" * 64

CHILD = r"""
import json, sys, time
from decimal import Decimal
from effectgate import Gate, LimitPolicy, PolicySet, RunCallRef
from effectgate._core.budgets import Resources
from effectgate._core.reservations import ReservationKind, ReservationRequest
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import BudgetExceeded
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store import open_store

args = json.loads(sys.argv[1])
store = open_store(args["url"], create=True)
gate = Gate(store=store, registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000")),
                              "cancel_order": LimitPolicy(Decimal("1"))}))
ref = RunCallRef(*args["ref"])
while time.time() < args["start_at"]:
    time.sleep(0.002)
reserved, admitted = [], []
for i in range(args["tries"]):
    rid = f"{args['name']}-{i}"
    leaf = ReservationRequest(rid, "plan-1", args["digest"], f"task-{rid}", f"att-{rid}",
                              ReservationKind.LEAF, Resources(steps=1, tokens=10, fan_out=1),
                              900.0, parent_id="team")
    try:
        store.reserve("default", leaf, now=10.0, actor=args["name"])
        reserved.append(rid)
    except BudgetExceeded:
        pass
    try:
        gate.submit("submit_order", rid, EXAMPLE_ORDER, run_call=ref, dispatch=False)
        admitted.append(rid)
    except BudgetExceeded:
        pass
print(json.dumps({"reserved": reserved, "admitted": admitted}))
"""


class TestRacingAdmissionsCannotOverdraw:
    """Invariant 12, across processes, on SQLite and PostgreSQL."""

    def test_reservations_and_tool_slots_stop_exactly_at_the_limit(
        self, store_factory: Any
    ) -> None:
        url = store_factory.url
        store = store_factory()
        policy = PlanPolicy(
            "plan-1", DIGEST, Resources(steps=100, tokens=1000, fan_out=20), 1000.0, True
        )
        store.open_plan_account(SCOPE, policy, now=1.0, actor="h")
        team = ReservationRequest(
            "team", "plan-1", DIGEST, "task-team", "att-team", ReservationKind.BRANCH,
            Resources(steps=50, tokens=70, fan_out=12), 950.0,
        )  # fmt: skip
        store.reserve(SCOPE, team, now=2.0, actor="h")
        store.set_run_budget(SCOPE, RUN, RunBudget(max_tool_calls=9), now=time.time(), actor="h")
        store.record_run_call(SCOPE, tool_call("t-1"), now=time.time(), actor="h")
        start_at = time.time() + 2.0
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    json.dumps(
                        {
                            "url": url,
                            "name": f"p{i}",
                            "ref": [RUN, "t-1", "t-1-c1"],
                            "start_at": start_at,
                            "tries": 8,
                            "digest": DIGEST,
                        }
                    ),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        reserved: list[str] = []
        admitted: list[str] = []
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err[-3000:]
            got = json.loads(out.strip().splitlines()[-1])
            reserved += got["reserved"]
            admitted += got["admitted"]
        # The branch holds 70 tokens; its own slot leaves 11 fan-out slots: tokens bind first
        # (7 leaves of 10). 24 attempts raced for them.
        assert len(reserved) == 7, reserved
        snap = store.plan_account(SCOPE, "plan-1")
        assert snap.reservations == 8
        assert snap.used == Resources(steps=50, tokens=70, fan_out=12)
        assert snap.used.tokens <= policy.limits.tokens
        kids = snap.roots[0].children
        assert sum(k.holds.tokens for k in kids) == 70
        # The run's nine tool slots went to exactly nine operations, whichever won.
        assert len(admitted) == 9, admitted
        state = store.run_budget(SCOPE, RUN)
        assert state is not None and state.usage.tool_calls == 9
        run = store.get_run(SCOPE, RUN)
        assert run is not None and run.effects == 9
        bound = {
            op.operation_id
            for op in store.list_operations(scope=SCOPE, limit=10_000)
            if store.run_binding(SCOPE, op.operation_id) is not None
        }
        assert bound == set(admitted)


VALUE_CHILD = r"""
import json, sys, time
from decimal import Decimal
from effectgate import Gate, LimitPolicy, PolicySet, RunCallRef, State
from effectgate._execute.budgets import budget_dispatch_check
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store import open_store
from effectgate.testing import CountingAdapter

args = json.loads(sys.argv[1])
store = open_store(args["url"], create=True)
adapter = CountingAdapter(PaperAdapter(PaperVenue()))
gate = Gate(store=store, registry=default_registry(), adapters={"paper": adapter},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000")),
                              "cancel_order": LimitPolicy()}),
            admission_checks=[budget_dispatch_check])
ref = RunCallRef(*args["ref"])
while time.time() < args["start_at"]:
    time.sleep(0.002)
sent, refused = [], []
for i in range(args["tries"]):
    op = f"{args['name']}-{i}"
    row = gate.submit("submit_order", op, EXAMPLE_ORDER, run_call=ref)
    (sent if row.state is State.ACKNOWLEDGED else refused).append(op)
print(json.dumps({"sent": sent, "refused": refused, "calls": adapter.execute_calls}))
"""


class TestRacingValueChargesCannotOverdraw:
    """Invariant 12 on the value dimension, across processes, on SQLite and PostgreSQL: three
    processes dispatch effects of one run, each under the per-action ceiling; together they
    never pass the leaf's value allocation."""

    def test_dispatched_value_stops_exactly_at_the_leaf(self, store_factory: Any) -> None:
        from decimal import Decimal

        from effectgate._core.controls import to_micros

        url = store_factory.url
        store = store_factory()
        now = time.time()
        value = to_micros(Decimal("4000"))  # ten orders of 400
        limits = Resources(steps=10, tokens=100, tool_calls=50, fan_out=2, value_micros=value)
        policy = PlanPolicy("plan-v", DIGEST, limits, now + 3600, True, value_bound=True)
        store.open_plan_account(SCOPE, policy, now=now, actor="h")
        leaf = ReservationRequest(
            "leaf", "plan-v", DIGEST, "task", "att", ReservationKind.LEAF,
            Resources(steps=1, tokens=10, tool_calls=40, fan_out=1, value_micros=value),
            now + 1800,
        )  # fmt: skip
        store.reserve(SCOPE, leaf, now=now, actor="h")
        store.admit_run(SCOPE, RUN, "plan-v", "leaf", now=now, actor="h")
        store.record_run_call(SCOPE, tool_call("t-1"), now=now, actor="h")
        start_at = time.time() + 2.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", VALUE_CHILD, json.dumps({
                    "url": url, "name": f"p{i}", "ref": [RUN, "t-1", "t-1-c1"],
                    "start_at": start_at, "tries": 8,
                })],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for i in range(3)
        ]  # fmt: skip
        sent: list[str] = []
        calls = 0
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err[-3000:]
            got = json.loads(out.strip().splitlines()[-1])
            sent += got["sent"]
            calls += got["calls"]
        # 24 attempts raced for ten orders' worth of value: exactly ten were sent.
        assert len(sent) == 10, sent
        assert calls == 10
        assert store.run_dispatched_value(SCOPE, RUN) == value
        res, _ = store.settle_run(SCOPE, RUN, now=time.time(), actor="h")
        assert res.charge is not None and res.charge.value_micros == value
        assert store.plan_account(SCOPE, "plan-v").used.value_micros == value
