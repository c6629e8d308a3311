"""The MCP door through the SDK's real client: in memory (two wire modes), stdio and HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from effectgate import open_store
from effectgate._doors._shared.mcp_screen import REFUSED_META, screen
from effectgate._doors._shared.models import OperationOut
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.receipts import RECEIPT_TOOL
from effectgate._doors.mcp.server import LOOKUP_TOOL, PIN_META_KEY, build_server
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from servicekit import AGENT_A, OPERATOR, ORDER, VENUE_KEY_ENV, config_text, uvicorn_thread

ALPHA = Principal("alpha", "agent", "alpha")
ARGS: dict[str, Any] = {"operation_id": "op-1", **ORDER}


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue()


@pytest.fixture
def service(tmp_path: Path, venue: PaperVenue) -> Iterator[Service]:
    cfg = parse_config(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db"), "test.toml")
    svc = Service(cfg, adapters={"venue": PaperAdapter(venue)})
    yield svc
    svc.close()


def run(coro_fn: Any, *args: Any) -> Any:
    return anyio.run(coro_fn, *args)


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    """auto: the SDK's direct in-process dispatch; legacy: JSON-RPC over in-memory streams."""
    return str(request.param)


class TestToolsInMemory:
    def test_tools_mirror_the_action_classes(self, service: Service, mode: str) -> None:
        """DESIGN front doors: inputSchema is the intent schema (+ operation_id), outputSchema
        the operation result; a read-only lookup; no operator tool."""

        async def go() -> None:
            async with Client(build_server(service, ALPHA), mode=mode) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                assert set(tools) == {
                    "submit_order", "cancel_order", LOOKUP_TOOL, RECEIPT_TOOL,
                    "evaluate_submit_order", "evaluate_cancel_order",
                }  # fmt: skip
                schema = tools["submit_order"].input_schema
                intent = service.config.registry.get("submit_order").json_schema()
                assert schema["required"][0] == "operation_id"
                assert set(schema["properties"]) == {
                    "operation_id", "evaluation_token", *intent["properties"]
                }  # fmt: skip
                assert tools["evaluate_submit_order"].annotations.read_only_hint is True
                assert schema["additionalProperties"] is False
                assert tools["submit_order"].output_schema == OperationOut.model_json_schema()
                assert tools[LOOKUP_TOOL].annotations.read_only_hint is True
                assert tools["submit_order"].annotations.destructive_hint is True

        run(go)

    def test_propose_retry_and_lookup(self, service: Service, venue: PaperVenue, mode: str) -> None:
        """Invariant 1 over MCP: the same operation_id again is a replay; one effect."""

        async def go() -> None:
            async with Client(build_server(service, ALPHA), mode=mode) as c:
                first = await c.call_tool("submit_order", ARGS)
                assert not first.is_error
                out = first.structured_content
                assert out["state"] == "acknowledged" and out["replayed"] is False
                again = await c.call_tool("submit_order", dict(ARGS))
                assert again.structured_content["replayed"] is True
                assert again.structured_content["venue_id"] == out["venue_id"]
                looked = await c.call_tool(LOOKUP_TOOL, {"operation_id": "op-1"})
                assert looked.structured_content["state"] == "acknowledged"

        run(go)
        assert venue.effect_count == 1

    def test_conflicting_payload_is_an_error_result(
        self, service: Service, venue: PaperVenue, mode: str
    ) -> None:
        """Invariant 2 over MCP: same operation_id, changed effect -> idempotency_conflict."""

        async def go() -> None:
            async with Client(build_server(service, ALPHA), mode=mode) as c:
                await c.call_tool("submit_order", ARGS)
                bad = await c.call_tool("submit_order", {**ARGS, "quantity": "5"})
                assert bad.is_error and bad.structured_content["code"] == "idempotency_conflict"

        run(go)
        assert venue.effect_count == 1

    @pytest.mark.parametrize(
        "change,field,reason",
        [
            ({"quantity": 4}, "quantity", "not_a_decimal_string"),  # 4 is not "4"
            ({"quantity": 4.0}, "quantity", "float_not_allowed"),  # 4.0 is not a decimal
            ({"intent_version": 1}, "intent_version", "unknown_version"),  # 1 is not "1"
            ({"side": "BUY"}, "side", "literal_error"),
            ({"instrument": "\u0425YZ-PERP"}, "instrument", "string_pattern_mismatch"),  # Cyrillic
            ({"venue_url": "http://evil"}, "venue_url", "extra_forbidden"),
            ({"operation_id": 7}, "operation_id", "invalid_operation_id"),
            # The continuation namespace is reserved (docs/continuations.md).
            ({"operation_id": "cont:op-1:1"}, "operation_id", "reserved_operation_id"),
        ],
    )
    def test_bad_arguments_name_the_field(
        self, service: Service, venue: PaperVenue, mode: str, change: dict, field: str, reason: str
    ) -> None:
        """No coercion: the error result says which field is wrong and why."""

        async def go() -> None:
            async with Client(build_server(service, ALPHA), mode=mode) as c:
                res = await c.call_tool("submit_order", {**ARGS, **change})
                assert res.is_error
                assert res.structured_content["field"] == field
                assert res.structured_content["reason"] == reason
                assert field in res.content[0].text

        run(go)
        assert venue.effect_count == 0

    def test_missing_operation_id_and_pinned_mismatch(self, service: Service) -> None:
        """The id mechanism: required argument; a harness-pinned id in _meta must match."""

        async def go() -> None:
            async with Client(build_server(service, ALPHA)) as c:
                res = await c.call_tool("submit_order", dict(ORDER))
                assert res.is_error and res.structured_content["field"] == "operation_id"
                pinned = await c.call_tool(
                    "submit_order", ARGS, meta={PIN_META_KEY: "op-from-harness"}
                )
                assert pinned.structured_content["reason"] == "pinned_mismatch"
                ok = await c.call_tool(
                    "submit_order", {**ARGS, "operation_id": "op-h"}, meta={PIN_META_KEY: "op-h"}
                )
                assert not ok.is_error

        run(go)

    def test_scopes_are_separate(self, service: Service) -> None:
        async def go() -> None:
            async with Client(build_server(service, ALPHA)) as a:
                await a.call_tool("submit_order", ARGS)
            beta = Principal("beta", "agent", "beta")
            async with Client(build_server(service, beta)) as b:
                res = await b.call_tool(LOOKUP_TOOL, {"operation_id": "op-1"})
                assert res.is_error and res.structured_content["code"] == "operation_not_found"

        run(go)

    def test_venue_down_result_says_why_and_what_next(
        self, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 11 item 4 over MCP: the tool result of an uncertain action carries the
        outcome, the cause and a message a model can act on; so does the lookup later."""
        monkeypatch.setenv(VENUE_KEY_ENV, "venue-key")
        # The venue resets the connection once it has the request: the outcome is unknown
        # (a refused connection is proven not applied, docs/evidence.md).
        from effectgate.adapters.conformance.transport_faults import FaultServer

        resetting = FaultServer("reset-after").__enter__()
        down = resetting.url()
        cfg = parse_config(
            config_text(venue_url=down, store_url=f"sqlite:///{tmp_path}/down.db"), "t.toml"
        )
        svc = Service(cfg)
        results: list[dict[str, Any]] = []

        async def go() -> None:
            async with Client(build_server(svc, ALPHA), mode=mode) as c:
                for name, arguments in (
                    ("submit_order", ARGS),
                    (LOOKUP_TOOL, {"operation_id": "op-1"}),
                ):
                    res = await c.call_tool(name, arguments)
                    assert not res.is_error
                    results.append(res.structured_content)
                    assert json.loads(res.content[0].text) == res.structured_content

        try:
            run(go)
        finally:
            svc.close()
            resetting.close()
        for out in results:
            assert out["state"] == "submitted" and out["outcome"] == "uncertain"
            assert "connection to the venue failed" in out["cause"]
            assert "new operation id" in out["message"] and "60s" in out["message"]


class TestStdio:
    def test_stdio_session(self, tmp_path: Path) -> None:
        """`effectgate mcp` over stdio with the SDK's stdio client: list, propose, retry."""
        config = tmp_path / "effectgate.toml"
        # The operator's ledger exists (init made it): `effectgate mcp` never creates one.
        open_store(f"sqlite:///{tmp_path}/ledger.db", create=True).close()
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db"))
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-c",
                "from effectgate._doors.cli.main import main; main()",
                "mcp",
                "--config",
                str(config),
            ],
            env={**os.environ, "EFFECTGATE_AGENT_TOKEN": AGENT_A},
            cwd=str(tmp_path),
        )

        async def go() -> None:
            async with Client(params) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert names - {"evaluate_submit_order", "evaluate_cancel_order"} == {
                    "submit_order", "cancel_order", LOOKUP_TOOL, RECEIPT_TOOL
                }  # fmt: skip
                first = await c.call_tool("submit_order", ARGS)
                again = await c.call_tool("submit_order", ARGS)
                assert first.structured_content["scope"] == "alpha"
                assert again.structured_content["replayed"] is True
                bad = await c.call_tool(
                    "submit_order", {**ARGS, "operation_id": "op-2", "quantity": "-1"}
                )
                assert bad.is_error and bad.structured_content["field"] == "quantity"

        run(go)


class TestStreamableHttp:
    def test_mcp_over_http_in_the_service_process(
        self, service: Service, venue: PaperVenue
    ) -> None:
        """MCP at /mcp beside the HTTP API: agent token required, scope from the token."""
        app = create_app(service, mcp_http=True)
        with uvicorn_thread(app) as url:

            async def session(token: str) -> None:
                async with httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {token}"}, timeout=10
                ) as http:
                    transport = streamable_http_client(f"{url}/mcp", http_client=http)
                    async with Client(transport) as c:
                        tools = {t.name for t in (await c.list_tools()).tools}
                        assert LOOKUP_TOOL in tools
                        res = await c.call_tool("submit_order", ARGS)
                        assert res.structured_content["scope"] == "alpha"
                        http_view = await http.get(f"{url}/v1/operations/op-1")
                        assert http_view.json()["venue_id"] == res.structured_content["venue_id"]

            anyio.run(session, AGENT_A)
            import httpx

            for token, status in ((None, 401), (OPERATOR, 403), ("wrong", 401)):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                r = httpx.post(
                    f"{url}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={**headers, "Accept": "application/json"},
                )
                assert r.status_code == status
        assert venue.effect_count == 1

    def test_the_mcp_routes_are_matched_first(self, service: Service) -> None:
        """/mcp and /mcp/operator head the route list: an MCP request is not matched against
        every API route before its own (about 180 us of CPU per request at the end)."""
        from starlette.routing import Route

        app = create_app(service, mcp_http=True, operator_mcp=True)
        head = [r.path for r in app.router.routes[:2] if isinstance(r, Route)]
        assert head == ["/mcp", "/mcp/operator"]

    def test_the_sdk_transport_logs_no_line_per_request(self) -> None:
        """The SDK's transport logs "Terminating session" at INFO for every stateless request;
        the service holds that logger at WARNING (other loggers keep the configured level)."""
        import io
        import logging

        from effectgate._service._logging import configure_logging

        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        quiet = logging.getLogger("mcp.server.streamable_http")
        out = io.StringIO()
        configure_logging("info", stream=out)
        try:
            logging.getLogger("mcp.server.streamable_http").info("Terminating session: None")
            logging.getLogger("mcp.server.streamable_http_manager").info("manager started")
            assert "Terminating session" not in out.getvalue()
            assert "manager started" in out.getvalue()
        finally:
            root.handlers[:], root.level = handlers, level
            quiet.setLevel(logging.NOTSET)


def _dup_call(op: str) -> str:
    """A tools/call whose raw text names quantity twice (the SDK's parser keeps the last)."""
    args = ", ".join(
        f'"{k}": {json.dumps(v)}'
        for k, v in {**ORDER, "operation_id": op}.items()
        if k != "quantity"
    )
    return (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
        f'"submit_order", "arguments": {{{args}, "quantity": "1", "quantity": "4"}}}}}}'
    )


class TestDuplicateKeys:
    def test_screen_marks_only_duplicated_tool_calls(self) -> None:
        plain = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        assert screen(plain) is plain
        marked = json.loads(screen(_dup_call("op-d")))
        assert marked["params"]["_meta"][REFUSED_META] == "quantity"

    def test_http_door_refuses_duplicate_keys(self, service: Service, venue: PaperVenue) -> None:
        """Bad input: a repeated key is refused at the MCP door as at the HTTP door."""
        import httpx

        app = create_app(service, mcp_http=True)
        with uvicorn_thread(app) as url:
            r = httpx.post(
                f"{url}/mcp",
                content=_dup_call("op-d"),
                headers={
                    "Authorization": f"Bearer {AGENT_A}",
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                },
            )
        result = r.json()["result"]
        assert result["isError"] is True
        assert result["structuredContent"]["reason"] == "duplicate_key"
        assert result["structuredContent"]["field"] == "quantity"
        assert venue.effect_count == 0

    def test_stdio_door_refuses_duplicate_keys(self, tmp_path: Path) -> None:
        config = tmp_path / "effectgate.toml"
        # The operator's ledger exists (init made it): `effectgate mcp` never creates one.
        open_store(f"sqlite:///{tmp_path}/ledger.db", create=True).close()
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db"))
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        lines = [
            json.dumps(init),
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            _dup_call("op-d"),
        ]
        # Keep stdin open until the answer arrives: at EOF the server shuts down and would
        # cancel a call still in flight (a race that a loaded machine loses).
        proc = subprocess.Popen(
            [sys.executable, "-m", "effectgate", "mcp", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=str(tmp_path),
            env={**os.environ, "EFFECTGATE_AGENT_TOKEN": AGENT_A},
        )
        answers: list[dict[str, Any]] = []
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n".join(lines) + "\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(a.get("id") == 7 for a in answers):
                line = proc.stdout.readline()
                if not line:
                    break
                if line.strip():
                    answers.append(json.loads(line))
        finally:
            proc.kill()
            proc.wait(timeout=10)
        call = next(a for a in answers if a.get("id") == 7)
        assert call["result"]["isError"] is True
        assert call["result"]["structuredContent"]["reason"] == "duplicate_key"
