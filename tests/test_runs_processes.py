"""Admissions racing a seal from several processes (invariant 13), on both stores.

Child interpreters submit bound operations in a loop against their own tool calls of one run,
while this process seals the run. Nothing is shared in memory: whatever holds, holds because of
the store. Each child notes when each submit started and whether it was admitted; every submit
that started after the seal's commit returned must have been refused, the journal's
membership must be exactly what the children were told was admitted, and a snapshot taken as
the seal returned (children still submitting) must equal one taken after they stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from effectgate.store import open_store
from runkit import RUN, SCOPE, tool_call

pytestmark = pytest.mark.slow

CHILD = r"""
import json, sys, time
from decimal import Decimal
from effectgate import Gate, LimitPolicy, PolicySet, RunCallRef
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import RunSealed
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
seen, refused_in_a_row, i = [], 0, 0
while refused_in_a_row < 5 and time.time() < args["start_at"] + 60:
    op = f"{args['name']}-{i}"
    started = time.time()
    try:
        gate.submit("submit_order", op, EXAMPLE_ORDER, run_call=ref, dispatch=False)
        seen.append([op, started, True])
        refused_in_a_row = 0
        # Paced: a fast machine would otherwise admit past the snapshot's 4,096-entry bound
        # before the seal (the race needs admissions on both sides of it, not thousands).
        time.sleep(0.002)
    except RunSealed:
        seen.append([op, started, False])
        refused_in_a_row += 1
    i += 1
print(json.dumps(seen))
"""


class TestAdmissionsRaceASeal:
    """Invariant 13: none is admitted after the seal commits, across processes."""

    def test_no_admission_starts_after_the_seal_and_succeeds(self, store_factory) -> None:
        url = store_factory.url
        store = store_factory()
        children = 3
        for i in range(children):
            store.record_run_call(SCOPE, tool_call(f"t-{i}"), now=time.time(), actor="h")
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
                            "ref": [RUN, f"t-{i}", f"t-{i}-c1"],
                            "start_at": start_at,
                        }
                    ),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(children)
        ]
        # Seal once the children have admitted some, while they keep going: wait on the journal,
        # not the clock, since a loaded machine may start the children seconds late.
        sealer = open_store(url)
        deadline = time.time() + 90
        while time.time() < deadline:
            run = sealer.get_run(SCOPE, RUN)
            if run is not None and run.effects >= 2 * children:
                break
            time.sleep(0.05)
        sealer.seal_run(SCOPE, RUN, actor="ops-1", reason="race", now=time.time())
        sealed_returned = time.time()
        # The journal as it stood when the seal's commit returned, children still running: an
        # admission that committed after the seal would be missing from it.
        at_seal = sealer.snapshot_run(SCOPE, RUN, now=time.time(), actor="ops-1")
        seen: list[list] = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
            seen += json.loads(out.strip().splitlines()[-1])
        sealer.close()

        admitted = {op for op, _, ok in seen if ok}
        late = [op for op, started, ok in seen if ok and started > sealed_returned]
        assert late == [], f"admitted after the seal committed: {late}"
        assert admitted, "the race needs admissions before the seal"
        assert any(not ok for _, _, ok in seen), "every child met the seal"
        # The journal holds exactly what the children were told was admitted.
        bound = {
            op.operation_id
            for op in store.list_operations(scope=SCOPE, limit=100_000)
            if store.run_binding(SCOPE, op.operation_id) is not None
        }
        assert bound == admitted
        run = store.get_run(SCOPE, RUN)
        assert run is not None and run.effects == len(admitted)
        assert sum(c.effects for c in store.list_run_calls(SCOPE, RUN)) == len(admitted)
        # After the seal the membership is stable: two snapshots agree.
        first = store.snapshot_run(SCOPE, RUN, now=time.time(), actor="ops-1")
        second = store.snapshot_run(SCOPE, RUN, now=time.time(), actor="ops-1")
        assert first[1] == second[1] == at_seal[1] and not second[2]


HARNESS = r"""
import hashlib, json, os, signal, sys
from decimal import Decimal
from effectgate import (Gate, LimitPolicy, PolicySet, RunCall, RunCompletion, RunJournal)
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store import open_store

sha = lambda text: hashlib.sha256(text.encode()).hexdigest()
store = open_store(sys.argv[1], create=True)
policy = PolicySet({"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("1")),
                    "cancel_order": LimitPolicy()})
gate = Gate(store=store, registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())}, policy=policy)
journal = RunJournal(store, actor="harness-a")
plan = RunCall("run-1", "a-model", "c1", "model", sha("p1"), 2, provider="acme-llm", model="m")
journal.record(plan)
journal.complete(plan.ref, RunCompletion(sha("plan"), 4, 10))
tool = RunCall("run-1", "b-tool", "c2", "tool", sha("args"), 4, tool="place_order")
journal.record(tool)
with journal.call_context(tool.ref):
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER)  # over 1: waits for approval
print(row.state.value, flush=True)
journal.record(RunCall("run-1", "c-model", "c3", "model", sha("p2"), 2, provider="acme-llm",
                       model="m"))
os.kill(os.getpid(), signal.SIGKILL)  # dies during the provider call
"""


class TestHarnessKilledMidRun:
    """A harness process SIGKILLed during a provider call; another recovers from the store."""

    def test_recovery_after_a_kill(self, store_factory) -> None:
        from effectgate import ProviderReconciler, RunJournal, RunSealer, verify_run_snapshot
        from runkit import digest, receipt

        url = store_factory.url
        proc = subprocess.run(
            [sys.executable, "-c", HARNESS, url], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == -9, proc.stderr[-2000:]
        assert proc.stdout.split() == ["awaiting_approval"]
        store = store_factory()
        survivor = RunJournal(store, actor="harness-b")
        open_calls = [r.call.slot for r in survivor.calls(RUN) if not r.finished]
        assert open_calls == ["b-tool", "c-model"]
        RunSealer(store, authorize=lambda r: None).seal(RUN, actor="ops-1", reason="killed")
        lost = store.get_run_call(SCOPE, RUN, "c-model")
        assert lost is not None
        answer = receipt(lost.call, result="late answer")

        def lookup(scope: str, record: object) -> object:
            return answer

        page = ProviderReconciler(
            store,
            lookup=lookup,
            authenticate=lambda rec, r: None,  # type: ignore[arg-type]
        ).reconcile_page(RUN)
        assert (page.terminal, page.returned, page.tool_calls) == (1, 1, 1)
        document, _, _ = store.snapshot_run(SCOPE, RUN, now=time.time(), actor="ops-1")
        summary = verify_run_snapshot(document)
        assert summary["effects"] == 1 and summary["unfinished_calls"] == 2
        doc = json.loads(document)
        assert doc["effects"][0]["state"] == "awaiting_approval"
        assert doc["provider_receipts"][0]["result_digest"] == digest("late answer")
