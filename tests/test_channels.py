"""Approval channels (issue 18): a signed webhook out, a signed callback in with replay
protection shared by every replica, and the operator-facing MCP tool set on its own credential
(through the official SDK client, in memory and over stdio).

Invariant checked (docs/authority.md, "a channel answer is an approval like any other"): a
callback changes a row only with a valid signature, a fresh timestamp and an unused nonce, from
a mapped approver, under the same approval rules; anything else changes nothing but the audit.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters

from effectgate import open_store
from effectgate._core.states import State
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.operator import build_operator_server
from effectgate._service import Principal, Service, parse_config
from effectgate._service._channels import (
    NONCE,
    SIGNATURE,
    TIMESTAMP,
    ApprovalWebhook,
    ChannelConfig,
    sign,
    verify,
)
from effectgate.errors import Unauthenticated
from effectgate.store.roles import Store
from servicekit import AGENT_A, OPERATOR, ORDER, bearer, config_text

SECRET = "s3cret-chatops-0123456789"
CHANNEL = ChannelConfig("chatops", SECRET.encode(), None, 300.0, {"U1": "alice", "U2": "ops"})


def signed(
    body: dict[str, Any], *, at: float, nonce: str, secret: str = SECRET
) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    ts = str(int(at))
    return raw, {TIMESTAMP: ts, NONCE: nonce, SIGNATURE: sign(secret.encode(), ts, nonce, raw)}


class TestSignatures:
    def test_good_bad_stale_and_replayed(self, store: Store) -> None:
        def claim(nonce: str, at: float) -> bool:
            return store.claim_nonce("chatops", nonce, now=at, forget_before=at - 600)

        body, headers = signed({"x": 1}, at=1000, nonce="n1")
        verify(CHANNEL, headers, body, now=1000, claim_nonce=claim)
        with pytest.raises(Unauthenticated, match="replay"):
            verify(CHANNEL, headers, body, now=1001, claim_nonce=claim)
        body2, h2 = signed({"x": 1}, at=1000, nonce="n2", secret="another-secret-0000000")
        with pytest.raises(Unauthenticated, match="signature"):
            verify(CHANNEL, h2, body2, now=1000, claim_nonce=claim)
        body3, h3 = signed({"x": 1}, at=1000, nonce="n3")
        with pytest.raises(Unauthenticated, match="tolerance"):
            verify(CHANNEL, h3, body3, now=1000 + 301, claim_nonce=claim)
        with pytest.raises(Unauthenticated, match="signature"):
            verify(CHANNEL, h3, body3 + b" ", now=1000, claim_nonce=claim)
        assert any(e.kind == "channel_replay_refused" for e in store.iter_audit())

    def test_a_nonce_is_claimed_once_across_replicas(self, store_factory: Any) -> None:
        a, b = store_factory(), store_factory()
        assert a.claim_nonce("c", "n", now=1.0, forget_before=0.0)
        assert not b.claim_nonce("c", "n", now=2.0, forget_before=0.0)
        assert b.claim_nonce("other", "n", now=2.0, forget_before=0.0)


@pytest.fixture
def service(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    monkeypatch.setenv("EG_TEST_CHATOPS_SECRET", SECRET)
    text = (
        config_text(store_url=f"sqlite:///{tmp_path}/l.db")
        + """
[channels.chatops]
secret_env = "EG_TEST_CHATOPS_SECRET"
users = { U1 = "alice", U9 = "alpha" }
"""
    )
    svc = Service(parse_config(text, "t.toml"), store=store)
    yield svc
    svc.close()


def pending(client: TestClient, op_id: str = "op-1") -> str:
    r = client.post(
        "/v1/actions/submit_order",
        json={**ORDER, "quantity": "9.5"},
        headers={**bearer(AGENT_A), "Idempotency-Key": op_id},
    )
    assert r.json()["state"] == "awaiting_approval", r.text
    return str(r.json()["fingerprint"])


class TestCallbackIn:
    def test_a_signed_callback_approves_once(self, service: Service, store: Store) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            fp = pending(client)
            answer = {"scope": "alpha", "operation_id": "op-1", "fingerprint": fp,
                      "decision": "approve", "user": "U1"}  # fmt: skip
            body, headers = signed(answer, at=time.time(), nonce="n-1")
            r = client.post("/v1/channels/chatops/callback", content=body, headers=headers)
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "validated"
            [approval] = store.list_approvals("alpha", "op-1")
            assert approval.approver == "alice"
            # The same callback again is a replay: refused, nothing changes.
            r = client.post("/v1/channels/chatops/callback", content=body, headers=headers)
            assert r.status_code == 401 and "replay" in r.json()["detail"]

    def test_forged_unmapped_and_self_approving_callbacks_change_nothing(
        self, service: Service, store: Store
    ) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            fp = pending(client)
            base = {"scope": "alpha", "operation_id": "op-1", "fingerprint": fp,
                    "decision": "approve"}  # fmt: skip
            body, headers = signed({**base, "user": "U1"}, at=time.time(), nonce="a",
                                   secret="not-the-secret-000000")  # fmt: skip
            r = client.post("/v1/channels/chatops/callback", content=body, headers=headers)
            assert r.status_code == 401
            body, headers = signed({**base, "user": "U7"}, at=time.time(), nonce="b")
            r = client.post("/v1/channels/chatops/callback", content=body, headers=headers)
            assert r.status_code == 401 and "not mapped" in r.json()["detail"]
            body, headers = signed({**base, "user": "U9"}, at=time.time(), nonce="c")
            r = client.post("/v1/channels/chatops/callback", content=body, headers=headers)
            assert r.json()["code"] == "self_approval"  # "alpha" proposed it
            r = client.post("/v1/channels/nope/callback", content=body, headers=headers)
            assert r.status_code == 404
            assert store.list_approvals("alpha", "op-1") == []
            row = store.get("alpha", "op-1")
            assert row is not None and row.state is State.AWAITING_APPROVAL


class _Sink(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class TestWebhookOut:
    def test_each_request_is_announced_once_signed(self, service: Service, store: Store) -> None:
        _Sink.received = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        try:
            with TestClient(create_app(service, mcp_http=False)) as client:
                fp = pending(client)
            hook = ApprovalWebhook(ChannelConfig("chatops", SECRET.encode(), url, 300.0, {}), store)
            assert hook.poll() == 1
            assert hook.poll() == 0  # announced once
            hook.close()
            [(headers, body)] = _Sink.received
            expected = sign(SECRET.encode(), headers[TIMESTAMP], headers[NONCE], body)
            assert headers[SIGNATURE] == expected
            doc = json.loads(body)
            assert (doc["operation_id"], doc["fingerprint"]) == ("op-1", fp)
        finally:
            server.shutdown()

    def test_the_service_announces_on_its_own(
        self, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _Sink.received = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setenv("EG_TEST_CHATOPS_SECRET", SECRET)
        text = (
            config_text(store_url=f"sqlite:///{tmp_path}/l.db")
            + f"""
[channels.chatops]
url = "http://127.0.0.1:{server.server_address[1]}/hook"
secret_env = "EG_TEST_CHATOPS_SECRET"
announce_every = 0.05
"""
        )
        svc = Service(parse_config(text, "t.toml"), store=store)
        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                pending(client)
            deadline = time.monotonic() + 10
            while not _Sink.received:
                assert time.monotonic() < deadline, "nothing was announced"
                time.sleep(0.02)
            assert json.loads(_Sink.received[0][1])["operation_id"] == "op-1"
        finally:
            svc.close()
            server.shutdown()
        time.sleep(0.2)
        assert len(_Sink.received) == 1  # once, and nothing after close


class TestOperatorMcp:
    def test_list_and_approve_on_its_own_credential(self, service: Service, store: Store) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            fp = pending(client)
        approver = store.create_principal("carol", "approver", "alpha", created_by="ops", now=1.0)

        async def go() -> None:
            server = build_operator_server(
                service, lambda: service.tokens.from_token(approver.token)
            )
            async with Client(server) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert names == {"list_pending_approvals", "approve", "refuse"}  # no agent tool
                listed = await c.call_tool("list_pending_approvals", {})
                [item] = listed.structured_content["pending"]
                assert (item["operation_id"], item["fingerprint"]) == ("op-1", fp)
                out = await c.call_tool(
                    "approve", {"scope": "alpha", "operation_id": "op-1", "fingerprint": fp}
                )
                assert not out.is_error and out.structured_content["state"] == "validated"
                store.revoke_principal("carol", revoked_by="ops", now=2.0)
                again = await c.call_tool("list_pending_approvals", {})
                assert again.is_error and again.structured_content["code"] == "unauthenticated"

        anyio.run(go)
        [approval] = store.list_approvals("alpha", "op-1")
        assert approval.approver == "carol"

    def test_an_agent_credential_answers_nothing(self, service: Service) -> None:
        async def go() -> None:
            server = build_operator_server(service, lambda: Principal("alpha", "agent", "alpha"))
            async with Client(server) as c:
                out = await c.call_tool("list_pending_approvals", {})
                assert out.is_error and out.structured_content["code"] == "forbidden"

        anyio.run(go)

    def test_stdio(self, tmp_path: Path) -> None:
        store = open_store(f"sqlite:///{tmp_path}/ledger.db", create=True)
        store.close()
        config = tmp_path / "effectgate.toml"
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db"))
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "effectgate", "operator-mcp", "--config", str(config)],
            env={**os.environ, "EFFECTGATE_APPROVER_TOKEN": OPERATOR},
            cwd=str(tmp_path),
        )

        async def go() -> None:
            async with Client(params) as c:
                listed = await c.call_tool("list_pending_approvals", {})
                assert listed.structured_content == {"pending": []}

        anyio.run(go)
