"""The HTTP door in process: Idempotency-Key semantics, problem details, tenants, roles, limits."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate import State
from effectgate._core.intent import Registry
from effectgate._doors.http.app import create_app
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.base import NewOperation
from effectgate.store.roles import Store
from servicekit import (
    AGENT_A,
    AGENT_B,
    OPERATOR,
    ORDER,
    SCOPED_OPERATOR,
    VENUE_KEY_ENV,
    bearer,
    config_text,
)

BODY = json.dumps(ORDER).encode()


class Clock:
    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class GatedAdapter(PaperAdapter):
    """Holds each venue call until released, to keep a request in flight."""

    def __init__(self, venue: PaperVenue) -> None:
        super().__init__(venue)
        self.entered = threading.Event()
        self.release = threading.Event()

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        self.entered.set()
        self.release.wait(10)
        return super().execute(request, timeout=timeout)


def make_service(tmp_path: Path, service: str = "", **kw: object) -> Service:
    cfg = parse_config(
        config_text(store_url=f"sqlite:///{tmp_path}/ledger.db", service=service), "test.toml"
    )
    return Service(cfg, **kw)  # type: ignore[arg-type]


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue()


@pytest.fixture
def service(tmp_path: Path, venue: PaperVenue, store: Store) -> Iterator[Service]:
    """The service on every store (SQLite; PostgreSQL when EFFECTGATE_TEST_PG_URL is set)."""
    svc = make_service(tmp_path, adapters={"venue": PaperAdapter(venue)}, store=store)
    yield svc
    svc.close()


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service, mcp_http=False)) as c:
        yield c


def post(
    client: TestClient,
    key: str | None,
    body: bytes = BODY,
    token: str = AGENT_A,
    action: str = "submit_order",
    **headers: str,
):
    h = {"Content-Type": "application/json", **bearer(token, **headers)}
    if key is not None:
        h["Idempotency-Key"] = key
    return client.post(f"/v1/actions/{action}", content=body, headers=h)


class TestIdempotencyKey:
    def test_first_request_creates_and_replay_returns_stored_result(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Invariant 1 over HTTP: same key again = 200 + Idempotent-Replayed, nothing re-sent."""
        first = post(client, "op-1")
        assert first.status_code == 201 and "idempotent-replayed" not in first.headers
        doc = first.json()
        assert doc["state"] == "acknowledged" and doc["venue_id"] and doc["operation_id"] == "op-1"
        assert doc["decision"]["tier"] == "validate" and doc["decision"]["reason"]
        again = post(client, "op-1")
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        replay = again.json()
        assert replay["replayed"] is True
        assert {k: v for k, v in replay.items() if k != "replayed"} == {
            k: v for k, v in doc.items() if k != "replayed"
        }
        assert venue.effect_count == 1
        assert first.headers["location"] == "/v1/operations/op-1"

    def test_changed_payload_under_reused_key_is_422(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Invariant 2: a reused key with another effect is 422 problem+json, never a dedup."""
        post(client, "op-1")
        changed = post(client, "op-1", json.dumps({**ORDER, "quantity": "5"}).encode())
        assert changed.status_code == 422
        assert changed.headers["content-type"] == "application/problem+json"
        assert changed.json()["code"] == "idempotency_conflict"
        assert venue.effect_count == 1

    def test_audit_fields_do_not_change_identity(self, client: TestClient) -> None:
        """Invariant 2: a reworded rationale under the same key is a replay, not a conflict."""
        post(client, "op-1")
        again = post(client, "op-1", json.dumps({**ORDER, "rationale": "other"}).encode())
        assert again.status_code == 200

    def test_missing_key_is_400_and_writes_nothing(
        self, client: TestClient, service: Service
    ) -> None:
        """IETF Idempotency-Key draft: no key, 400; the ledger is untouched."""
        r = post(client, None)
        assert r.status_code == 400 and r.json()["code"] == "idempotency_key_missing"
        assert service.store.count_by_state() == {}

    @pytest.mark.parametrize("key", ["", "has space", "-leading", "x" * 200, "ключ"])
    def test_malformed_key_is_400(self, client: TestClient, key: str) -> None:
        """Operation ids are ASCII identifiers: anything else is refused, never normalised."""
        r = client.post(
            "/v1/actions/submit_order",
            content=BODY,
            headers={
                **bearer(AGENT_A),
                "Idempotency-Key": key.encode(),
                "Content-Type": "application/json",
            },
        )
        assert r.status_code == 400

    def test_quoted_key_is_the_same_key(self, client: TestClient) -> None:
        """The draft's sf-string form ("abc") names the same operation as abc."""
        assert post(client, "op-q").status_code == 201
        assert post(client, '"op-q"').status_code == 200

    def test_second_request_while_first_in_flight_is_409(
        self, tmp_path: Path, venue: PaperVenue
    ) -> None:
        """IETF draft: 409 while the first request with the key is still being processed."""
        gated = GatedAdapter(venue)
        svc = make_service(tmp_path, adapters={"venue": gated})
        try:
            with TestClient(create_app(svc, mcp_http=False)) as c:
                results: list[int] = []
                first = threading.Thread(target=lambda: results.append(post(c, "k").status_code))
                first.start()
                assert gated.entered.wait(5)
                during = post(c, "k")
                assert during.status_code == 409 and during.json()["code"] == "operation_in_flight"
                assert int(during.headers["retry-after"]) >= 1
                gated.release.set()
                first.join(5)
                assert results == [201]
                assert post(c, "k").status_code == 200
                assert venue.effect_count == 1
        finally:
            svc.close()

    def test_submitted_row_of_another_process_is_in_flight_until_the_dispatch_bound(
        self, tmp_path: Path, venue: PaperVenue
    ) -> None:
        """Multi-worker rule: a row another process journalled moments ago answers 409; past
        dispatch_timeout + grace it is uncertain and replays as it stands (never re-sent)."""
        clock = Clock()
        svc = make_service(
            tmp_path,
            "dispatch_timeout = 2.0\nin_flight_grace = 1.0",
            adapters={"venue": PaperAdapter(venue)},
            clock=clock,
        )
        try:
            parsed = svc.config.registry.parse("submit_order", BODY)
            svc.store.insert_operation(
                NewOperation(
                    scope="alpha",
                    operation_id="k",
                    action="submit_order",
                    fingerprint=parsed.fingerprint,
                    intent=parsed.snapshot,
                    effect=parsed.effect,
                    tier="validate",
                    reason="r",
                    policy_version="p",
                ),
                [State.PROPOSED, State.VALIDATED, State.SUBMITTED],
                now=clock.now,
            )
            with TestClient(create_app(svc, mcp_http=False)) as c:
                assert post(c, "k").status_code == 409
                clock.now += 3.5
                late = post(c, "k")
                assert late.status_code == 200 and late.json()["state"] == "submitted"
            assert venue.effect_count == 0
        finally:
            svc.close()


class TestProblemDetails:
    @pytest.mark.parametrize(
        "body,field,reason",
        [
            (b'{"intent_version": "1", ', None, "syntax"),
            (
                json.dumps({**ORDER, "limit_price": 100.5}).encode(),
                "limit_price",
                "float_not_allowed",
            ),
            (json.dumps({**ORDER, "quantity": 4}).encode(), "quantity", "not_a_decimal_string"),
            (
                json.dumps({**ORDER, "endpoint": "http://evil"}).encode(),
                "endpoint",
                "extra_forbidden",
            ),
            (BODY[:-1] + b', "side": "sell"}', "side", "duplicate_key"),
            (b"[1, 2]", None, "not_object"),
            # Found by schemathesis: an exponent beyond the decimal module's range was a 500.
            (
                json.dumps({**ORDER, "limit_price": ".856E+1086816166917345432"}).encode(),
                "limit_price",
                "out_of_range",
            ),
        ],
    )
    def test_bad_bodies_are_400_naming_the_field(
        self, client: TestClient, service: Service, body: bytes, field: str | None, reason: str
    ) -> None:
        """Bad input: malformed bodies are 400 (not 422), RFC 9457, field and reason named."""
        r = post(client, "op-bad", body)
        assert r.status_code == 400
        assert r.headers["content-type"] == "application/problem+json"
        doc = r.json()
        assert doc["code"] == "invalid_intent" and doc["status"] == 400
        assert doc["field"] == field and doc["reason"] == reason
        assert doc["type"] == "urn:effectgate:problem:invalid_intent"
        assert service.store.count_by_state() == {}

    def test_unknown_route_and_action_are_problem_404(self, client: TestClient) -> None:
        r = post(client, "op-x", action="launch_rocket")
        assert r.status_code == 404 and r.json()["code"] == "unknown_action_class"
        assert client.get("/v2/nothing").json()["code"] == "not_found"

    def test_framework_validation_errors_are_400(self, client: TestClient) -> None:
        """Request-validation errors are 400, not FastAPI's default 422."""
        r = client.get("/v1/admin/operations?limit=0", headers=bearer(OPERATOR))
        assert r.status_code == 400 and r.json()["code"] == "bad_request"


class TestTenantsAndRoles:
    def test_same_key_in_two_tenants_is_two_operations(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Identity is (scope, operation id): tenants never share or collide."""
        a, b = post(client, "shared", token=AGENT_A), post(client, "shared", token=AGENT_B)
        assert a.status_code == b.status_code == 201
        assert a.json()["venue_id"] != b.json()["venue_id"] and venue.effect_count == 2

    def test_one_tenant_cannot_read_another(self, client: TestClient) -> None:
        post(client, "mine", token=AGENT_A)
        assert client.get("/v1/operations/mine", headers=bearer(AGENT_A)).status_code == 200
        other = client.get("/v1/operations/mine", headers=bearer(AGENT_B))
        assert other.status_code == 404 and other.json()["code"] == "operation_not_found"

    def test_agent_token_is_403_on_admin(self, client: TestClient) -> None:
        """The agent API and the operator API use different credentials."""
        for method, path in (
            ("GET", "/v1/admin/operations"),
            ("POST", "/v1/admin/reconcile"),
            ("GET", "/v1/admin/divergences"),
        ):
            r = client.request(method, path, headers=bearer(AGENT_A))
            assert r.status_code == 403 and r.json()["code"] == "forbidden"

    def test_operator_token_cannot_propose(self, client: TestClient, venue: PaperVenue) -> None:
        r = post(client, "op-1", token=OPERATOR)
        assert r.status_code == 403 and venue.effect_count == 0

    @pytest.mark.parametrize(
        "headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}]
    )
    def test_missing_or_unknown_token_is_401(self, client: TestClient, headers: dict) -> None:
        r = client.post(
            "/v1/actions/submit_order", content=BODY, headers={**headers, "Idempotency-Key": "k"}
        )
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"

    def test_scoped_operator_sees_only_its_scope(self, client: TestClient) -> None:
        post(client, "a1", token=AGENT_A)
        post(client, "b1", token=AGENT_B)
        rows = client.get("/v1/admin/operations", headers=bearer(SCOPED_OPERATOR)).json()
        assert {r["scope"] for r in rows} == {"alpha"}
        assert (
            client.get(
                "/v1/admin/operations?scope=beta", headers=bearer(SCOPED_OPERATOR)
            ).status_code
            == 403
        )
        everyone = client.get("/v1/admin/operations", headers=bearer(OPERATOR)).json()
        assert {r["scope"] for r in everyone} == {"alpha", "beta"}


class TestOperatorApi:
    def test_reconcile_now_and_divergences(self, client: TestClient, venue: PaperVenue) -> None:
        """Invariant 5 via the operator API: an orphan at the venue is reported once."""
        post(client, "op-1")
        venue.submit("alpha:ghost", "submit_order", {"instrument": "XYZ-PERP"})
        r = client.post("/v1/admin/reconcile", headers=bearer(OPERATOR))
        assert r.status_code == 200 and r.json()["swept"] is True
        assert [d["kind"] for d in r.json()["new_divergences"]] == ["orphan"]
        again = client.post("/v1/admin/reconcile", headers=bearer(OPERATOR)).json()
        assert again["new_divergences"] == []
        divs = client.get("/v1/admin/divergences", headers=bearer(OPERATOR)).json()
        assert [(d["kind"], d["op_key"]) for d in divs] == [("orphan", "alpha:ghost")]

    def test_show_operation_has_intent_and_audit_trail(self, client: TestClient) -> None:
        post(client, "op-1")
        doc = client.get("/v1/admin/operations/alpha/op-1", headers=bearer(OPERATOR)).json()
        assert doc["intent"]["instrument"] == "XYZ-PERP" and doc["audit"]
        assert (
            client.get("/v1/admin/operations/alpha/none", headers=bearer(OPERATOR)).status_code
            == 404
        )


class TestHealthMetricsOpenApi:
    def test_health_and_readiness(self, client: TestClient) -> None:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").status_code == 200

    def test_metrics_report_ledger_and_dispatch(self, client: TestClient) -> None:
        post(client, "op-1")
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer(AGENT_A)).status_code == 403
        text = client.get("/metrics", headers=bearer(OPERATOR)).text
        assert 'effectgate_operations{action="submit_order",state="acknowledged"} 1.0' in text
        assert (
            'effectgate_dispatch_seconds_count{action="submit_order",adapter="venue",'
            'outcome="applied"} 1.0' in text
        )
        for name in (
            "effectgate_uncertain_oldest_age_seconds",
            "effectgate_orphans",
            "effectgate_duplicate_effects",
        ):
            assert f"\n{name} " in text

    def test_openapi_publishes_each_intent_schema(self, client: TestClient) -> None:
        doc = client.get("/openapi.json").json()
        post_op = doc["paths"]["/v1/actions/submit_order"]["post"]
        ref = post_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        intent = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert intent["additionalProperties"] is False and "quantity" in intent["required"]
        assert {"201", "200", "400", "409", "422", "429"} <= set(post_op["responses"])
        keys = [p for p in post_op["parameters"] if p["name"] == "Idempotency-Key"]
        assert len(keys) == 1 and keys[0]["required"] is True
        assert "#/$defs/" not in json.dumps(doc)


class TestLimits:
    def test_oversized_body_is_413_before_parsing(
        self, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bad input: the size cap holds before the body is read or parsed."""
        calls: list[str] = []
        monkeypatch.setattr(Registry, "parse", lambda *a, **k: calls.append("parse"))
        r = post(client, "big", b"{" + b" " * 70_000 + b"}")
        assert r.status_code == 413 and r.json()["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:
            for _ in range(100):
                yield b" " * 1000

        chunked = client.post(
            "/v1/actions/submit_order",
            content=chunks(),
            headers=bearer(
                AGENT_A, **{"Idempotency-Key": "big2", "Content-Type": "application/json"}
            ),
        )
        assert chunked.status_code == 413
        assert calls == []

    def test_deep_nesting_is_refused_before_parsing(
        self, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls: list[str] = []
        monkeypatch.setattr(Registry, "parse", lambda *a, **k: calls.append("parse"))
        body = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        r = post(client, "deep", body)
        assert r.status_code == 400 and r.json()["reason"] == "too_deep" and calls == []

    def test_brackets_inside_strings_do_not_count(self, client: TestClient) -> None:
        body = json.dumps({**ORDER, "rationale": "[[[[[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{{"}).encode()
        assert post(client, "brackets", body).status_code == 201

    def test_rate_limit_is_429_with_retry_after(self, tmp_path: Path) -> None:
        svc = make_service(tmp_path, "[service.rate_limit]\nper_second = 0.01\nburst = 2")
        try:
            with TestClient(create_app(svc, mcp_http=False)) as c:
                codes = [
                    c.get("/v1/operations/x", headers=bearer(AGENT_A)).status_code for _ in range(3)
                ]
                assert codes == [404, 404, 429]
                r = c.get("/v1/operations/x", headers=bearer(AGENT_A))
                assert r.json()["code"] == "rate_limited" and int(r.headers["retry-after"]) > 1
                # Buckets are per token: another tenant is unaffected.
                assert c.get("/v1/operations/x", headers=bearer(AGENT_B)).status_code == 404
        finally:
            svc.close()


class TestOutcomeForAModel:
    """Issue 11 item 4: every operation answer says, in `outcome` and `message`, what happened
    and what to do next; an uncertain one says why."""

    def test_venue_down_answer_carries_the_cause(
        self, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Invariant 3: the venue is unreachable, the row stays `submitted`, and the answer
        (and a later GET) says why, that the outcome is unknown, what not to do, and when the
        reconciler settles it."""
        monkeypatch.setenv(VENUE_KEY_ENV, "venue-key")
        # The venue resets the connection once it has the request: the outcome is unknown
        # (a refused connection is proven not applied, docs/evidence.md).
        from effectgate.adapters.conformance.transport_faults import FaultServer

        resetting = FaultServer("reset-after").__enter__()
        down = resetting.url()
        cfg = parse_config(
            config_text(venue_url=down, store_url=f"sqlite:///{tmp_path}/ledger.db"), "t.toml"
        )
        svc = Service(cfg, store=store)
        try:
            with TestClient(create_app(svc, mcp_http=False)) as c:
                r = post(c, "op-down")
                looked = c.get("/v1/operations/op-down", headers=bearer(AGENT_A))
                shown = c.get("/v1/admin/operations/alpha/op-down", headers=bearer(OPERATOR))
        finally:
            svc.close()
            resetting.close()
        doc = r.json()
        assert r.status_code == 201 and doc["state"] == "submitted"
        assert doc["outcome"] == "uncertain"
        assert "connection to the venue failed" in doc["cause"]
        assert doc["cause"] in doc["message"] and "may or may not" in doc["message"]
        assert "new operation id" in doc["message"] and "60s" in doc["message"]
        for later in (looked.json(), shown.json()):  # read back from the audit trail
            assert later["outcome"] == "uncertain" and later["cause"] == doc["cause"]

    def test_each_state_maps_to_one_outcome(self, tmp_path: Path, store: Store) -> None:
        venue = PaperVenue(instruments=frozenset({"XYZ-PERP"}))
        svc = make_service(tmp_path, adapters={"venue": PaperAdapter(venue)}, store=store)
        big = json.dumps({**ORDER, "quantity": "10", "limit_price": "95.00"}).encode()
        try:
            with TestClient(create_app(svc, mcp_http=False)) as c:
                done = post(c, "op-done").json()
                refused = post(c, "op-no", json.dumps({**ORDER, "quantity": "20"}).encode()).json()
                waiting = post(c, "op-big", big).json()
                failed = post(
                    c, "op-fail", json.dumps({**ORDER, "instrument": "ABC-PERP"}).encode()
                ).json()
                c.put("/v1/admin/kill/submit_order", headers=bearer(OPERATOR), json={})
                held = post(c, "op-held").json()
                c.delete("/v1/admin/kill/submit_order", headers=bearer(OPERATOR))
                c.put("/v1/admin/shadow/submit_order", headers=bearer(OPERATOR))
                shadowed = post(c, "op-shadow").json()
        finally:
            svc.close()
        seen = {
            d["operation_id"]: (d["state"], d["outcome"])
            for d in (done, refused, waiting, failed, held, shadowed)
        }
        assert seen == {
            "op-done": ("acknowledged", "done"),
            "op-no": ("rejected", "refused"),
            "op-big": ("awaiting_approval", "waiting_for_approval"),
            "op-fail": ("failed", "failed"),
            "op-held": ("validated", "held"),
            "op-shadow": ("shadowed", "done"),
        }
        assert refused["decision"]["reason"] in refused["message"]
        assert "human" in waiting["message"] and "'op-big'" in waiting["message"]
        assert "kill switch" in held["message"] and "same operation id" in held["message"]
        assert "unknown instrument" in failed["message"]
        assert "did not send" in shadowed["message"]
        assert all(d["cause"] is None for d in (done, refused, waiting, failed, held, shadowed))
