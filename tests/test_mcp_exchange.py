"""The MCP door's fast path for a stateless ``tools/call`` answers exactly as the SDK's transport.

``McpHttpMount`` answers a plain ``tools/call`` POST itself (``_doors/mcp/_exchange.py``: the
SDK's request kernel without the per-request transport, streams and task group) and hands
everything else to the SDK's streamable-HTTP transport. These tests send the same requests to a
mount with the fast path and to one without it, over the same service, and compare the replies
byte for byte: status, every header, body. A spy on each mount's SDK transport shows which
requests the fast path took, so the comparison is never the SDK against itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import StoreFactory
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp import _exchange
from effectgate._doors.mcp.server import LOOKUP_TOOL, McpHttpMount
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from servicekit import AGENT_A, ORDER, config_text, uvicorn_thread

Reply = tuple[int, list[tuple[bytes, bytes]], bytes]

JSON_ACCEPT = (b"accept", b"application/json, text/event-stream")
JSON_TYPE = (b"content-type", b"application/json")
BEARER = (b"authorization", f"Bearer {AGENT_A}".encode())
VERSION = (b"mcp-protocol-version", b"2025-06-18")


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue()


@pytest.fixture
def service(store_factory: StoreFactory, venue: PaperVenue) -> Iterator[Service]:
    """A service on a fresh ledger, on each store."""
    url = store_factory.url  # type: ignore[attr-defined]
    svc = Service(
        parse_config(config_text(store_url=url), "test.toml"),
        adapters={"venue": PaperAdapter(venue)},
    )
    yield svc
    svc.close()


def call(
    op: str, args: dict[str, Any] | None = None, *, rid: Any = 1, name: str = "submit_order"
) -> bytes:
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call"}
    body["params"] = {"name": name, "arguments": {"operation_id": op, **ORDER, **(args or {})}}
    return json.dumps(body).encode()


async def post(
    mount: McpHttpMount, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> Reply:
    """One POST /mcp through ``mount`` as an ASGI server would send it; the reply as sent."""
    head = [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(body)).encode())]
    head += headers if headers is not None else [BEARER, JSON_TYPE, JSON_ACCEPT, VERSION]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "root_path": "", "query_string": b"",
        "headers": head, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    await mount(scope, receive, send)
    start = next(m for m in out if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    return start["status"], list(start.get("headers", [])), data


class Spy:
    """Counts the requests a mount handed to the SDK's transport."""

    def __init__(self, mount: McpHttpMount) -> None:
        manager = mount._manager
        assert manager is not None
        self.count, real = 0, manager.handle_request

        async def handle(scope: Any, receive: Any, send: Any) -> None:
            self.count += 1
            await real(scope, receive, send)

        manager.handle_request = handle  # type: ignore[method-assign]


@asynccontextmanager
async def mounts(service: Service) -> AsyncIterator[tuple[McpHttpMount, McpHttpMount, Spy, Spy]]:
    fast, plain = McpHttpMount(service), McpHttpMount(service, fast_path=False)
    async with fast.running(), plain.running():
        yield fast, plain, Spy(fast), Spy(plain)


class TestTheFastPathAnswersAsTheSdk:
    def test_the_same_requests_get_the_same_bytes(
        self, service: Service, venue: PaperVenue
    ) -> None:
        """Each request to both mounts; the tools/call requests were the fast path's, the rest
        the SDK's, and every reply is the same bytes (status, headers, body)."""
        notification = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
        initialize = json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}},
        }).encode()  # fmt: skip
        # (body, headers, answered by the fast path)
        cases: list[tuple[str, bytes, list[tuple[bytes, bytes]] | None, bool]] = [
            ("validation refusal", call("op-v", {"quantity": 4}), None, True),
            ("unknown tool", call("op-u", name="no_such_tool"), None, True),
            ("unknown lookup", call("op-none", name=LOOKUP_TOOL, rid="s-1"), None, True),
            ("no name", b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}', None,
             True),
            ("arguments not an object",
             b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"submit_order",'
             b'"arguments":[1]}}', None, True),
            ("duplicate key",
             call("op-d").replace(b'"quantity": "4"', b'"quantity": "1", "quantity": "4"'),
             None, True),
            ("no version header", call("op-v", {"quantity": 4}),
             [BEARER, JSON_TYPE, JSON_ACCEPT], True),
            ("wrong content type", call("op-v"), [BEARER, (b"content-type", b"text/plain"),
                                                  JSON_ACCEPT, VERSION], True),
            ("malformed body", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "par', None,
             False),
            ("a batch", b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}]', None, False),
            ("notification", notification, None, False),
            ("initialize", initialize, None, False),
            ("tools/list", b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}', None, False),
            ("SSE only", call("op-v"), [BEARER, JSON_TYPE, (b"accept", b"text/event-stream"),
                                        VERSION], False),
            ("modern era", call("op-v"), [BEARER, JSON_TYPE, JSON_ACCEPT,
                                          (b"mcp-protocol-version", b"2026-07-28")], False),
        ]  # fmt: skip

        async def go() -> None:
            async with mounts(service) as (fast, plain, fast_spy, plain_spy):
                for what, body, headers, taken in cases:
                    before = fast_spy.count
                    want = await post(plain, body, headers)
                    got = await post(fast, body, headers)
                    assert got == want, what
                    assert (fast_spy.count == before) is taken, what
                    assert plain_spy.count > 0
                # A success: one action created through each path, then replayed through both.
                for first, op in ((plain, "op-a"), (fast, "op-b")):
                    created = await post(first, call(op))
                    assert created[0] == 200
                    assert json.loads(created[2])["result"]["structuredContent"]["state"] == (
                        "acknowledged"
                    )
                    before = fast_spy.count
                    want, got = await post(plain, call(op)), await post(fast, call(op))
                    assert got == want
                    assert fast_spy.count == before
                    assert json.loads(got[2])["result"]["structuredContent"]["replayed"] is True

        anyio.run(go)
        assert venue.effect_count == 2

    def test_a_handler_crash_is_answered_as_the_dispatcher_does(
        self, service: Service, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An exception the SDK does not map is ``code 0`` with its message, on both paths."""

        async def boom(*_: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr("effectgate._doors.mcp.server._call", boom)

        async def go() -> None:
            async with mounts(service) as (fast, plain, _, _):
                want, got = await post(plain, call("op-x")), await post(fast, call("op-x"))
                assert got == want
                assert json.loads(got[2])["error"] == {"code": 0, "message": "boom"}

        anyio.run(go)


class TestTheSdkClientOverTheFastPath:
    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    def test_a_real_client_session(
        self, service: Service, venue: PaperVenue, monkeypatch: pytest.MonkeyPatch, mode: str
    ) -> None:
        """The SDK's client over streamable HTTP sees the door's usual answers. A handshake-era
        session ("legacy") has its tool calls answered by the fast path, its initialize and list
        by the SDK's transport; a 2026-era one ("auto") goes to the SDK's own single-exchange
        entry, which sets up no per-request transport to skip, so the fast path declines it."""
        taken: list[bool] = []
        real = _exchange.Exchange.answer

        async def answer(self: _exchange.Exchange, *args: Any) -> bool:
            taken.append(await real(self, *args))
            return taken[-1]

        monkeypatch.setattr(_exchange.Exchange, "answer", answer)
        app = create_app(service, mcp_http=True)
        with uvicorn_thread(app) as url:

            async def session() -> None:
                async with httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {AGENT_A}"}, timeout=10
                ) as http:
                    async with Client(
                        streamable_http_client(f"{url}/mcp", http_client=http), mode=mode
                    ) as c:
                        assert "submit_order" in {t.name for t in (await c.list_tools()).tools}
                        taken.clear()
                        ok = await c.call_tool("submit_order", {"operation_id": "op-1", **ORDER})
                        assert ok.structured_content["state"] == "acknowledged"
                        bad = await c.call_tool("submit_order", {"operation_id": "op-2"})
                        assert bad.is_error and bad.structured_content["code"] == "invalid_intent"
                        again = await c.call_tool("submit_order", {"operation_id": "op-1", **ORDER})
                        assert again.structured_content["replayed"] is True
                        assert taken == [mode == "legacy"] * 3

            anyio.run(session)
        assert venue.effect_count == 1
