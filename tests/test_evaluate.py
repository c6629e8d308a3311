"""Evaluate without writing (issue 41 part 1): ``Gate.evaluate`` on every store, its token at
submit, and the doors (HTTP in process, MCP through the SDK's real client).

Evaluate is a read: it must leave every row, budget, breaker counter and rate window as it
found them (invariant 3's other side: nothing is journalled, so nothing may be dispatched), and
write only its audit line."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from effectgate import BreakerConfig, Gate, LimitPolicy, Operator, PolicySet, State, Tier
from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.intent import ActionClass, EffectClass, Registry
from effectgate._core.speculation import Speculation
from effectgate._doors.http.app import EVALUATION_HEADER, create_app
from effectgate._doors.mcp.server import build_server
from effectgate._execute.evaluate import Evaluator
from effectgate._execute.predispatch import DispatchContext, Refusal, Stage
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters._paper_sandbox import PaperSandbox, SandboxMode
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import (
    EvaluationTokenInvalid,
    EvaluationTokenStale,
    IntentError,
    UnknownActionClass,
)
from effectgate.examples import EXAMPLE_ORDER, SubmitOrder, cancel_order_class, notional
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore
from effectgate.testing import ManualClock
from servicekit import AGENT_A, ORDER, bearer, config_text

INTENT = dict(EXAMPLE_ORDER)  # notional 400


def order(qty: str = "4", **extra: object) -> dict[str, object]:
    return {**INTENT, "quantity": qty, **extra}


def registry(spec: Speculation | None = None) -> Registry:
    submit = ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter="paper",
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=60.0,
        key_retention=86400.0,
        value_of=notional,
        target_field="instrument",
        tier_floor=Tier.VALIDATE,
        speculation=spec,
    )
    return Registry([submit, cancel_order_class()])


def policy(version: str = "limit-1") -> PolicySet:
    return PolicySet(
        {
            "submit_order": replace(
                LimitPolicy(Decimal("100000"), approve_above=Decimal("5000")), version=version
            ),
            "cancel_order": LimitPolicy(Decimal("1")),
        }
    )


@dataclass
class World:
    store: Store
    venue: PaperVenue
    gate: Gate
    operator: Operator
    clock: ManualClock


def world(
    store: Store,
    *,
    spec: Speculation | None = None,
    mode: str = "honest",
    max_qty: int | None = None,
    preconditions: tuple[Stage, ...] = (),
    evaluator: Evaluator | None = None,
) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock, max_quantity=max_qty)
    sandbox = PaperSandbox(venue, mode=SandboxMode(mode), lifetime=60.0, clock=clock)
    adapter = PaperAdapter(venue, sandbox=sandbox) if spec is not None else PaperAdapter(venue)
    gate = Gate(
        store=store,
        registry=registry(spec),
        adapters={"paper": adapter},
        policy=policy(),
        clock=clock,
        breakers={"submit_order": BreakerConfig(window=300.0, max_repeats=50, max_new_targets=9)},
        evaluator=evaluator or Evaluator(b"s" * 32),
        preconditions=preconditions,
    )
    operator = Operator(store=store, registry=gate.registry, clock=clock)
    return World(store, venue, gate, operator, clock)


def _tables(store: Store) -> list[str]:
    rows = store._rows  # type: ignore[attr-defined]
    if isinstance(store, SQLiteStore):
        found = rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        found = rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    return sorted(str(r[0]) for r in found)


def snapshot(store: Store) -> dict[str, list[str]]:
    """Every table's rows but the audit's (evaluate's one write is an audit line)."""
    rows = store._rows  # type: ignore[attr-defined]
    return {
        t: sorted(repr(tuple(r)) for r in rows(f"SELECT * FROM {t}"))
        for t in _tables(store)
        if not t.startswith("audit")
    }


def evaluations(store: Store) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in store.iter_audit() if e.kind == "intent_evaluated"]


def with_envelope(w: World) -> None:
    w.operator.step(
        "submit_order", "rate", {"limit": 2, "interval": 60}, evidence={"t": "x"},
        reverse_on="manual", operator="ops",
    )  # fmt: skip
    w.operator.step(
        "submit_order", "exposure", {"limit": "1000", "window": 60}, evidence={"t": "x"},
        reverse_on="manual", operator="ops",
    )  # fmt: skip


def with_token(gate: Gate, token: str, intent: dict[str, object], principal: str) -> object:
    return gate.submit("submit_order", "op-1", intent, principal=principal, evaluation_token=token)


class TestEvaluateWritesNothing:
    """Evaluate changes no row, budget, breaker counter or rate window; one audit line."""

    def test_every_table_but_the_audit_is_unchanged(self, store: Store) -> None:
        w = world(store)
        with_envelope(w)
        w.gate.submit("submit_order", "seen", order(), principal="agent-1")  # a window entry
        before = snapshot(store)
        audit_before = len(list(store.iter_audit()))
        results = [
            w.gate.evaluate("submit_order", order(), principal="agent-1"),
            w.gate.evaluate("submit_order", order("60"), principal="agent-1"),  # approval tier
            w.gate.evaluate("submit_order", order(instrument="NEW-1"), principal="agent-1"),
            w.gate.evaluate("submit_order", order("4"), operation_id="seen", principal="a2"),
        ]
        assert snapshot(store) == before
        assert len(list(store.iter_audit())) == audit_before + len(results)
        assert [e["outcome"] for e in evaluations(store)] == [r.outcome for r in results]
        assert results[-1].outcome == "replay"
        assert store.dispatch_window("submit_order", 0.0) == (1, 400_000_000)

    def test_an_existing_operation_id_is_a_replay_or_a_conflict(self, store: Store) -> None:
        w = world(store)
        w.gate.submit("submit_order", "seen", order(), principal="agent-1")
        same = w.gate.evaluate("submit_order", order(), operation_id="seen", principal="agent-1")
        other = w.gate.evaluate("submit_order", order("5"), operation_id="seen")
        assert (same.outcome, other.outcome) == ("replay", "conflict")
        assert same.reasons[0].startswith("replay: 'seen' is acknowledged")

    def test_it_quotes_what_would_be_reserved_and_what_is_left(self, store: Store) -> None:
        w = world(store)
        with_envelope(w)
        w.gate.submit("submit_order", "seen", order(), principal="agent-1")
        got = w.gate.evaluate("submit_order", order("5"), principal="agent-1").to_dict()
        budgets = {b["name"]: b for b in got["budgets"]}
        assert budgets["envelope.rate"] == {
            "name": "envelope.rate", "unit": "dispatches", "limit": 2, "used": 1,
            "reserve": 1, "left": 0,
        }  # fmt: skip
        assert budgets["envelope.exposure"]["reserve"] == 500_000_000
        assert budgets["envelope.exposure"]["left"] == 100_000_000
        assert got["outcome"] == "dispatch"
        over = w.gate.evaluate("submit_order", order("7"), principal="agent-1")
        assert over.outcome == "held"
        assert any("envelope.exposure" in r for r in over.reasons)

    def test_kill_switch_and_approvals_are_reported(self, store: Store) -> None:
        w = world(store)
        w.operator.kill("submit_order", operator="ops", reason="drill")
        held = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert held.outcome == "held"
        assert "held: kill switch on submit_order (drill)" in held.reasons
        assert held.controls["killed"] is True
        big = w.gate.evaluate("submit_order", order("60"), principal="agent-1")
        assert big.outcome == "awaiting_approval"
        assert big.approvals is not None
        assert big.approvals["required"] == 1
        assert big.approvals["excluded"] == ["agent-1"]
        assert store.get("default", "evaluation") is None

    def test_policy_refusal_is_rejected_with_its_reason(self, store: Store) -> None:
        w = world(store)
        got = w.gate.evaluate("submit_order", order("2000"), principal="agent-1")
        assert got.outcome == "rejected"
        assert got.state.allowed is False
        assert got.reasons[0] == "policy: value 200000 over limit 100000"
        assert got.approvals is None

    def test_speculation_verdict_without_an_effect(self, store: Store) -> None:
        """The venue's dry run is reported; nothing reaches the venue, nothing is recorded."""
        w = world(store, spec=Speculation(verdict_lifetime=60.0))
        before = snapshot(store)
        got = w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert got.speculation is not None
        assert got.speculation["verdict"] == "ALLOW"
        assert w.venue.records_after(None, 100) == []
        assert snapshot(store) == before
        assert store.speculations("default", "evaluation") == []

    def test_a_denying_dry_run_is_a_rejection(self, store: Store) -> None:
        w = world(store, spec=Speculation(verdict_lifetime=60.0), max_qty=2)
        before = snapshot(store)
        got = w.gate.evaluate("submit_order", order("4"), principal="agent-1")
        assert got.speculation is not None and got.speculation["verdict"] == "DENY"
        assert got.outcome == "rejected"
        assert any(r.startswith("speculation: ") for r in got.reasons)
        assert snapshot(store) == before
        assert w.venue.records_after(None, 100) == []


def small_orders_only(ctx: DispatchContext) -> Refusal | None:
    """A host precondition: a quantity above 5 must be re-approved (e.g. the book moved)."""
    if Decimal(str(ctx.entry.effect["quantity"])) > 5:
        return Refusal("reject", "quantity_stale", "quantity above the approved book depth")
    return None


def broken(ctx: DispatchContext) -> Refusal | None:
    raise RuntimeError("the host's feed is down")


class TestPreconditions:
    """The pre-dispatch pipeline's preconditions run over the unjournalled row: evaluate
    reports each stage and refuses as a submit would, and writes nothing (invariant 3)."""

    def test_a_refusing_precondition_is_a_rejection_the_submit_agrees_with(
        self, store: Store
    ) -> None:
        w = world(store, preconditions=(small_orders_only,))
        before = snapshot(store)
        ok = w.gate.evaluate("submit_order", order("4"), principal="agent-1")
        no = w.gate.evaluate("submit_order", order("6"), principal="agent-1")
        assert ok.outcome == "dispatch"
        assert ok.checks == ({"stage": "precondition", "passed": True},)
        assert no.outcome == "rejected"
        assert no.checks == (
            {"stage": "precondition", "passed": False, "code": "quantity_stale",
             "move": "reject", "reason": "quantity above the approved book depth"},
        )  # fmt: skip
        assert "precondition: quantity_stale: quantity above the approved book depth" in (
            no.reasons
        )
        assert snapshot(store) == before
        assert w.venue.records_after(None, 100) == []
        done = w.gate.submit("submit_order", "op-6", order("6"), principal="agent-1")
        assert done.state is State.REJECTED  # what evaluate said a submit would do
        assert w.venue.records_after(None, 100) == []

    def test_a_hook_that_raises_denies_as_at_dispatch(self, store: Store) -> None:
        w = world(store, preconditions=(broken,))
        got = w.gate.evaluate("submit_order", order("4"), principal="agent-1")
        assert got.outcome == "rejected"
        assert got.checks[0]["code"] == "precondition_hook_failed"
        assert got.checks[0]["reason"] == "the precondition hook failed (RuntimeError)"


class TestApproversFromWhom:
    """The approvals an evaluation needs name the roles and the principals who may give them,
    never the proposer itself (the four-eyes rule)."""

    def test_roles_and_approvers_without_the_proposer(self, store: Store) -> None:
        roles = ApproverRoles(
            members={"desk": frozenset({"agent-1", "alice", "bob"}), "risk": frozenset({"carol"})},
            by_class={"submit_order": frozenset({"desk"})},
        )
        w = world(store, evaluator=Evaluator(b"s" * 32, approver_roles=roles))
        got = w.gate.evaluate("submit_order", order("60"), principal="agent-1")
        assert got.outcome == "awaiting_approval"
        assert got.approvals is not None
        assert got.approvals["roles"] == ["desk"]
        assert got.approvals["approvers"] == ["alice", "bob"]  # not agent-1, not carol
        assert got.approvals["excluded"] == ["agent-1"]
        small = w.gate.evaluate("submit_order", order("4"), principal="agent-1")
        assert small.approvals is None

    def test_no_roles_configured_names_no_approvers(self, store: Store) -> None:
        got = world(store).gate.evaluate("submit_order", order("60"), principal="agent-1")
        assert got.approvals is not None
        assert (got.approvals["roles"], got.approvals["approvers"]) == (None, None)


class TestAuditIsRateLimited:
    def test_per_principal_lines_per_minute(self, store: Store) -> None:
        w = world(store)
        w.gate.evaluator = Evaluator(b"s" * 32, audit_per_minute=3)
        for _ in range(5):
            w.gate.evaluate("submit_order", order(), principal="agent-1")
        w.gate.evaluate("submit_order", order(), principal="agent-2")
        lines = evaluations(store)
        assert [e["principal"] for e in lines] == ["agent-1"] * 3 + ["agent-2"]
        w.clock.advance(61.0)
        w.gate.evaluate("submit_order", order(), principal="agent-1")
        assert evaluations(store)[-1]["suppressed_before"] == 2


class TestToken:
    """A submit presenting a token is refused if anything the token covers changed."""

    def test_a_fresh_token_is_accepted(self, store: Store) -> None:
        w = world(store)
        token = w.gate.evaluate("submit_order", order(), principal="agent-1").token
        op = w.gate.submit(
            "submit_order", "op-1", order(), principal="agent-1", evaluation_token=token
        )
        assert op.state is State.ACKNOWLEDGED

    def test_stale_when_the_policy_changes(self, store: Store) -> None:
        w = world(store)
        token = w.gate.evaluate("submit_order", order(), principal="agent-1").token
        w.gate.policy = policy("limit-2")
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, token, order(), "agent-1")
        assert caught.value.reason == "policy"
        assert store.get("default", "op-1") is None
        refused = [e for e in store.iter_audit() if e.kind == "evaluation_token_refused"]
        assert len(refused) == 1

    def test_stale_when_a_kill_switch_changes(self, store: Store) -> None:
        w = world(store)
        token = w.gate.evaluate("submit_order", order(), principal="agent-1").token
        w.operator.kill("submit_order", operator="ops", reason="drill")
        w.operator.release("submit_order", operator="ops")  # back off: still a change
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, token, order(), "agent-1")
        assert caught.value.reason == "controls"
        assert store.get("default", "op-1") is None

    def test_stale_when_headroom_falls_below_the_quote(self, store: Store) -> None:
        w = world(store)
        with_envelope(w)
        token = w.gate.evaluate("submit_order", order(), principal="agent-1").token
        w.gate.submit("submit_order", "other", order(), principal="agent-2")
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, token, order(), "agent-1")
        assert caught.value.reason == "budget"
        assert "envelope." in caught.value.message

    def test_stale_when_expired_or_the_payload_differs(self, store: Store) -> None:
        w = world(store)
        token = w.gate.evaluate("submit_order", order(), principal="agent-1").token
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, token, order("5"), "agent-1")
        assert caught.value.reason == "fingerprint"
        w.clock.advance(301.0)
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, token, order(), "agent-1")
        assert caught.value.reason == "expired"

    def test_tampered_or_foreign_tokens_are_invalid(self, store: Store) -> None:
        w = world(store)
        token = w.gate.evaluate("submit_order", order("60"), principal="agent-1").token
        body, sig = token.split(".")
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        payload["tier"] = "validate"  # a forger lowers the tier it was quoted
        forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
        for bad, reason in (
            (f"{forged}.{sig}", "signature"),
            ("not-a-token", "malformed"),
            (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "signature"),
        ):
            with pytest.raises(EvaluationTokenInvalid) as caught:
                with_token(w.gate, bad, order("60"), "agent-1")
            assert caught.value.reason == reason
        with pytest.raises(EvaluationTokenInvalid) as caught:
            with_token(w.gate, token, order("60"), "agent-2")
        assert caught.value.reason == "principal"
        other = Gate(
            store=store, registry=w.gate.registry, adapters=w.gate.adapters,
            policy=policy(), clock=w.clock, evaluator=Evaluator(b"t" * 32),
        )  # fmt: skip
        with pytest.raises(EvaluationTokenInvalid):
            with_token(other, token, order("60"), "agent-1")
        assert store.get("default", "op-1") is None


class TestStrictParse:
    """Bad input to evaluate gets the same strict parse errors as submit."""

    @pytest.mark.parametrize(
        "bad",
        [
            b'{"quantity": 5}',
            json.dumps({**INTENT, "quantity": 5}).encode(),
            json.dumps({**INTENT, "extra": "x"}).encode(),
            b'{"a": 1, "a": 2}',
            b"not json",
        ],
    )
    def test_same_error_as_submit(self, store: Store, bad: bytes) -> None:
        w = world(store)
        with pytest.raises(IntentError) as by_submit:
            w.gate.submit("submit_order", "op-1", bad)
        with pytest.raises(IntentError) as by_evaluate:
            w.gate.evaluate("submit_order", bad)
        assert by_evaluate.value.to_dict() == by_submit.value.to_dict()

    def test_unknown_class(self, store: Store) -> None:
        w = world(store)
        with pytest.raises(UnknownActionClass):
            w.gate.evaluate("no_such", INTENT)


# --- the doors -----------------------------------------------------------------------------


@pytest.fixture
def service(store_factory: Any) -> Iterator[Service]:
    """The service on every store (SQLite; PostgreSQL under EFFECTGATE_TEST_PG_URL)."""
    cfg = parse_config(config_text(store_url=store_factory.url), "test.toml")
    svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
    yield svc
    svc.close()


class TestHttp:
    def test_evaluate_then_submit_with_the_token(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            body = json.dumps(ORDER).encode()
            headers = bearer(AGENT_A, **{"Content-Type": "application/json"})
            r = client.post("/v1/actions/submit_order/evaluate", content=body, headers=headers)
            assert r.status_code == 200, r.text
            got = r.json()
            assert got["outcome"] == "dispatch" and got["fingerprint"]
            assert service.store.get("alpha", "op-1") is None
            ok = client.post(
                "/v1/actions/submit_order",
                content=body,
                headers={**headers, "Idempotency-Key": "op-1",
                         EVALUATION_HEADER: got["evaluation_token"]},
            )  # fmt: skip
            assert ok.status_code == 201, ok.text
            bad = client.post(
                "/v1/actions/submit_order",
                content=body,
                headers={**headers, "Idempotency-Key": "op-2", EVALUATION_HEADER: "x.y"},
            )
            assert bad.status_code == 400
            assert bad.json()["code"] == "evaluation_token_invalid"
            service.operator.kill("submit_order", operator="ops", reason="drill")
            stale = client.post(
                "/v1/actions/submit_order",
                content=body,
                headers={**headers, "Idempotency-Key": "op-3",
                         EVALUATION_HEADER: got["evaluation_token"]},
            )  # fmt: skip
            assert stale.status_code == 409
            assert stale.json()["code"] == "evaluation_token_stale"
            assert stale.json()["reason"] == "controls"

    def test_bad_input_and_unknown_class(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            headers = bearer(AGENT_A, **{"Content-Type": "application/json"})
            bad = json.dumps({**ORDER, "quantity": 5}).encode()
            r = client.post("/v1/actions/submit_order/evaluate", content=bad, headers=headers)
            s = client.post(
                "/v1/actions/submit_order", content=bad, headers={**headers, "Idempotency-Key": "k"}
            )
            assert r.status_code == s.status_code == 400
            assert r.json()["code"] == s.json()["code"] == "invalid_intent"
            assert r.json()["field"] == s.json()["field"]
            r = client.post("/v1/actions/nope/evaluate", content=b"{}", headers=headers)
            assert r.status_code == 404 and r.json()["code"] == "unknown_action_class"
            r = client.post("/v1/actions/submit_order/evaluate", content=json.dumps(ORDER).encode())
            assert r.status_code in (401, 415)


ALPHA = Principal("alpha", "agent", "alpha")


class TestMcp:
    def test_evaluate_tool_then_the_action_with_its_token(self, service: Service) -> None:
        async def go() -> None:
            async with Client(build_server(service, ALPHA)) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert {"evaluate_submit_order", "evaluate_cancel_order"} <= names
                got = await c.call_tool("evaluate_submit_order", dict(ORDER))
                assert not got.is_error, got
                out = got.structured_content
                assert out is not None and out["outcome"] == "dispatch"
                assert service.store.get("alpha", "op-1") is None
                bad = await c.call_tool("evaluate_submit_order", {**ORDER, "quantity": 5})
                assert bad.is_error
                assert bad.structured_content is not None
                assert bad.structured_content["code"] == "invalid_intent"
                done = await c.call_tool(
                    "submit_order",
                    {"operation_id": "op-1", "evaluation_token": out["evaluation_token"], **ORDER},
                )
                assert not done.is_error, done
                tampered = await c.call_tool(
                    "submit_order",
                    {"operation_id": "op-2", "evaluation_token": "x" + out["evaluation_token"],
                     **ORDER},
                )  # fmt: skip
                assert tampered.is_error
                assert tampered.structured_content is not None
                assert tampered.structured_content["code"] == "evaluation_token_invalid"

        anyio.run(go)


class TestRunBudget:
    """A run-bound action's tool slot is quoted (and its deadline checked); the token covers
    the slot's headroom (docs/budgets.md, "Tool slots at admission")."""

    def test_the_tool_slot_is_quoted_and_the_token_goes_stale(self, store: Store) -> None:
        from effectgate import RunBudget
        from runkit import RUN, SCOPE, gate_for, tool_call

        store.set_run_budget(SCOPE, RUN, RunBudget(max_tool_calls=2), now=0.5, actor="h")
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor="h")
        gate, _ = gate_for(store)
        before = snapshot(store)
        got = gate.evaluate("submit_order", INTENT, run_call=call.ref, principal="agent-1")
        assert snapshot(store) == before
        (slot,) = [b for b in got.to_dict()["budgets"] if b["name"] == "run.tool_calls"]  # type: ignore[union-attr]
        assert (slot["limit"], slot["used"], slot["reserve"], slot["left"]) == (2, 0, 1, 1)
        gate.submit("submit_order", "op-0", INTENT, run_call=call.ref, principal="agent-2")
        with pytest.raises(EvaluationTokenStale) as caught:
            gate.submit(
                "submit_order", "op-1", INTENT, run_call=call.ref, principal="agent-1",
                evaluation_token=got.token,
            )  # fmt: skip
        assert caught.value.reason == "budget"
        fresh = gate.evaluate("submit_order", INTENT, run_call=call.ref, principal="agent-1")
        gate.submit(
            "submit_order", "op-1", INTENT, run_call=call.ref, principal="agent-1",
            evaluation_token=fresh.token,
        )  # fmt: skip
        spent = gate.evaluate("submit_order", INTENT, run_call=call.ref, principal="agent-1")
        assert spent.outcome == "rejected"
        assert any("no tool call left" in r for r in spent.reasons)


class TestGrants:
    """The grant authoriser runs for the calling principal over the row a submit would
    journal (none is): a principal without a covering grant is told so, one with it passes."""

    def test_the_grant_axis_is_evaluated_for_the_caller(self, store: Store) -> None:
        from effectgate._core.grants import parse_spec
        from effectgate._execute.authority import grant_authoriser

        w = world(store)
        w.gate = Gate(
            store=store, registry=w.gate.registry, adapters=w.gate.adapters, policy=policy(),
            clock=w.clock, evaluator=Evaluator(b"s" * 32),
            authorise=grant_authoriser(environment="production"),
        )  # fmt: skip
        raw = {"actions": ["submit_order"], "targets": ["XYZ-PERP"], "scope": "default",
               "environments": ["production"], "expires_in": 3600, "max_value": "1000",
               "budget": "1000"}  # fmt: skip
        store.create_grant("alice", parse_spec(raw, now=w.clock()), created_by="ops", now=w.clock())
        before = snapshot(store)
        bob = w.gate.evaluate("submit_order", order(), principal="bob")
        assert bob.outcome == "rejected"
        assert bob.checks[0]["code"] == "grant_missing"
        alice = w.gate.evaluate("submit_order", order(), principal="alice")
        assert alice.checks[0] == {"stage": "authorise", "passed": True}
        assert alice.outcome == "dispatch"
        assert snapshot(store) == before
        (quote,) = [b for b in alice.state.budgets if b.name.startswith("grant.")]
        assert (quote.limit, quote.used, quote.reserve) == (10**9, 0, 400_000_000)
        w.gate.submit("submit_order", "first", order(), principal="alice")  # draws 400
        with pytest.raises(EvaluationTokenStale) as caught:
            with_token(w.gate, alice.token, order(), "alice")
        assert caught.value.reason == "budget"
