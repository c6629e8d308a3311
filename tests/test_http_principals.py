"""Principals at the front doors (issue 11, item 5): tokens from the ledger, revocation at once,
roles (agent, harness, operator, approver) and ``/v1/admin/tokens``, on every store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.server import build_server
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from servicekit import AGENT_A, OPERATOR, ORDER, SCOPED_OPERATOR, bearer, config_text

BIG = {**ORDER, "quantity": "10", "limit_price": "95.00"}  # 950: over approve_above = 900


def make(tmp_path: Path, store: Store, venue: PaperVenue) -> Service:
    text = config_text(store_url=f"sqlite:///{tmp_path}/unused.db")
    return Service(
        parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(venue)}, store=store
    )


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue()


@pytest.fixture
def service(tmp_path: Path, venue: PaperVenue, store: Store) -> Iterator[Service]:
    svc = make(tmp_path, store, venue)
    yield svc
    svc.close()


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service, mcp_http=False)) as c:
        yield c


def issue(store: Store, name: str, role: str, scope: str) -> str:
    return store.create_principal(name, role, scope, created_by="ops", now=1.0).token


def propose(client: TestClient, key: str, token: str, data: dict[str, Any] = ORDER) -> Any:
    return client.post(
        "/v1/actions/submit_order",
        content=json.dumps(data).encode(),
        headers=bearer(token, **{"Idempotency-Key": key, "Content-Type": "application/json"}),
    )


def admin(client: TestClient, method: str, path: str, token: str = OPERATOR, **kw: Any) -> Any:
    return client.request(method, f"/v1/admin{path}", headers=bearer(token), **kw)


class TestLedgerTokens:
    def test_a_ledger_token_works_and_is_refused_once_revoked(
        self, client: TestClient, store: Store
    ) -> None:
        token = issue(store, "agent-x", "agent", "alpha")
        assert propose(client, "op-1", token).status_code == 201
        assert client.get("/v1/operations/op-1", headers=bearer(token)).status_code == 200
        store.revoke_principal("agent-x", revoked_by="ops", now=2.0)
        # The very next request, with a body (BodyGate) and without (the route's own check).
        r = propose(client, "op-2", token)
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        assert client.get("/v1/operations/op-1", headers=bearer(token)).status_code == 401

    def test_a_revocation_through_one_replica_holds_in_another_at_once(
        self, tmp_path: Path, store_factory, venue: PaperVenue
    ) -> None:
        """Two service processes on one ledger: revoking through the first's admin API makes
        the second refuse the token on its next request (no cache anywhere)."""
        one, two = make(tmp_path, store_factory(), venue), make(tmp_path, store_factory(), venue)
        try:
            with (
                TestClient(create_app(one, mcp_http=False)) as a,
                TestClient(create_app(two, mcp_http=False)) as b,
            ):
                made = admin(
                    a, "POST", "/tokens", json={"name": "bot", "role": "agent", "scope": "alpha"}
                )
                assert made.status_code == 201, made.text
                token = made.json()["token"]
                assert propose(b, "op-1", token).status_code == 201
                assert admin(a, "DELETE", "/tokens/bot").status_code == 200
                assert propose(b, "op-2", token).status_code == 401
                assert b.get("/v1/operations/op-1", headers=bearer(token)).status_code == 401
        finally:
            one.close()
            two.close()

    def test_config_tokens_still_work_deprecated(self, client: TestClient) -> None:
        assert propose(client, "op-1", AGENT_A).status_code == 201

    def test_a_harness_proposes_like_an_agent(self, client: TestClient, store: Store) -> None:
        token = issue(store, "runner", "harness", "alpha")
        r = propose(client, "op-h", token)
        assert r.status_code == 201 and r.json()["scope"] == "alpha"
        assert admin(client, "GET", "/controls", token=token).status_code == 403


class TestRoles:
    def test_an_approver_approves_but_cannot_kill(
        self, client: TestClient, store: Store, venue: PaperVenue
    ) -> None:
        approver = issue(store, "carol", "approver", "alpha")
        fp = propose(client, "big-1", AGENT_A, BIG).json()["fingerprint"]
        listed = admin(client, "GET", "/approvals", token=approver)
        assert [p["operation_id"] for p in listed.json()] == ["big-1"]
        for method, path in (
            ("PUT", "/kill/submit_order"),
            ("POST", "/breakers/submit_order/reset"),
            ("GET", "/operations"),
            ("GET", "/tokens"),
        ):
            r = admin(client, method, path, token=approver)
            assert r.status_code == 403 and "approver" in r.json()["detail"], (path, r.text)
        ok = admin(
            client,
            "POST",
            "/approvals/alpha/big-1/approve",
            token=approver,
            json={"fingerprint": fp},
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["operation"]["state"] == "acknowledged" and venue.effect_count == 1
        trail = store.audit_entries(scope="alpha", operation_id="big-1")
        assert any(e.kind == "approval" and e.detail["approver"] == "carol" for e in trail)
        assert not any(c.killed for c in store.list_controls())

    def test_an_approver_is_held_to_its_scope(self, client: TestClient, store: Store) -> None:
        approver = issue(store, "dave", "approver", "beta")
        fp = propose(client, "big-1", AGENT_A, BIG).json()["fingerprint"]
        assert admin(client, "GET", "/approvals", token=approver).json() == []
        r = admin(
            client,
            "POST",
            "/approvals/alpha/big-1/approve",
            token=approver,
            json={"fingerprint": fp},
        )
        assert r.status_code == 403

    def test_an_approval_needs_an_approver_or_an_operator(
        self, client: TestClient, store: Store
    ) -> None:
        harness = issue(store, "runner", "harness", "alpha")
        fp = propose(client, "big-1", AGENT_A, BIG).json()["fingerprint"]
        for token in (AGENT_A, harness):
            r = admin(
                client,
                "POST",
                "/approvals/alpha/big-1/approve",
                token=token,
                json={"fingerprint": fp},
            )
            assert r.status_code == 403, r.text
        assert (
            admin(client, "POST", "/approvals/alpha/big-1/refuse", json={"fingerprint": fp}).json()[
                "operation"
            ]["state"]
            == "denied"
        )

    def test_an_agent_reaches_nothing_under_admin(self, client: TestClient, store: Store) -> None:
        agent = issue(store, "agent-x", "agent", "alpha")
        for token in (AGENT_A, agent):
            for method, path in (
                ("GET", "/tokens"),
                ("POST", "/tokens"),
                ("DELETE", "/tokens/ops"),
                ("GET", "/approvals"),
                ("GET", "/operations"),
                ("GET", "/controls"),
            ):
                kw = (
                    {"json": {"name": "x", "role": "operator", "scope": "*"}}
                    if method == "POST"
                    else {}
                )
                r = admin(client, method, path, token=token, **kw)
                assert r.status_code == 403, (path, r.text)
        assert [p.name for p in store.list_principals()] == ["agent-x"]

    def test_operators_and_approvers_cannot_propose(self, client: TestClient, store: Store) -> None:
        for token in (OPERATOR, issue(store, "carol", "approver", "alpha")):
            assert propose(client, "op-x", token).status_code == 403


class TestAdminTokens:
    def test_create_list_revoke(self, client: TestClient, store: Store) -> None:
        made = admin(
            client, "POST", "/tokens", json={"name": "carol", "role": "approver", "scope": "alpha"}
        )
        assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
        body = made.json()
        assert (body["name"], body["role"], body["scope"], body["created_by"]) == (
            "carol",
            "approver",
            "alpha",
            "ops",
        )
        assert body["token"].startswith(body["token_prefix"])
        listed = admin(client, "GET", "/tokens")
        assert [p["name"] for p in listed.json()] == ["carol"]
        assert body["token"] not in listed.text
        again = admin(
            client, "POST", "/tokens", json={"name": "carol", "role": "agent", "scope": "alpha"}
        )
        assert again.status_code == 409 and again.json()["code"] == "principal_exists"
        gone = admin(client, "DELETE", "/tokens/carol")
        assert gone.status_code == 200 and gone.json()["revoked_by"] == "ops"
        assert admin(client, "GET", "/tokens").json() == []
        kept = admin(client, "GET", "/tokens", params={"include_revoked": "true"}).json()
        assert [(p["name"], p["live"]) for p in kept] == [("carol", False)]
        assert admin(client, "DELETE", "/tokens/carol").status_code == 404
        kinds = [e.kind for e in store.iter_audit() if e.kind.startswith("principal_")]
        assert kinds == ["principal_created", "principal_revoked"]

    @pytest.mark.parametrize(
        ("body", "status", "code"),
        [
            ({"name": "x", "role": "root", "scope": "alpha"}, 400, "invalid_control"),
            ({"name": "x", "role": "agent", "scope": "*"}, 400, "invalid_control"),
            ({"name": "system:x", "role": "agent", "scope": "alpha"}, 400, "invalid_control"),
            ({"name": "alpha", "role": "agent", "scope": "alpha"}, 409, "principal_exists"),
            ({"name": "x", "role": "agent"}, 400, "bad_request"),
        ],
    )
    def test_bad_requests_change_nothing(
        self, client: TestClient, store: Store, body: dict[str, Any], status: int, code: str
    ) -> None:
        """('alpha' is a config token's name: one name, one caller.)"""
        r = admin(client, "POST", "/tokens", json=body)
        assert (r.status_code, r.json()["code"]) == (status, code), r.text
        assert store.list_principals(include_revoked=True) == []

    def test_a_scoped_operator_manages_no_tokens(self, client: TestClient, store: Store) -> None:
        made = admin(
            client,
            "POST",
            "/tokens",
            token=SCOPED_OPERATOR,
            json={"name": "x", "role": "agent", "scope": "alpha"},
        )
        assert made.status_code == 403
        assert admin(client, "GET", "/tokens", token=SCOPED_OPERATOR).status_code == 403
        assert store.list_principals() == []

    def test_a_ledger_operator_can_mint_and_revoke_itself(
        self, client: TestClient, store: Store
    ) -> None:
        root = issue(store, "root", "operator", "*")
        made = admin(
            client, "POST", "/tokens", token=root, json={"name": "a", "role": "agent", "scope": "z"}
        )
        assert made.status_code == 201 and made.json()["created_by"] == "root"
        assert admin(client, "DELETE", "/tokens/root", token=root).status_code == 200
        assert admin(client, "GET", "/tokens", token=root).status_code == 401


class TestMcp:
    def test_a_stdio_session_stops_at_the_revocation(self, service: Service, store: Store) -> None:
        """stdio authenticates every tool call afresh: revoking mid-session stops the next."""
        token = issue(store, "agent-x", "agent", "alpha")

        async def go() -> None:
            server = build_server(service, lambda: service.tokens.from_token(token))
            async with Client(server) as c:
                first = await c.call_tool("submit_order", {"operation_id": "op-1", **ORDER})
                assert not first.is_error
                store.revoke_principal("agent-x", revoked_by="ops", now=2.0)
                second = await c.call_tool("submit_order", {"operation_id": "op-2", **ORDER})
                assert second.is_error
                assert second.structured_content["code"] == "unauthenticated"

        anyio.run(go)

    def test_mcp_over_http_refuses_a_revoked_token(
        self, tmp_path: Path, venue: PaperVenue, store: Store
    ) -> None:
        from servicekit import uvicorn_thread

        svc = make(tmp_path, store, venue)
        token = issue(store, "agent-x", "agent", "alpha")
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        try:
            with uvicorn_thread(create_app(svc)) as url:
                assert httpx.post(f"{url}/mcp", json=call, headers=headers).status_code == 200
                store.revoke_principal("agent-x", revoked_by="ops", now=2.0)
                assert httpx.post(f"{url}/mcp", json=call, headers=headers).status_code == 401
        finally:
            svc.close()
