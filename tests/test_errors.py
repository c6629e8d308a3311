"""The error tree (issue 10): one class per refusal, each with its own code, HTTP status and model
outcome as class attributes, and front doors that report nothing else."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client

import effectgate
from effectgate import errors
from effectgate._core.states import State
from effectgate._doors._shared.models import describe, problem_for
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.server import LOOKUP_TOOL, build_server
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import (
    ApprovalError,
    CommitOutcomeUnknown,
    EffectgateError,
    ModelOutcome,
    OutcomeUnknown,
    StoreError,
)
from effectgate.store.base import Operation
from servicekit import AGENT_A, OPERATOR, ORDER, bearer, config_text

SRC = Path(effectgate.__file__).parent


def tree() -> list[type[EffectgateError]]:
    """Every class of the tree, the root included."""
    seen: list[type[EffectgateError]] = []
    todo: list[type[EffectgateError]] = [EffectgateError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return seen


BY_CODE = {cls.code: cls for cls in tree()}

#: Constructor arguments for the classes that need more than a message.
EXTRA: dict[str, dict[str, Any]] = {
    "IdempotencyConflict": {"operation_id": "op-1", "stored": "a", "offered": "b"},
    "RequestKeyConflict": {
        "request_key": "rk-1",
        "operation_id": "minted:x",
        "stored": "a",
        "offered": "b",
    },
    "OperationInFlight": {"operation_id": "op-1", "retry_after": 1.5},
    "RateLimited": {"retry_after": 2.0},
    "BudgetExceeded": {"dimension": "tool_calls"},
    "KeyNamespaceDivergence": {
        "operation_id": "op-1",
        "ledger_key": "default:op-1",
        "sandbox_key": "sbx-1",
        "attempt": 2,
    },
    "SpeculationStalled": {"operation_id": "op-1", "attempt": 1},
}


def instance(cls: type[EffectgateError]) -> EffectgateError:
    return cls("what went wrong", **EXTRA.get(cls.__name__, {}))


class TestTheTree:
    def test_every_class_has_its_own_code_an_http_status_and_an_outcome(self) -> None:
        classes = tree()
        assert len(classes) > 30
        codes = [cls.code for cls in classes]
        assert len(codes) == len(set(codes)), "every class has its own code"
        for cls in classes:
            assert re.fullmatch(r"[a-z][a-z_]*[a-z]", cls.code), cls
            assert isinstance(cls.status, int) and 400 <= cls.status <= 599, cls
            assert isinstance(cls.outcome, ModelOutcome), cls

    def test_every_class_is_public_in_errors(self) -> None:
        assert {cls.__name__ for cls in tree()} | {"ModelOutcome"} == set(errors.__all__)

    def test_no_instance_chooses_its_own_code_or_status(self) -> None:
        """Status and code come from the class: no constructor takes them, no instance
        carries them (the old ``BadRequest(code=...)`` is gone)."""
        for cls in tree():
            params = inspect.signature(cls.__init__).parameters
            assert not {"code", "status", "outcome"} & set(params), cls
            exc = instance(cls)
            assert not {"code", "status", "outcome"} & set(vars(exc)), cls

    def test_the_problem_is_the_class_s(self) -> None:
        """One mapping for HTTP and MCP: status, code and outcome are the class attributes."""
        for cls in tree():
            status, body, _ = problem_for(instance(cls))
            assert (status, body["status"], body["code"], body["outcome"]) == (
                cls.status,
                cls.status,
                cls.code,
                cls.outcome.value,
            ), cls
            assert body["type"] == f"urn:effectgate:problem:{cls.code}"

    def test_an_unknown_commit_is_not_a_store_error(self) -> None:
        """StoreError means "nothing changed"; a commit that may be durable cannot be one."""
        assert issubclass(CommitOutcomeUnknown, OutcomeUnknown)
        assert not issubclass(CommitOutcomeUnknown, StoreError)
        assert CommitOutcomeUnknown.outcome is ModelOutcome.UNCERTAIN
        assert StoreError.outcome is ModelOutcome.REFUSED
        # The old name is gone: nothing may catch it expecting a StoreError.
        assert not hasattr(errors, "IndeterminateCommit")

    def test_a_key_namespace_divergence_is_the_seed_s_runtime_error(self) -> None:
        """Seed 000 defines ``KeyNamespaceDivergence(RuntimeError)``: code written against it
        catches ours, which stays in the tree (its code, status and outcome)."""
        assert issubclass(errors.KeyNamespaceDivergence, RuntimeError)
        assert issubclass(errors.KeyNamespaceDivergence, errors.OperationError)
        with pytest.raises(RuntimeError):
            raise instance(errors.KeyNamespaceDivergence)
        assert errors.KeyNamespaceDivergence.outcome is ModelOutcome.HELD

    @pytest.mark.parametrize(
        ("name", "status", "reason"),
        [
            ("NotAwaitingApproval", 409, "not_awaiting"),
            ("ApprovalFingerprintMismatch", 409, "fingerprint_mismatch"),
            ("SelfApproval", 403, "self_approval"),
            ("DuplicateApprover", 409, "duplicate_approver"),
            ("InvalidApprover", 400, "invalid_approver"),
            ("ApprovalExpired", 409, "expired"),
        ],
    )
    def test_each_approval_refusal_is_its_own_class(
        self, name: str, status: int, reason: str
    ) -> None:
        cls = getattr(errors, name)
        assert issubclass(cls, ApprovalError) and cls.status == status
        assert instance(cls).to_dict()["reason"] == reason

    def test_the_module_docstring_draws_every_class(self) -> None:
        doc = errors.__doc__ or ""
        for cls in tree():
            assert cls.__name__ in doc and cls.code in doc, cls

    def test_no_front_door_writes_a_code_as_a_string(self) -> None:
        """Grep-able rule: outside errors.py nothing passes a literal code around."""
        pattern = re.compile(r"""\bcode\s*=\s*["']|["']code["']\s*:\s*["']""")
        offenders = [
            f"{path.relative_to(SRC)}:{n}"
            for path in SRC.rglob("*.py")
            if path.name != "errors.py"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)
        ]
        assert offenders == []


@pytest.mark.parametrize("state", list(State))
def test_every_ledger_state_tells_a_model_one_outcome(state: State) -> None:
    """Issue 11 item 4: a small set of outcomes covers every state, each with a message."""
    op = Operation(
        scope="s",
        operation_id="op-1",
        action="submit_order",
        fingerprint="f",
        state=state,
        intent={},
        effect={},
        tier="validate",
        reason="because",
        policy_version="p",
        venue_id=None,
        detail=None,
        created_at=1.0,
        updated_at=1.0,
        submitted_at=None,
        version=1,
    )
    outcome, message = describe(op, 30.0)
    expected = {
        State.ACKNOWLEDGED: "done",
        State.SHADOWED: "done",
        State.REJECTED: "refused",
        State.DENIED: "refused",
        State.FAILED: "failed",
        State.AWAITING_APPROVAL: "waiting_for_approval",
        State.VALIDATED: "held",
        State.PROPOSED: "held",
        State.SUBMITTED: "uncertain",
        State.QUARANTINED: "held",  # never dispatched: see the test below
        State.SUPERSEDED: "held",  # its operation, minted at approval, carries on
    }
    assert outcome.value == expected[state] and message.endswith(".")
    if outcome is ModelOutcome.UNCERTAIN or outcome is ModelOutcome.HELD:
        assert "new operation id" in message  # never "resend it as a new action"


class TestQuarantinedRowsTellAModelWhetherAnythingWasSent:
    """A quarantined row that never reached ``submitted`` (``submitted_at`` NULL) has not taken
    effect and is never sent unless an operator releases it (invariant 10); one that was
    dispatched may have taken effect."""

    def row(self, submitted_at: float | None) -> Operation:
        return Operation(
            scope="s",
            operation_id="op-q",
            action="submit_order",
            fingerprint="f",
            state=State.QUARANTINED,
            intent={},
            effect={},
            tier="validate",
            reason="allowed",
            policy_version="p",
            venue_id=None,
            detail="key-namespace-divergence",
            created_at=1.0,
            updated_at=1.0,
            submitted_at=submitted_at,
            version=1,
        )

    def test_never_dispatched_says_nothing_was_sent(self) -> None:
        outcome, message = describe(self.row(None))
        assert outcome is ModelOutcome.HELD
        assert "nothing has been sent" in message and "key-namespace-divergence" in message
        assert "may or may not" not in message and "releases it" in message
        assert "new operation id" in message

    def test_dispatched_may_have_taken_effect(self) -> None:
        outcome, message = describe(self.row(5.0))
        assert outcome is ModelOutcome.UNCERTAIN
        assert "may or may not have taken effect" in message


# --- the front doors answer with codes of the tree only --------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db")
    svc = Service(parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(PaperVenue())})
    yield svc
    svc.close()


def check_problem(status: int, doc: dict[str, Any]) -> str:
    cls = BY_CODE.get(doc.get("code", ""))
    assert cls is not None, f"code {doc.get('code')!r} belongs to no class"
    assert (status, doc["status"], doc["outcome"]) == (cls.status, cls.status, cls.outcome.value), (
        doc
    )
    return cls.code


def test_http_problems_use_only_codes_of_the_tree(service: Service) -> None:
    big = json.dumps({**ORDER, "quantity": "10", "limit_price": "95.00"}).encode()
    order = json.dumps(ORDER).encode()

    def post(
        key: str | None, data: bytes = order, token: str = AGENT_A, media: str = "application/json"
    ) -> Any:
        h = bearer(token, **{"Content-Type": media})
        if key is not None:
            h["Idempotency-Key"] = key
        return c.post("/v1/actions/submit_order", content=data, headers=h)

    def admin(method: str, path: str, **kw: Any) -> Any:
        return c.request(method, f"/v1/admin{path}", headers=bearer(OPERATOR), **kw)

    with TestClient(create_app(service, mcp_http=False)) as c:
        fp = post("big", big).json()["fingerprint"]
        post("op-1")
        answers = [
            post(None),
            post("bad key!"),
            post("op-2", b'{"a": 1, "a": 2}'),
            post("op-3", b"{" + b" " * 70_000 + b"}"),
            post("op-1", json.dumps({**ORDER, "quantity": "5"}).encode()),
            post("op-4", token="nope"),
            post("op-5", token=OPERATOR),
            c.get("/nowhere"),
            c.delete("/v1/actions/submit_order", headers=bearer(AGENT_A)),
            c.get("/v1/operations/missing", headers=bearer(AGENT_A)),
            admin("POST", "/approvals/alpha/big/approve", json={"fingerprint": "0" * 64}),
            admin("POST", "/approvals/alpha/big/approve", json={"fingerprint": fp}),
            admin("POST", "/approvals/alpha/big/approve", json={"fingerprint": fp}),
            admin("POST", "/approvals/alpha/big/approve", json={"nope": 1}),
            admin("PUT", "/kill/launch_rocket", json={}),
            admin(
                "POST",
                "/envelope/submit_order/step",
                json={"axis": "tier", "value": "validate", "evidence": {"n": 1}},
            ),
            post("op-6", media="text/plain"),
        ]
    problems = [a for a in answers if a.status_code >= 400]
    assert all(p.headers["content-type"] == "application/problem+json" for p in problems)
    codes = [check_problem(p.status_code, p.json()) for p in problems]
    assert codes == [
        "idempotency_key_missing",
        "invalid_idempotency_key",
        "invalid_intent",
        "body_too_large",
        "idempotency_conflict",
        "unauthenticated",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "operation_not_found",
        "approval_fingerprint_mismatch",
        "not_awaiting_approval",
        "bad_request",
        "unknown_action_class",
        "invalid_control",
        "unsupported_media_type",
    ]


def test_mcp_error_results_use_only_codes_of_the_tree(service: Service) -> None:
    args: dict[str, Any] = {"operation_id": "op-1", **ORDER}
    codes: list[str] = []

    async def go() -> None:
        async with Client(build_server(service, Principal("alpha", "agent", "alpha"))) as c:
            await c.call_tool("submit_order", args)
            for name, arguments in [
                ("launch_rocket", args),
                ("submit_order", {k: v for k, v in args.items() if k != "operation_id"}),
                ("submit_order", {**args, "operation_id": "no way"}),
                ("submit_order", {**args, "quantity": 5}),
                ("submit_order", {**args, "quantity": "5"}),
                (LOOKUP_TOOL, {"operation_id": "missing"}),
                (LOOKUP_TOOL, {"operation_id": "op-1", "extra": 1}),
            ]:
                result = await c.call_tool(name, arguments)
                assert result.is_error
                doc = result.structured_content
                codes.append(check_problem(doc["status"], doc))

    anyio.run(go)
    assert codes == [
        "unknown_action_class",
        "invalid_intent",
        "invalid_intent",
        "invalid_intent",
        "idempotency_conflict",
        "operation_not_found",
        "invalid_intent",
    ]
