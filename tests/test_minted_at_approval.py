"""Operation ids minted at approval (issue 39 item 7: "a token minted at approval, never a
payload hash"), on every store.

A minted-id class mints the operation id at the decision that lets the action run: the policy's,
when no approval is needed; the approval that completes, when one is. Until then the proposal is
a ``proposal:`` handle, the name approvers answer, bound to the caller's request key; nothing is
dispatched under it, and a proposal refused or denied never gets an operation id. The guarantees
checked: invariant 1 (one operation and one dispatch per deliberate action, however often it is
proposed), invariant 3 (the operation is journalled before its dispatch, under the id the venue
sees) and invariant 8 (the audit chain verifies across the hand-over).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate import Dispatcher, Gate, IntentError, State
from effectgate._core.budgets import RunBudget
from effectgate._core.runs import RunCall
from effectgate._doors.http.app import create_app
from effectgate._execute.budgets import budget_dispatch_check
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import NotAwaitingApproval
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.roles import Store
from effectgate.testing import ManualClock, assert_invariants
from runkit import RUN, SCOPE, tool_call
from servicekit import AGENT_A, OPERATOR, ORDER, bearer
from test_minted_ids import BIG, INTENT, MINTED, World, make_world, minted_config

PROPOSAL = re.compile(r"proposal:[0-9a-f]{32}")


@pytest.fixture
def minted(store: Store) -> World:
    return make_world(store, "minted")


def minted_ids(w: World) -> set[str]:
    """Every operation id in the minted namespace the ledger or its audit log names."""
    rows = {r.operation_id for r in w.store.list_operations(limit=1000)}
    logged = {e.operation_id for e in w.store.iter_audit() if e.operation_id}
    return {i for i in rows | logged if MINTED.fullmatch(i)}


def checked(w: World) -> None:
    keys = [r.operation_key for r in w.venue.visible_records()]
    assert_invariants(
        w.store, registry=w.gate.registry, requests=w.adapter.requests, venue_keys=keys
    )


class TestMintedAtApproval:
    def test_a_proposal_has_no_operation_id_until_its_approval_mints_one(
        self, minted: World
    ) -> None:
        """Invariants 1 and 3: the proposal waits under its handle with no operation id
        anywhere; the approval mints one, the venue sees only it, and the request key before
        and after names the one proposal, then the one operation."""
        waiting = minted.gate.submit("submit_order", "req-big", BIG)
        handle = waiting.operation_id
        assert waiting.state is State.AWAITING_APPROVAL and PROPOSAL.fullmatch(handle)
        assert minted_ids(minted) == set()
        assert "proposal_handle_bound" in minted.kinds(handle)
        again = minted.gate.submit("submit_order", "req-big", BIG)
        assert (again.operation_id, again.replayed) == (handle, True)
        assert [o.operation_id for o in minted.operator.pending()] == [handle]

        outcome = minted.operator.approve(handle, fingerprint=waiting.fingerprint, approver="al")
        op = outcome.operation
        assert (
            outcome.complete and op.state is State.VALIDATED and MINTED.fullmatch(op.operation_id)
        )
        assert op.fingerprint == waiting.fingerprint and minted_ids(minted) == {op.operation_id}
        proposal = minted.store.get("default", handle)
        assert proposal is not None and proposal.state is State.SUPERSEDED
        assert op.operation_id in (proposal.detail or "")
        (entry,) = [e for e in minted.store.iter_audit() if e.kind == "operation_id_minted"]
        assert entry.operation_id == op.operation_id
        assert (entry.detail["proposal"], entry.detail["request_key"]) == (handle, "req-big")
        assert [a.approver for a in minted.store.list_approvals("default", op.operation_id)] == [
            "al"
        ]

        reproposed = minted.gate.submit("submit_order", "req-big", BIG)
        assert (reproposed.operation_id, reproposed.replayed) == (op.operation_id, True)
        assert minted.gate.dispatch(op.operation_id).state is State.ACKNOWLEDGED
        after = minted.gate.submit("submit_order", "req-big", BIG)
        assert after.operation_id == op.operation_id and after.state is State.ACKNOWLEDGED
        assert minted.gate.dispatch(handle).state is State.SUPERSEDED  # never runs
        assert [r.operation_key for r in minted.adapter.requests] == [f"default:{op.operation_id}"]
        assert minted.venue.effect_count == 1
        assert minted.store.count_by_state() == {
            ("submit_order", "acknowledged"): 1,
            ("submit_order", "superseded"): 1,
        }
        checked(minted)

    def test_a_released_approval_is_sent_under_the_minted_id(self, minted: World) -> None:
        """A proposal submitted to be sent is released by its approval under the minted id:
        the standing dispatcher sends that, once (invariants 1 and 3)."""
        waiting = minted.gate.submit("submit_order", "req-big", BIG)
        outcome = minted.operator.approve(
            waiting.operation_id, fingerprint=waiting.fingerprint, approver="al"
        )
        assert outcome.released
        report = Dispatcher(minted.gate).run_once()
        assert report.sent == 1
        done = minted.gate.get(outcome.operation.operation_id)
        assert done.state is State.ACKNOWLEDGED
        assert [r.operation_key for r in minted.adapter.requests] == [
            f"default:{done.operation_id}"
        ]
        assert Dispatcher(minted.gate).run_once().sent == 0
        checked(minted)

    def test_a_denied_proposal_never_gets_an_operation_id(self, minted: World) -> None:
        """Refused or expired: the proposal ends denied under its handle, nothing is minted,
        and the request key again replays the denial (invariant 1: no second action)."""
        refused = minted.gate.submit("submit_order", "req-no", BIG)
        minted.operator.refuse(
            refused.operation_id, fingerprint=refused.fingerprint, approver="al", reason="no"
        )
        expiring = minted.gate.submit("submit_order", "req-late", BIG)
        minted.gate.clock.advance(minted.gate.approvals.ttl + 1)  # type: ignore[attr-defined]
        assert [r.operation_id for r in minted.operator.expire_approvals()] == [
            expiring.operation_id
        ]
        for key, row in (("req-no", refused), ("req-late", expiring)):
            again = minted.gate.submit("submit_order", key, BIG)
            assert again.state is State.DENIED and again.operation_id == row.operation_id
        assert minted_ids(minted) == set() and minted.adapter.execute_calls == 0
        checked(minted)

    def test_a_rejected_proposal_gets_no_operation_id(self, minted: World) -> None:
        """Policy refused it, so nothing lets it run: a handle, never a minted id; the same
        request key replays the rejection."""
        over = dict(EXAMPLE_ORDER, quantity="5000")  # 500000 > the limit
        first = minted.gate.submit("submit_order", "req-no", over)
        assert first.state is State.REJECTED and PROPOSAL.fullmatch(first.operation_id)
        again = minted.gate.submit("submit_order", "req-no", over)
        assert again.operation_id == first.operation_id and again.replayed
        assert minted_ids(minted) == set() and minted.adapter.execute_calls == 0

    def test_the_handle_sent_back_is_the_proposal_s_retry(self, minted: World) -> None:
        """In place of the request key the handle replays the proposal (superseded once
        approved, naming its operation); one the boundary never gave out is refused."""
        waiting = minted.gate.submit("submit_order", "req-big", BIG)
        again = minted.gate.submit("submit_order", waiting.operation_id, BIG)
        assert again.operation_id == waiting.operation_id and again.replayed
        minted.operator.approve(waiting.operation_id, fingerprint=waiting.fingerprint, approver="a")
        later = minted.gate.submit("submit_order", waiting.operation_id, BIG)
        assert later.state is State.SUPERSEDED and minted.adapter.execute_calls == 0
        with pytest.raises(IntentError) as info:
            minted.gate.submit("submit_order", "proposal:" + "0" * 32, BIG)
        assert info.value.reason == "unknown_minted_operation"

    def test_an_allowed_proposal_is_still_minted_at_the_policy_decision(
        self, minted: World
    ) -> None:
        """No approval needed: the policy's decision lets it run, so it mints then."""
        op = minted.gate.submit("submit_order", "req-1", INTENT)
        assert MINTED.fullmatch(op.operation_id) and op.state is State.ACKNOWLEDGED

    def test_the_store_never_completes_a_handle_without_an_id_to_mint(self, minted: World) -> None:
        """Invariant 3's guard in the store: completing a proposal handle's approvals without
        the id to hand it over to is refused, and the answer is rolled back."""
        waiting = minted.gate.submit("submit_order", "req-big", BIG)
        with pytest.raises(NotAwaitingApproval, match="proposal handle"):
            minted.store.decide_approval(
                "default",
                waiting.operation_id,
                approver="al",
                fingerprint=waiting.fingerprint,
                approve=True,
                reason=None,
                now=minted.gate.clock(),
            )
        row = minted.store.get("default", waiting.operation_id)
        assert row is not None and row.state is State.AWAITING_APPROVAL
        assert minted.store.list_approvals("default", waiting.operation_id) == []


def test_caller_mode_refuses_the_proposal_namespace(store: Store) -> None:
    w = make_world(store, "caller")
    with pytest.raises(IntentError) as info:
        w.gate.submit("submit_order", "proposal:" + "ab" * 16, INTENT)
    assert info.value.reason == "reserved_operation_id" and w.store.count_by_state() == {}


@pytest.fixture
def http(tmp_path: Path, store: Store) -> Iterator[tuple[TestClient, PaperVenue]]:
    venue = PaperVenue()
    cfg = parse_config(minted_config(tmp_path), "test.toml")
    svc = Service(cfg, adapters={"venue": PaperAdapter(venue)}, store=store)
    with TestClient(create_app(svc, mcp_http=False)) as c:
        yield c, venue
    svc.close()


def test_over_http_the_approval_mints_and_sends_once(http: tuple[TestClient, PaperVenue]) -> None:
    """Invariant 1 over HTTP: the Idempotency-Key names the proposal; the approval route
    answers the operation it minted, sent at once; the key again returns that operation."""
    client, venue = http
    big = {**ORDER, "quantity": "10", "limit_price": "95.00"}  # 950 > approve_above 900
    headers = {"Content-Type": "application/json", "Idempotency-Key": "req-1", **bearer(AGENT_A)}
    body = json.dumps(big).encode()
    first = client.post("/v1/actions/submit_order", content=body, headers=headers)
    assert first.status_code in (201, 202), first.text
    handle = first.json()["operation_id"]
    assert PROPOSAL.fullmatch(handle) and first.json()["state"] == "awaiting_approval"
    approved = client.post(
        f"/v1/admin/approvals/alpha/{handle}/approve",
        json={"fingerprint": first.json()["fingerprint"]},
        headers=bearer(OPERATOR),
    )
    assert approved.status_code == 200, approved.text
    op = approved.json()["operation"]
    assert MINTED.fullmatch(op["operation_id"]) and op["state"] == "acknowledged"
    again = client.post("/v1/actions/submit_order", content=body, headers=headers)
    assert again.json()["operation_id"] == op["operation_id"]
    assert again.headers["idempotent-replayed"] == "true" and venue.effect_count == 1


def test_an_upgraded_postgresql_ledger_accepts_the_superseded_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL ledger made before ``superseded`` existed keeps a check on the state
    column without it; the migration re-creates the check, so a hand-over can be written."""
    import uuid

    import psycopg

    from conftest import require_pg
    from effectgate.store import postgres as pg

    url, schema = require_pg(), f"t_{uuid.uuid4().hex[:12]}"
    full = list(pg.MIGRATIONS)
    old_first = full[0].replace(", 'superseded'", "")
    assert old_first != full[0]
    monkeypatch.setattr(pg, "MIGRATIONS", [old_first, *full[1:-1]])
    pg.PostgresStore(url, schema=schema).close()
    monkeypatch.setattr(pg, "MIGRATIONS", full)
    try:
        w = make_world(pg.PostgresStore(url, schema=schema), "minted")
        waiting = w.gate.submit("submit_order", "req-big", BIG)
        w.operator.approve(waiting.operation_id, fingerprint=waiting.fingerprint, approver="al")
        row = w.store.get("default", waiting.operation_id)
        assert row is not None and row.state is State.SUPERSEDED
        w.store.close()
        with psycopg.connect(url) as conn:
            (check,) = conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = "
                "'operations_state_check' AND connamespace = %s::regnamespace",
                (schema,),
            ).fetchone() or ("",)
        assert "superseded" in check
    finally:
        pg.drop_schema(url, schema)


class TestHandOverUnderConcurrencyAndRounds:
    def test_a_partial_approval_mints_nothing(self, store: Store) -> None:
        """Two approvers needed: the first answer leaves the proposal under its handle; the
        second mints the id (invariant 1: one operation)."""
        from dataclasses import replace

        from effectgate import Registry, Tier
        from effectgate.examples import cancel_order_class, submit_order_class

        w = make_world(store, "minted")
        w.gate.registry = Registry(
            [
                replace(
                    submit_order_class(), operation_ids="minted", tier_floor=Tier.MULTI_APPROVE
                ),
                cancel_order_class(),
            ]
        )
        waiting = w.gate.submit("submit_order", "req-2", INTENT)
        handle, fp = waiting.operation_id, waiting.fingerprint
        assert waiting.state is State.AWAITING_APPROVAL and PROPOSAL.fullmatch(handle)
        first = w.operator.approve(handle, fingerprint=fp, approver="al")
        assert not first.complete and first.operation.operation_id == handle
        assert minted_ids(w) == set()
        second = w.operator.approve(handle, fingerprint=fp, approver="bo")
        assert second.complete and MINTED.fullmatch(second.operation.operation_id)
        approvers = w.store.list_approvals("default", second.operation.operation_id)
        assert sorted(a.approver for a in approvers) == ["al", "bo"]

    def test_reproposals_racing_the_approval_open_no_second_action(self, minted: World) -> None:
        """Invariant 1 across threads: proposals under the key while the approval hands the
        proposal over each get the proposal or the operation, never a new one; one effect."""
        import threading
        from concurrent.futures import ThreadPoolExecutor

        waiting = minted.gate.submit("submit_order", "req-race", BIG)
        barrier = threading.Barrier(5)

        def propose() -> str:
            barrier.wait()
            return minted.gate.submit("submit_order", "req-race", BIG).operation_id

        def approve() -> str:
            barrier.wait()
            out = minted.operator.approve(
                waiting.operation_id, fingerprint=waiting.fingerprint, approver="al"
            )
            return out.operation.operation_id

        with ThreadPoolExecutor(5) as pool:
            proposed = [pool.submit(propose) for _ in range(4)]
            minted_id = pool.submit(approve).result()
            seen = {f.result() for f in proposed}
        assert seen <= {waiting.operation_id, minted_id} and MINTED.fullmatch(minted_id)
        assert minted.gate.submit("submit_order", "req-race", BIG).operation_id == minted_id
        minted.gate.dispatch(minted_id)
        assert minted.venue.effect_count == 1 and minted_ids(minted) == {minted_id}
        assert sorted(minted.store.count_by_state().values()) == [1, 1]
        checked(minted)


class TestARunsBindingCrossesTheHandOver:
    """A run-bound proposal of a minted-id class keeps its run across the hand-over: the binding
    (``run_effects``) moves from the handle to the minted id in the approval's transaction, so
    the run's budget still governs the effect (invariant 12: budgets are never overspent) and a
    re-proposal under the request key is the same bound operation (invariant 1)."""

    def bound(self, store: Store, budget: RunBudget) -> tuple[World, RunCall]:
        w = make_world(store, "minted")
        w.gate = Gate(
            store=store,
            registry=w.gate.registry,
            adapters=w.gate.adapters,
            policy=w.gate.policy,
            clock=w.gate.clock,
            admission_checks=[budget_dispatch_check],
        )
        store.set_run_budget(SCOPE, RUN, budget, now=0.5, actor="harness-1")
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor="harness-1")
        return w, call

    def test_the_binding_moves_to_the_minted_id(self, store: Store) -> None:
        w, call = self.bound(store, RunBudget(max_tool_calls=5))
        waiting = w.gate.submit("submit_order", "req-big", BIG, run_call=call.ref, dispatch=False)
        handle = waiting.operation_id
        assert store.run_binding(SCOPE, handle) == call.ref
        op = w.operator.approve(handle, fingerprint=waiting.fingerprint, approver="al").operation
        assert store.run_binding(SCOPE, op.operation_id) == call.ref
        assert store.run_binding(SCOPE, handle) is None, "the handle is never an effect"
        (entry,) = [e for e in store.iter_audit() if e.kind == "operation_id_minted"]
        assert entry.detail["run_call"] == call.ref.to_dict()
        again = w.gate.submit("submit_order", "req-big", BIG, run_call=call.ref, dispatch=False)
        assert (again.operation_id, again.replayed) == (op.operation_id, True)
        run = store.get_run(SCOPE, RUN)
        state = store.run_budget(SCOPE, RUN)
        assert run is not None and run.effects == 1
        assert state is not None and state.usage.tool_calls == 1, "one slot, charged once"
        assert w.gate.dispatch(op.operation_id).state is State.ACKNOWLEDGED
        checked(w)

    def test_the_runs_deadline_still_refuses_the_minted_operation(self, store: Store) -> None:
        """Before the fix the minted id had no binding, so the dispatch check never saw the
        run: past the run's deadline the effect was sent anyway."""
        deadline = ManualClock().now + 50.0  # the minted world's clock starts there
        w, call = self.bound(store, RunBudget(deadline=deadline))
        waiting = w.gate.submit("submit_order", "req-big", BIG, run_call=call.ref, dispatch=False)
        op = w.operator.approve(
            waiting.operation_id, fingerprint=waiting.fingerprint, approver="al"
        ).operation
        clock = w.gate.clock
        if not isinstance(clock, ManualClock):
            raise TypeError("the minted world runs on a manual clock")
        clock.advance(60.0)
        out = w.gate.dispatch(op.operation_id)
        assert out.state is State.REJECTED and "deadline" in (out.detail or "")
        assert w.adapter.execute_calls == 0 and w.venue.effect_count == 0
