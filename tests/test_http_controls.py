"""The operator controls over HTTP (/v1/admin), on every store: the same rules as the CLI and
the Operator API, behind the operator credential and its scope."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate._doors.http.app import create_app
from effectgate._evidence.audit import verify_bundle
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from servicekit import AGENT_A, AGENT_B, OPERATOR, ORDER, SCOPED_OPERATOR, bearer, config_text

BREAKER = """
[controls.submit_order]
window = 300
max_repeats = 2
"""
BIG = {**ORDER, "quantity": "10", "limit_price": "95.00"}  # 950: over approve_above = 900


def body(**changes: str) -> bytes:
    return json.dumps({**ORDER, **changes}).encode()


def make(tmp_path: Path, store: Store | None, venue: PaperVenue, extra: str = "") -> Service:
    text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db") + extra
    return Service(
        parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(venue)}, store=store
    )


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue()


@pytest.fixture
def service(tmp_path: Path, venue: PaperVenue, store: Store) -> Iterator[Service]:
    svc = make(tmp_path, store, venue, BREAKER)
    yield svc
    svc.close()


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service, mcp_http=False)) as c:
        yield c


def propose(
    client: TestClient,
    key: str,
    data: bytes | None = None,
    token: str = AGENT_A,
    action: str = "submit_order",
):
    return client.post(
        f"/v1/actions/{action}",
        content=data or body(),
        headers=bearer(token, **{"Idempotency-Key": key, "Content-Type": "application/json"}),
    )


def admin(client: TestClient, method: str, path: str, token: str = OPERATOR, **kw: object):
    return client.request(method, f"/v1/admin{path}", headers=bearer(token), **kw)


def audit_count(service: Service) -> int:
    return sum(1 for _ in service.store.iter_audit())


class TestKillSwitch:
    def test_switch_holds_new_dispatches_and_release_lets_a_retry_through(
        self, client: TestClient, venue: PaperVenue, service: Service
    ) -> None:
        """Invariant 7: a switch stops every new dispatch of its class at once; held rows stay
        validated (listed, never failed); other classes keep working."""
        on = admin(client, "PUT", "/kill/submit_order", json={"reason": "drill"})
        assert on.status_code == 200 and on.json()["killed"] is True
        assert on.json()["updated_by"] == "ops"
        held = propose(client, "op-1")
        assert held.status_code == 201 and held.json()["state"] == "validated"
        assert held.json()["detail"].startswith("held:")
        assert (
            propose(
                client,
                "c-1",
                json.dumps(
                    {
                        "intent_version": "1",
                        "action": "cancel_order",
                        "instrument": "XYZ-PERP",
                        "order_ref": "V-9",
                    }
                ).encode(),
                action="cancel_order",
            ).json()["state"]
            == "acknowledged"
        )
        assert venue.effect_count == 1
        rows = admin(client, "GET", "/held").json()
        assert [(r["scope"], r["operation_id"]) for r in rows] == [("alpha", "op-1")]
        radius = admin(client, "GET", "/kill/submit_order/blast-radius").json()
        assert radius["killed"] is True and radius["would_hold"] == ["alpha:op-1"]
        metrics = client.get("/metrics", headers=bearer(OPERATOR)).text
        assert 'effectgate_kill_switch_on{action="submit_order"} 1.0' in metrics
        assert 'effectgate_held_operations{action="submit_order"} 1.0' in metrics
        off = admin(client, "DELETE", "/kill/submit_order", params={"reason": "done"})
        assert off.status_code == 200 and off.json()["killed"] is False
        retry = propose(client, "op-1")
        assert retry.status_code == 200 and retry.json()["state"] == "acknowledged"
        assert venue.effect_count == 2
        # Issue 39 item 3 (invariant 10): the row moved on, so its "held:" note is gone, in
        # the reply, the agent's GET and the operator's view alike.
        assert retry.json()["detail"] is None
        got = client.get("/v1/operations/op-1", headers=bearer(AGENT_A))
        assert got.status_code == 200 and got.json()["detail"] is None
        row = admin(client, "GET", "/operations/alpha/op-1").json()
        assert row["state"] == "acknowledged" and row["detail"] is None

    def test_blast_radius_rehearses_without_flipping(
        self, client: TestClient, service: Service
    ) -> None:
        """Invariant 7 (rehearsal): the blast radius changes no control."""
        r = admin(client, "GET", "/kill/submit_order/blast-radius")
        assert r.status_code == 200 and r.json()["killed"] is False
        assert service.store.controls("submit_order").killed is False

    def test_scoped_operator_reads_but_cannot_flip(
        self, client: TestClient, service: Service
    ) -> None:
        """Invariant 7 (operators only) and tenant scopes: a class-wide switch needs '*'."""
        r = admin(client, "PUT", "/kill/submit_order", token=SCOPED_OPERATOR)
        assert r.status_code == 403 and r.json()["code"] == "forbidden"
        assert service.store.controls("submit_order").killed is False
        assert admin(client, "GET", "/kill", token=SCOPED_OPERATOR).status_code == 200
        assert admin(client, "GET", "/held?scope=beta", token=SCOPED_OPERATOR).status_code == 403


class TestRolesAndBadInput:
    ROUTES = [
        ("GET", "/controls"),
        ("GET", "/kill"),
        ("PUT", "/kill/submit_order"),
        ("DELETE", "/kill/submit_order"),
        ("GET", "/kill/submit_order/blast-radius"),
        ("GET", "/held"),
        ("GET", "/breakers"),
        ("POST", "/breakers/submit_order/reset"),
        ("GET", "/approvals"),
        ("GET", "/envelope/submit_order"),
        ("GET", "/envelope/submit_order/history"),
        ("PUT", "/shadow/submit_order"),
        ("GET", "/shadow/report"),
        ("GET", "/audit/verify"),
        ("GET", "/alerts"),
        ("GET", "/audit/operations/alpha/op-1"),
    ]

    @pytest.mark.parametrize(("method", "path"), ROUTES)
    def test_agent_token_is_403_on_every_control(
        self, client: TestClient, service: Service, method: str, path: str
    ) -> None:
        """Invariant 7: only the operator credential reaches a control."""
        r = admin(client, method, path, token=AGENT_A)
        assert r.status_code == 403 and r.json()["code"] == "forbidden"
        assert service.store.list_controls() == [] or not any(
            c.killed or c.shadow for c in service.store.list_controls()
        )

    @pytest.mark.parametrize(
        ("method", "path", "payload"),
        [
            ("PUT", "/kill/launch_rocket", None),
            ("DELETE", "/kill/launch_rocket", None),
            ("POST", "/breakers/launch_rocket/reset", None),
            ("PUT", "/shadow/launch_rocket", None),
            ("GET", "/envelope/launch_rocket", None),
            ("GET", "/kill/launch_rocket/blast-radius", None),
            (
                "POST",
                "/envelope/launch_rocket/step",
                {"axis": "max_value", "value": "1", "evidence": {"n": 1}},
            ),
        ],
    )
    def test_unknown_class_is_404_and_changes_nothing(
        self, client: TestClient, service: Service, method: str, path: str, payload: object
    ) -> None:
        """Bad operator input (issue 4): an unknown class is a clear error; nothing written."""
        before = audit_count(service)
        r = admin(client, method, path, json=payload)
        assert r.status_code == 404 and r.json()["code"] == "unknown_action_class"
        assert r.headers["content-type"] == "application/problem+json"
        assert audit_count(service) == before and service.store.list_controls() == []

    @pytest.mark.parametrize(
        ("payload", "field"),
        [
            ({"axis": "max_value", "value": 12.5, "evidence": {"clean": 100}}, "max_value"),
            ({"axis": "max_value", "value": "-3", "evidence": {"clean": 100}}, "max_value"),
            ({"axis": "exposure", "value": {"limit": "10"}, "evidence": {"n": 1}}, "exposure"),
            ({"axis": "tier", "value": "validate", "evidence": {"n": 1}}, "axis"),
            ({"axis": "max_value", "value": "2000", "evidence": {}}, "evidence"),
            (
                {"axis": "max_value", "value": "2000", "evidence": {"n": 1}, "reverse_on": "never"},
                "reverse_on",
            ),
        ],
    )
    def test_malformed_envelope_is_400_and_changes_nothing(
        self, client: TestClient, service: Service, payload: object, field: str
    ) -> None:
        """Bad operator input: a malformed envelope names the field; the envelope and the
        audit log are unchanged; the oversight tier is never an axis."""
        before = audit_count(service)
        r = admin(client, "POST", "/envelope/submit_order/step", json=payload)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "invalid_control" and r.json()["field"] == field
        assert service.store.controls("submit_order").envelope.version == 0
        assert audit_count(service) == before

    def test_request_shape_errors_are_400(self, client: TestClient) -> None:
        r = admin(client, "POST", "/approvals/alpha/op-1/approve", json={"fingerprint": "x"})
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        r = admin(client, "PUT", "/kill/submit_order", json={"reason": "x", "extra": 1})
        assert r.status_code == 400
        r = admin(client, "GET", "/audit/verify", params={"expect_head": "nope"})
        assert r.status_code == 400 and r.json()["field"] == "expect_head"


class TestApprovals:
    def test_operator_approves_exactly_the_listed_payload_then_it_dispatches(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Approvals are bound to the fingerprint and operation id; the approver is the
        operator token's identity; a complete approval releases and dispatches the row."""
        first = propose(client, "big-1", json.dumps(BIG).encode())
        assert first.json()["state"] == "awaiting_approval" and venue.effect_count == 0
        pending = admin(client, "GET", "/approvals", token=SCOPED_OPERATOR).json()
        assert [p["operation_id"] for p in pending] == ["big-1"] and pending[0]["required"] == 1
        wrong = admin(
            client, "POST", "/approvals/alpha/big-1/approve", json={"fingerprint": "0" * 64}
        )
        assert wrong.status_code == 409 and wrong.json()["reason"] == "fingerprint_mismatch"
        ok = admin(
            client,
            "POST",
            "/approvals/alpha/big-1/approve",
            token=SCOPED_OPERATOR,
            json={"fingerprint": pending[0]["fingerprint"], "reason": "checked"},
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["complete"] is True
        assert ok.json()["operation"]["state"] == "acknowledged" and venue.effect_count == 1
        assert admin(client, "GET", "/approvals").json() == []

    def test_refusal_denies(self, client: TestClient, venue: PaperVenue) -> None:
        fp = propose(client, "big-2", json.dumps(BIG).encode()).json()["fingerprint"]
        r = admin(client, "POST", "/approvals/alpha/big-2/refuse", json={"fingerprint": fp})
        assert r.status_code == 200 and r.json()["operation"]["state"] == "denied"
        assert venue.effect_count == 0

    def test_proposed_by_cannot_veto_an_approver(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Audit fields never influence a decision (docs/design.md, Trust): an intent whose
        proposed_by names the operator 'ops' does not stop 'ops' from approving it."""
        data = json.dumps({**BIG, "proposed_by": {"session": "ops"}}).encode()
        fp = propose(client, "big-3", data).json()["fingerprint"]
        r = admin(client, "POST", "/approvals/alpha/big-3/approve", json={"fingerprint": fp})
        assert r.status_code == 200, r.text
        assert r.json()["operation"]["state"] == "acknowledged" and venue.effect_count == 1

    def test_scoped_operator_sees_and_decides_only_its_scope(self, client: TestClient) -> None:
        fp = propose(client, "big-b", json.dumps(BIG).encode(), token=AGENT_B).json()["fingerprint"]
        assert admin(client, "GET", "/approvals", token=SCOPED_OPERATOR).json() == []
        r = admin(
            client,
            "POST",
            "/approvals/beta/big-b/approve",
            token=SCOPED_OPERATOR,
            json={"fingerprint": fp},
        )
        assert r.status_code == 403


class TestBreakerEnvelopeShadow:
    def test_breaker_trips_stays_open_and_only_an_operator_resets_it(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Invariant 7: the configured breaker ([controls.X]) trips on repeated intents, holds
        the class until an operator resets it, and shows in the metrics."""
        for i in range(4):
            propose(client, f"rep-{i}")
        status = {c["action"]: c for c in admin(client, "GET", "/breakers").json()}
        assert status["submit_order"]["breaker_open"] is True
        assert "repeats" in status["submit_order"]["breaker_reason"]
        sent = venue.effect_count
        assert propose(client, "rep-9", body(quantity="1")).json()["state"] == "validated"
        assert venue.effect_count == sent
        metrics = client.get("/metrics", headers=bearer(OPERATOR)).text
        assert 'effectgate_breaker_open{action="submit_order"} 1.0' in metrics
        assert 'effectgate_breaker_open{action="cancel_order"} 0.0' in metrics
        reset = admin(client, "POST", "/breakers/submit_order/reset", json={"reason": "ok"})
        assert reset.status_code == 200 and reset.json()["breaker_open"] is False

    def test_envelope_step_is_recorded_and_applied(self, client: TestClient) -> None:
        """Staged authority: a step names axis, old and new, evidence and reversal; history."""
        r = admin(
            client,
            "POST",
            "/envelope/submit_order/step",
            json={"axis": "max_value", "value": "500", "evidence": {"clean": 40}},
        )
        assert r.status_code == 200 and r.json()["old"] is None and r.json()["new"] == "500"
        env = admin(client, "GET", "/envelope/submit_order").json()
        assert env["max_value"] == "500" and env["version"] == 1
        assert propose(client, "env-1", body(quantity="6")).json()["state"] == "rejected"
        steps = admin(client, "GET", "/envelope/submit_order/history").json()
        assert [(s["axis"], s["operator"], s["evidence"]) for s in steps] == [
            ("max_value", "ops", {"clean": 40})
        ]

    def test_a_widening_step_without_checked_evidence_is_400(
        self, client: TestClient, service: Service
    ) -> None:
        """Issue 39 item 11: widening an axis needs evidence the boundary recomputes; a bare
        object is `400 evidence_unverified` naming `evidence.kind`, and nothing changes."""
        path = "/envelope/submit_order/step"
        first = {"axis": "max_value", "value": "500", "evidence": {"note": "cap"}}
        assert admin(client, "POST", path, json=first).status_code == 200
        before = audit_count(service)
        wider = {"axis": "max_value", "value": "2000", "evidence": {"x": 1}}
        r = admin(client, "POST", path, json=wider)
        assert r.status_code == 400, r.text
        assert (r.json()["code"], r.json()["field"]) == ("evidence_unverified", "evidence.kind")
        assert service.store.controls("submit_order").envelope.version == 1
        assert audit_count(service) == before
        got = admin(
            client, "GET", "/envelope/submit_order/evidence",
            params={"axis": "max_value", "kind": "operations", "since": 0, "until": 1},
        )  # fmt: skip
        assert got.status_code == 200 and got.json()["cases"] == 0

    def test_shadow_mode_never_calls_the_venue_and_reports_disagreement(
        self, client: TestClient, venue: PaperVenue
    ) -> None:
        """Shadow mode: rows end shadowed with zero venue calls; the incumbent's outcome is
        fed by correlation id (the operation id) and the report shows the disagreement."""
        assert admin(client, "PUT", "/shadow/submit_order").json()["shadow"] is True
        assert propose(client, "sh-1").json()["state"] == "shadowed"
        assert venue.effect_count == 0
        fed = admin(
            client,
            "POST",
            "/shadow/incumbent",
            json={
                "correlation_id": "sh-1",
                "action": "submit_order",
                "intent": {k: v for k, v in ORDER.items() if k not in ("intent_version", "action")}
                | {"quantity": "5"},
            },
        )
        assert fed.status_code == 200 and fed.json()["fingerprint"]
        report = admin(client, "GET", "/shadow/report").json()
        assert report["disagreed"] == 1 and report["disagreement_rate"] == 1.0
        assert admin(client, "DELETE", "/shadow/submit_order").json()["shadow"] is False
        assert admin(client, "GET", "/shadow/report").json()["disagreed"] == 1


class TestAuditAndAlerts:
    def test_verify_and_export_a_bundle_that_verifies_offline(self, client: TestClient) -> None:
        """Invariant 8: the chain verifies; one operation's bundle verifies with no store."""
        propose(client, "au-1")
        v = admin(client, "GET", "/audit/verify").json()
        assert v["ok"] is True and v["checked"] > 0
        lane, head = next(iter(v["heads"].items()))
        anchored = admin(
            client,
            "GET",
            "/audit/verify",
            params={"expect_head": f"{lane}:{head['seq']}:{head['hash']}"},
        )
        assert anchored.json()["ok"] is True
        bundle = admin(client, "GET", "/audit/operations/alpha/au-1").json()
        assert bundle["operation_id"] == "au-1" and verify_bundle(bundle).ok
        assert (
            admin(client, "GET", "/audit/operations/beta/au-1", token=SCOPED_OPERATOR).status_code
            == 403
        )
        assert admin(client, "GET", "/audit/operations/alpha/none").status_code == 404
        assert admin(client, "GET", "/audit/verify", token=SCOPED_OPERATOR).status_code == 403

    def test_alerts_and_divergences_are_filtered_by_scope_before_the_limit(
        self, client: TestClient, service: Service
    ) -> None:
        """Tenant scopes: a scoped operator sees its own divergences and alerts even when other
        tenants' fill the first page (the filter runs in SQL, before LIMIT)."""
        from effectgate._core.controls import Alert

        for i in range(5):
            service.store.record_divergence("orphan", f"beta:g{i}", [f"V{i}"], None, now=1.0)
            service.store.record_alert(Alert("orphan", f"beta:g{i}|V{i}", None, "m", {}, 1.0))
        service.store.record_divergence("orphan", "alpha:mine", ["VA"], None, now=2.0)
        service.store.record_alert(Alert("orphan", "alpha:mine|VA", None, "m", {}, 2.0))
        divs = admin(client, "GET", "/divergences?limit=2", token=SCOPED_OPERATOR).json()
        assert [d["op_key"] for d in divs] == ["alpha:mine"]
        alerts = admin(client, "GET", "/alerts?limit=2", token=SCOPED_OPERATOR).json()
        assert [a["subject"] for a in alerts] == ["alpha:mine|VA"]
        assert len(admin(client, "GET", "/alerts").json()) == 6

    def test_metrics_uncertain_age_is_the_oldest_row(
        self, client: TestClient, service: Service
    ) -> None:
        """Maintenance rule: the oldest uncertain row sets the age, whatever is newer."""
        from effectgate._core.states import State
        from effectgate.store.base import NewOperation

        parsed = service.config.registry.parse("submit_order", body())
        for i, at in enumerate((1000.0, *(service.clock() - 1 for _ in range(20)))):
            service.store.insert_operation(
                NewOperation(
                    scope="alpha",
                    operation_id=f"u-{i}",
                    action="submit_order",
                    fingerprint=parsed.fingerprint,
                    intent=parsed.snapshot,
                    effect=parsed.effect,
                    tier="validate",
                    reason="r",
                    policy_version="p",
                ),
                [State.PROPOSED, State.VALIDATED, State.SUBMITTED],
                now=at,
            )
        before = service.clock()
        text = client.get("/metrics", headers=bearer(OPERATOR)).text
        after = service.clock()
        line = next(
            ln
            for ln in text.splitlines()
            if ln.startswith("effectgate_uncertain_oldest_age_seconds ")
        )
        # Bracketed by clock reads around the scrape: no margin for a slow machine to exceed.
        assert before - 1000.0 <= float(line.split()[1]) <= after - 1000.0


class TestLiveServer:
    def test_kill_switch_and_breaker_alert_through_uvicorn(self, tmp_path: Path) -> None:
        """Invariant 7 end to end over a real socket: the operator flips the switch, the agent's
        dispatch is held, release + retry dispatches once; a breaker trip posts to the
        configured alert webhook ([alerts] webhook) and shows in /v1/admin/breakers."""
        import http.server
        import threading

        import httpx

        from servicekit import free_port, uvicorn_thread

        received: list[dict] = []

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        hook = http.server.HTTPServer(("127.0.0.1", free_port()), Hook)
        threading.Thread(target=hook.serve_forever, daemon=True).start()
        venue = PaperVenue()
        svc = make(
            tmp_path,
            None,
            venue,
            BREAKER + f'\n[alerts]\nwebhook = "http://127.0.0.1:{hook.server_port}/hook"\n',
        )
        try:
            with (
                uvicorn_thread(create_app(svc, mcp_http=False)) as url,
                httpx.Client(base_url=url, timeout=10) as http,
            ):
                ops = bearer(OPERATOR)
                agent = bearer(AGENT_A, **{"Content-Type": "application/json"})
                assert http.put("/v1/admin/kill/submit_order", headers=ops).status_code == 200
                held = http.post(
                    "/v1/actions/submit_order",
                    content=body(),
                    headers={**agent, "Idempotency-Key": "live-1"},
                )
                assert held.json()["state"] == "validated" and venue.effect_count == 0
                assert http.delete("/v1/admin/kill/submit_order", headers=ops).status_code == 200
                retry = http.post(
                    "/v1/actions/submit_order",
                    content=body(),
                    headers={**agent, "Idempotency-Key": "live-1"},
                )
                assert retry.json()["state"] == "acknowledged" and venue.effect_count == 1
                for i in range(3):
                    http.post(
                        "/v1/actions/submit_order",
                        content=body(),
                        headers={**agent, "Idempotency-Key": f"rep-{i}"},
                    )
                status = {
                    c["action"]: c for c in http.get("/v1/admin/breakers", headers=ops).json()
                }
                assert status["submit_order"]["breaker_open"] is True
            assert [a["kind"] for a in received] == ["breaker-tripped"]
            assert received[0]["action"] == "submit_order"
        finally:
            svc.close()
            hook.shutdown()
