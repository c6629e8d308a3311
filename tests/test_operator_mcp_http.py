"""The operator MCP tool set over streamable HTTP (issue 18, docs/authority.md), driven by the
official ``mcp`` SDK's streamable-HTTP client against a real uvicorn server, on both stores.

Invariant checked (docs/authority.md, "on its own credential"): the operator endpoint
``/mcp/operator`` answers only an approver's or operator's bearer token, re-checked on every
request (a revocation stops the next call); an agent's token opens neither it nor an approval,
and the agent's ``/mcp`` refuses the approver's token; the approver recorded is the credential's
principal, never a tool argument.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.store.roles import Store
from servicekit import AGENT_A, ORDER, bearer, config_text, uvicorn_thread


@pytest.fixture
def served(tmp_path: Path, store: Store) -> Iterator[tuple[str, Store]]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db", service="operator_mcp_http = true")
    svc = Service(parse_config(text, "t.toml"), store=store)
    try:
        with uvicorn_thread(create_app(svc)) as url:
            yield url, store
    finally:
        svc.close()


def _pending(url: str) -> str:
    r = httpx.post(
        f"{url}/v1/actions/submit_order",
        json={**ORDER, "quantity": "9.5"},  # 950 > approve_above 900
        headers={**bearer(AGENT_A), "Idempotency-Key": "op-1"},
        timeout=10,
    )
    assert r.json()["state"] == "awaiting_approval", r.text
    return str(r.json()["fingerprint"])


async def _session(url: str, token: str, calls: Any) -> Any:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        async with Client(streamable_http_client(f"{url}/mcp/operator", http_client=http)) as c:
            return await calls(c)


def test_approve_over_streamable_http(served: tuple[str, Store]) -> None:
    url, store = served
    fp = _pending(url)
    carol = store.create_principal("carol", "approver", "alpha", created_by="ops", now=1.0)

    async def calls(c: Client) -> None:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names == {"list_pending_approvals", "approve", "refuse"}  # no agent tool
        [item] = (await c.call_tool("list_pending_approvals", {})).structured_content["pending"]
        assert (item["operation_id"], item["fingerprint"]) == ("op-1", fp)
        bad = await c.call_tool(
            "approve", {"scope": "alpha", "operation_id": "op-1", "fingerprint": fp, "by": "x"}
        )
        assert bad.is_error and bad.structured_content["field"] == "by"
        out = await c.call_tool(
            "approve", {"scope": "alpha", "operation_id": "op-1", "fingerprint": fp}
        )
        assert not out.is_error, out.structured_content
        assert out.structured_content["state"] in ("validated", "acknowledged")

    anyio.run(_session, url, carol.token, calls)
    [approval] = store.list_approvals("alpha", "op-1")
    assert approval.approver == "carol"  # from the credential


def test_each_request_rechecks_the_credential(served: tuple[str, Store]) -> None:
    url, store = served
    _pending(url)
    carol = store.create_principal("carol", "approver", "alpha", created_by="ops", now=1.0)

    async def calls(c: Client) -> None:
        assert (await c.call_tool("list_pending_approvals", {})).structured_content["pending"]
        store.revoke_principal("carol", revoked_by="ops", now=2.0)
        with pytest.raises(MCPError):  # the SDK's view of the door's answer
            await c.call_tool("list_pending_approvals", {})

    anyio.run(_session, url, carol.token, calls)
    assert store.list_approvals("alpha", "op-1") == []
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = httpx.post(f"{url}/mcp/operator", json=ping, headers=bearer(carol.token), timeout=10)
    assert r.status_code == 401  # what the SDK was answered


def test_doors_refuse_the_other_credential(served: tuple[str, Store]) -> None:
    url, store = served
    carol = store.create_principal("carol", "approver", "alpha", created_by="ops", now=1.0)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    for path, token, status in (
        ("/mcp/operator", None, 401),
        ("/mcp/operator", "wrong", 401),
        ("/mcp/operator", AGENT_A, 403),  # an agent answers no approval
        ("/mcp", carol.token, 403),  # an approver proposes nothing
        ("/mcp/operator", carol.token, 200),
    ):
        headers = {**accept, **(bearer(token) if token else {})}
        r = httpx.post(f"{url}{path}", json=ping, headers=headers, timeout=10)
        assert r.status_code == status, (path, r.text)


def test_off_unless_configured(tmp_path: Path, store: Store) -> None:
    svc = Service(
        parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db"), "t.toml"), store=store
    )
    try:
        with uvicorn_thread(create_app(svc)) as url:
            r = httpx.post(f"{url}/mcp/operator", json={}, headers=bearer(AGENT_A), timeout=10)
            assert r.status_code == 404
    finally:
        svc.close()
