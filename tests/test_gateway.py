"""The MCP gateway in front of real upstream MCP servers (official SDK, tests/gateway_upstreams.py),
driven by the SDK's own client: in memory against the gateway server, over stdio through
``effectgate gateway``, and over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from effectgate import open_store
from effectgate._doors.gateway import (
    Gateway,
    UpstreamLink,
    UpstreamSpec,
    build_gateway_server,
    gateway_app,
    parse_gateway,
    schema_digest,
)
from effectgate._service import Principal
from effectgate.errors import AdapterError, ConfigError
from servicekit import AGENT_A, sha, uvicorn_thread

UPSTREAM = str(Path(__file__).with_name("gateway_upstreams.py"))
ALPHA = Principal("alpha", "agent", "alpha")
ORDER: dict[str, Any] = {"sku": "WIDGET-1", "quantity": 2, "amount": "19.90"}
SECRET = "shop-secret-never-shown"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The upstream's state file; the gateway's environment holds the upstream credential."""
    state = tmp_path / "shop.json"
    monkeypatch.setenv("GW_SHOP_KEY", SECRET)
    monkeypatch.setenv("GW_SHOP_STATE", str(state))
    monkeypatch.setenv("GW_SHOP_DELAY", "4")
    return state


@cache
def live_pin(mode: str, tool: str) -> str:
    """The digest the upstream serves for ``tool`` now (what an operator pins after review)."""
    os.environ.setdefault("GW_PIN_STATE", "/nonexistent/pin.json")
    spec = UpstreamSpec(
        "pin",
        command=sys.executable,
        args=(UPSTREAM, mode),
        env={"SHOP_API_KEY": "GW_PIN_STATE", "SHOP_STATE": "GW_PIN_STATE"},
    )
    link = UpstreamLink(spec)
    try:
        listed = {t.name: t for t in link.list_tools()}
    finally:
        link.close()
    return schema_digest(listed[tool].input_schema)


def gateway_toml(
    tmp_path: Path,
    mode: str = "keyed",
    *,
    pin: str | None = None,
    extra: str = "",
    timeout: float = 2.0,
    id_mode: str = "argument",
) -> str:
    store = f"sqlite:///{tmp_path}/gateway.db"
    common = f"""
[gateway]
operation_id = "{id_mode}"

[service]
dispatch_timeout = {timeout}
reconcile_interval = 0
dispatch_interval = 0

[store]
url = "{store}"

[tokens.alpha]
role = "agent"
scope = "alpha"
sha256 = "{sha(AGENT_A)}"

[upstreams.shop]
command = "{sys.executable}"
args = ["{UPSTREAM}", "{mode}"]
env = {{ SHOP_API_KEY = "GW_SHOP_KEY", SHOP_STATE = "GW_SHOP_STATE", SHOP_DELAY = "GW_SHOP_DELAY" }}
timeout = 20
"""
    if mode == "unkeyed":
        return (
            common
            + f"""
[tools.send_note]
upstream = "shop"
schema_sha256 = "{pin or live_pin("unkeyed", "send_note")}"
effect_class = "non_idempotent_mutation"
visibility_horizon = 5
key_retention = 86400
[tools.send_note.fields.to]
pattern = "^[a-z]+@[a-z.]+$"
[tools.send_note.fields.text]
maxLength = 200
[tools.send_note.venue]
honours_key = "false"
read_view = "none"

[policies.send_note]
"""
            + extra
        )
    return (
        common
        + f"""read_only = ["list_orders", "get_order"]

[tools.place_order]
upstream = "shop"
schema_sha256 = "{pin or live_pin("keyed", "place_order")}"
effect_class = "idempotent_mutation"
visibility_horizon = 1
key_retention = 86400
key_argument = "idempotency_key"
id_field = "order_id"
value_field = "amount"
[tools.place_order.fields.sku]
pattern = "^[A-Z0-9-]{{1,32}}$"
[tools.place_order.fields.quantity]
minimum = 1
maximum = 100
[tools.place_order.fields.amount]
format = "positive-decimal"
[tools.place_order.venue]
honours_key = "true"
read_view = "lagging"
[tools.place_order.reads]
list_tool = "list_orders"
items_field = "orders"
key_field = "idempotency_key"
id_field = "order_id"
lookup_tool = "get_order"
lookup_argument = "idempotency_key"

[policies.place_order]
max_value = "1000"
"""
        + extra
    )


@pytest.fixture
def make_gateway(tmp_path: Path, shop: Path) -> Iterator[Any]:
    made: list[Gateway] = []

    def make(mode: str = "keyed", **kw: Any) -> Gateway:
        gw = Gateway(parse_gateway(gateway_toml(tmp_path, mode, **kw), "gw.toml"), create=True)
        made.append(gw)
        return gw

    yield make
    for gw in made:
        gw.close()


def orders(state: Path) -> list[dict[str, Any]]:
    return json.loads(state.read_text()) if state.exists() else []


def call(gw: Gateway, *steps: tuple[str, dict[str, Any]], meta: Any = None) -> list[Any]:
    out: list[Any] = []

    async def go() -> None:
        async with Client(build_gateway_server(gw, ALPHA)) as c:
            for name, args in steps:
                res = await c.call_tool(name, args, meta=meta)
                out.append(res)

    anyio.run(go)
    return out


class TestOnBothStores:
    """The gateway's path on SQLite and PostgreSQL (the ledger is the only store it uses)."""

    def test_journal_replay_and_reconcile(
        self, store_factory: Any, tmp_path: Path, shop: Path
    ) -> None:
        """Invariants 1 and 3: one order per operation id; a slow upstream's row is uncertain
        until the reconciler reads the order back through the upstream's lookup tools."""
        text = gateway_toml(tmp_path, "slow", pin=live_pin("slow", "place_order"))
        gw = Gateway(parse_gateway(text, "gw.toml"), store=store_factory())
        try:
            (res,) = call(gw, ("place_order", {"operation_id": "op-s", **ORDER}))
            assert res.structured_content["outcome"] == "uncertain"
            anyio.run(anyio.sleep, 3)
            gw.service.reconcile_now()
            (again,) = call(gw, ("place_order", {"operation_id": "op-s", **ORDER}))
        finally:
            gw.close()
        assert again.structured_content["state"] == "acknowledged"
        assert again.structured_content["replayed"] is True
        assert [o["idempotency_key"] for o in orders(shop)] == ["alpha:op-s"]


class TestToolSurface:
    def test_governed_passthrough_and_hidden_tools(self, make_gateway: Any) -> None:
        """Named read-only tools pass through, the governed one is an action class, every
        other upstream tool is hidden; the key argument is the gateway's to fill."""
        gw = make_gateway()

        async def go() -> dict[str, Any]:
            async with Client(build_gateway_server(gw, ALPHA)) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                hidden = await c.call_tool("cancel_all", {})
                assert hidden.is_error
                assert hidden.structured_content["code"] == "unknown_action_class"
                return tools

        tools = anyio.run(go)
        assert set(tools) == {"place_order", "list_orders", "get_order", "get_operation"}
        schema = tools["place_order"].input_schema
        assert "idempotency_key" not in schema["properties"]
        assert schema["required"][0] == "operation_id"
        assert schema["properties"]["amount"]["type"] == "string"
        assert schema["additionalProperties"] is False
        assert SECRET not in json.dumps([t.model_dump(mode="json") for t in tools.values()])

    def test_upstream_schema_a_strict_core_cannot_read_is_refused_at_start(
        self, tmp_path: Path, shop: Path
    ) -> None:
        """Bad input: free text without a bound is refused, naming the field and the fix."""
        text = gateway_toml(tmp_path).replace(
            '[tools.place_order.fields.sku]\npattern = "^[A-Z0-9-]{1,32}$"\n', ""
        )
        with pytest.raises(ConfigError, match=r"sku.*maxLength.*tighten it"):
            Gateway(parse_gateway(text, "gw.toml"), create=True)

    def test_unreachable_upstream_stops_the_start(self, tmp_path: Path, shop: Path) -> None:
        text = gateway_toml(tmp_path).replace(sys.executable, "/nonexistent/python", 1)
        with pytest.raises(AdapterError, match="upstream shop: cannot connect"):
            Gateway(parse_gateway(text, "gw.toml"), create=True)

    def test_config_errors_name_key_and_line(self, tmp_path: Path) -> None:
        text = gateway_toml(tmp_path).replace('key_argument = "idempotency_key"', "key_argumnt = 1")
        with pytest.raises(ConfigError, match=r"gw.toml:\d+: tools.place_order.key_argumnt"):
            parse_gateway(text, "gw.toml")
        no_reads = gateway_toml(tmp_path).split("[tools.place_order.reads]")[0]
        with pytest.raises(ConfigError, match='read_view = "none"'):
            parse_gateway(no_reads + '\n[policies.place_order]\nmax_value = "1"\n', "gw.toml")


class TestGovernedCalls:
    def test_one_effect_per_operation_id(self, make_gateway: Any, shop: Path) -> None:
        """Invariant 1 through the gateway: a retry is a replay; the upstream sees one order,
        under the operation key (scope:operation_id) the gateway filled in."""
        gw = make_gateway()
        first, again, lookup = call(
            gw,
            ("place_order", {"operation_id": "op-1", **ORDER}),
            ("place_order", {"operation_id": "op-1", **ORDER}),
            ("get_operation", {"operation_id": "op-1"}),
        )
        assert first.structured_content["state"] == "acknowledged"
        assert first.structured_content["outcome"] == "done"
        assert first.structured_content["venue_id"] == "ord-1"
        assert again.structured_content["replayed"] is True
        assert lookup.structured_content["venue_id"] == "ord-1"
        placed = orders(shop)
        assert len(placed) == 1 and placed[0]["idempotency_key"] == "alpha:op-1"
        assert placed[0]["amount"] == "19.9"  # the canonical decimal, as the ledger has it

    def test_changed_payload_under_one_id_is_refused(self, make_gateway: Any, shop: Path) -> None:
        """Invariant 2 through the gateway."""
        gw = make_gateway()
        _, bad = call(
            gw,
            ("place_order", {"operation_id": "op-1", **ORDER}),
            ("place_order", {"operation_id": "op-1", **ORDER, "quantity": 3}),
        )
        assert bad.is_error and bad.structured_content["code"] == "idempotency_conflict"
        assert len(orders(shop)) == 1

    @pytest.mark.parametrize(
        "change,field,reason",
        [
            ({"quantity": "2"}, "quantity", "int_type"),
            ({"amount": 19.9}, "amount", "float_not_allowed"),
            ({"amount": "-1"}, "amount", "not_positive"),
            ({"sku": "widget"}, "sku", "string_pattern_mismatch"),
            ({"idempotency_key": "mine"}, "idempotency_key", "extra_forbidden"),
            ({"operation_id": 7}, "operation_id", "invalid_operation_id"),
        ],
    )
    def test_bad_arguments_never_reach_the_upstream(
        self, make_gateway: Any, shop: Path, change: dict[str, Any], field: str, reason: str
    ) -> None:
        """Invariant 6: only validated effect fields reach the upstream; the model is told
        which field is wrong (no coercion, the key argument is not the model's)."""
        gw = make_gateway()
        (res,) = call(gw, ("place_order", {"operation_id": "op-1", **ORDER, **change}))
        assert res.is_error
        assert res.structured_content["field"] == field
        assert res.structured_content["reason"] == reason
        assert orders(shop) == []

    def test_policy_and_approvals(self, make_gateway: Any, shop: Path) -> None:
        """Deny by default and tiers apply: over max_value is refused; the model is told."""
        gw = make_gateway()
        (res,) = call(gw, ("place_order", {"operation_id": "big", **ORDER, "amount": "5000"}))
        assert res.structured_content["state"] == "rejected"
        assert res.structured_content["outcome"] == "refused"
        assert orders(shop) == []

    def test_kill_switch_holds_the_call(self, make_gateway: Any, shop: Path) -> None:
        """Invariant 7 through the gateway: a killed class sends nothing; the model is told
        the call is held and how to ask again."""
        gw = make_gateway()
        gw.service.operator.kill("place_order", operator="ops", reason="incident")
        (res,) = call(gw, ("place_order", {"operation_id": "op-k", **ORDER}))
        assert res.structured_content["outcome"] == "held"
        assert "same operation id" in res.structured_content["message"]
        assert orders(shop) == []

    def test_duplicate_keys_are_refused_at_the_transport(self, tmp_path: Path, shop: Path) -> None:
        """Bad input: a repeated key in the raw JSON-RPC text is refused over stdio."""
        open_store(f"sqlite:///{tmp_path}/gateway.db", create=True).close()
        config = tmp_path / "gw.toml"
        config.write_text(gateway_toml(tmp_path))
        args = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in ORDER.items() if k != "quantity")
        dup = (
            '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": '
            f'"place_order", "arguments": {{"operation_id": "op-d", {args}, "quantity": 1, '
            '"quantity": 9}}}'
        )
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
        proc = subprocess.Popen(
            [sys.executable, "-m", "effectgate", "gateway", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "EFFECTGATE_AGENT_TOKEN": AGENT_A},
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        for line in (
            json.dumps(init),
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            dup,
        ):
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
        proc.stdin.close()
        proc.wait(timeout=30)
        result = answers[1]["result"]
        assert result["isError"] is True
        assert result["structuredContent"]["reason"] == "duplicate_key"
        assert result["structuredContent"]["field"] == "quantity"
        assert orders(shop) == []


class TestUnknownOutcomes:
    def test_slow_upstream_is_uncertain_then_reconciled(
        self, make_gateway: Any, shop: Path
    ) -> None:
        """Invariant 3: a call that outlives the timeout is uncertain, never failed; the
        reconciler then finds the order through the upstream's own read tools."""
        gw = make_gateway("slow", pin=live_pin("slow", "place_order"))
        (res,) = call(gw, ("place_order", {"operation_id": "op-s", **ORDER}))
        out = res.structured_content
        assert out["state"] == "submitted" and out["outcome"] == "uncertain"
        assert "did not answer" in out["cause"]
        anyio.run(anyio.sleep, 3)  # the upstream finishes its sleep
        report = gw.service.reconcile_now()
        assert report.confirmed == 1
        op = gw.service.lookup(ALPHA, "op-s")
        assert op.state.value == "acknowledged" and op.venue_id == "ord-1"

    def test_upstream_dying_mid_call(self, make_gateway: Any, shop: Path) -> None:
        """Invariant 3: the upstream died after recording the order, before answering: the
        row is uncertain, the next call reconnects, the reconciler confirms the first."""
        gw = make_gateway("dying", pin=live_pin("dying", "place_order"))
        first, second = call(
            gw,
            ("place_order", {"operation_id": "op-d1", **ORDER}),
            ("place_order", {"operation_id": "op-d2", **ORDER}),
        )
        assert first.structured_content["outcome"] == "uncertain"
        assert "broke off" in first.structured_content["cause"]
        assert second.structured_content["state"] == "acknowledged"
        assert gw.links["shop"].connections == 2
        gw.service.reconcile_now()
        assert gw.service.lookup(ALPHA, "op-d1").state.value == "acknowledged"
        assert len(orders(shop)) == 2

    def test_orphan_at_the_upstream_is_reported(self, make_gateway: Any, shop: Path) -> None:
        """Invariant 5: an order made at the upstream outside the gateway is an orphan."""
        gw = make_gateway()
        call(gw, ("place_order", {"operation_id": "op-1", **ORDER}))
        placed = orders(shop)
        placed.append({**placed[0], "order_id": "ord-x", "idempotency_key": None})
        shop.write_text(json.dumps(placed))
        report = gw.service.reconcile_now()
        kinds = {d[0] for d in report.new_divergences}
        assert "orphan" in kinds


class TestUnkeyedUpstream:
    def test_no_key_no_read_view(self, make_gateway: Any, shop: Path) -> None:
        """An upstream that takes no key: journalled and sent once per operation id; its
        contract says it cannot be read (read_view none), and replays send nothing."""
        gw = make_gateway("unkeyed")
        note = {"to": "ops@example.com", "text": "hello"}
        first, again = call(
            gw,
            ("send_note", {"operation_id": "n-1", **note}),
            ("send_note", {"operation_id": "n-1", **note}),
        )
        assert first.structured_content["state"] == "acknowledged"
        assert again.structured_content["replayed"] is True
        assert len(orders(shop)) == 1
        contract = gw.service.config.registry.get("send_note").venue
        assert contract.read_view.value == "none" and contract.honours_key.value == "false"


class TestSchemaDrift:
    def test_drifted_tool_is_held_and_audited(self, make_gateway: Any, shop: Path) -> None:
        """A schema that no longer matches its pin: the tool is not served, a call is refused
        before anything is journalled or sent, and the hold is in the audit log."""
        gw = make_gateway("drifted")  # pinned to the keyed schema
        assert set(gw.held()) == {"place_order"}

        async def go() -> tuple[set[str], Any]:
            async with Client(build_gateway_server(gw, ALPHA)) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                res = await c.call_tool("place_order", {"operation_id": "op-1", **ORDER})
                return names, res

        names, res = anyio.run(go)
        assert "place_order" not in names and "list_orders" in names
        assert res.is_error and res.structured_content["code"] == "upstream_schema_held"
        assert orders(shop) == []
        kinds = [e.kind for e in gw.service.store.iter_audit()]
        assert kinds.count("gateway_schema_held") == 1

    def test_upstream_upgraded_behind_a_reconnect(self, make_gateway: Any, shop: Path) -> None:
        """A restarted upstream serving a new schema is checked on the new connection before
        the waiting call is sent: that call is not sent (failed, with the gateway's proof), the
        tool is held, and a recheck finds nothing new to hold."""
        gw = make_gateway("dying", pin=live_pin("dying", "place_order"))
        (first,) = call(gw, ("place_order", {"operation_id": "op-1", **ORDER}))
        assert first.structured_content["outcome"] == "uncertain"
        shop.with_suffix(".upgrade").write_text("1")
        second, third = call(
            gw,
            ("place_order", {"operation_id": "op-2", **ORDER}),
            ("place_order", {"operation_id": "op-3", **ORDER}),
        )
        assert second.structured_content["state"] == "failed"
        assert "not sent" in json.dumps(second.structured_content)
        assert third.is_error and third.structured_content["code"] == "upstream_schema_held"
        assert len(orders(shop)) == 1  # the first, recorded before the upstream died
        gw.recheck()
        kinds = [e.kind for e in gw.service.store.iter_audit()]
        assert kinds.count("gateway_schema_held") == 1

    def test_operator_accepts_the_new_schema(self, tmp_path: Path, shop: Path) -> None:
        """`gateway-accept`: only the digest the upstream serves now, audited, re-pinned."""
        config = tmp_path / "gw.toml"
        config.write_text(gateway_toml(tmp_path, "drifted", pin=live_pin("keyed", "place_order")))
        open_store(f"sqlite:///{tmp_path}/gateway.db", create=True).close()
        cli = [sys.executable, "-m", "effectgate"]
        env = {k: v for k, v in os.environ.items() if k != "EFFECTGATE_OPERATOR_TOKEN"}
        shown = subprocess.run(
            [*cli, "gateway-schemas", "--config", str(config), "--json"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert shown.returncode == 1, shown.stderr
        (row,) = json.loads(shown.stdout)
        assert row["status"] == "drifted"
        wrong = subprocess.run(
            [*cli, "gateway-accept", "--config", str(config), "--tool", "place_order",
             "--sha256", "0" * 64],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert wrong.returncode == 2
        ok = subprocess.run(
            [*cli, "gateway-accept", "--config", str(config), "--tool", "place_order",
             "--sha256", row["live"], "--reason", "v2 adds currency"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert row["live"] in config.read_text() and row["pinned"] not in config.read_text()
        store = open_store(f"sqlite:///{tmp_path}/gateway.db")
        try:
            (entry,) = [e for e in store.iter_audit() if e.kind == "gateway_schema_accepted"]
        finally:
            store.close()
        assert entry.detail["accepted_sha256"] == row["live"]
        assert entry.detail["reason"] == "v2 adds currency"


class TestOperationIdModes:
    def test_meta_pinned_ids(self, make_gateway: Any, shop: Path) -> None:
        """operation_id = "meta": the host's pin is the id; an argument is refused."""
        gw = make_gateway(id_mode="meta")
        pin = {"io.effectgate/operation_id": "host-1"}
        ok, again = call(gw, ("place_order", ORDER), ("place_order", ORDER), meta=pin)
        assert ok.structured_content["operation_id"] == "host-1"
        assert again.structured_content["replayed"] is True
        (missing,) = call(gw, ("place_order", ORDER))
        assert missing.structured_content["reason"] == "missing"
        assert len(orders(shop)) == 1

    def test_minted_ids_need_the_repeat_breaker(self, tmp_path: Path, shop: Path) -> None:
        text = gateway_toml(tmp_path, id_mode="minted")
        with pytest.raises(ConfigError, match="max_repeats"):
            Gateway(parse_gateway(text, "gw.toml"), create=True)
        guarded = gateway_toml(
            tmp_path, id_mode="minted", extra="[controls.place_order]\nmax_repeats = 2\n"
        )
        gw = Gateway(parse_gateway(guarded, "gw.toml"), create=True)
        try:
            a, b = call(gw, ("place_order", ORDER), ("place_order", ORDER))
            # Each request is a new action (two orders): the docs and description say so.
            assert a.structured_content["operation_id"] != b.structured_content["operation_id"]
            assert len(orders(shop)) == 2
            (c,) = call(gw, ("place_order", ORDER))
            # A third id for one payload: the repeat signal trips the breaker, nothing sent.
            assert c.structured_content["outcome"] == "held"
            assert len(orders(shop)) == 2
        finally:
            gw.close()


class TestTransports:
    def test_stdio_gateway_command(self, tmp_path: Path, shop: Path) -> None:
        """`effectgate gateway` over stdio with the SDK's stdio client."""
        open_store(f"sqlite:///{tmp_path}/gateway.db", create=True).close()
        config = tmp_path / "gw.toml"
        config.write_text(gateway_toml(tmp_path))
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "effectgate", "gateway", "--config", str(config)],
            env={**os.environ, "EFFECTGATE_AGENT_TOKEN": AGENT_A},
            cwd=str(tmp_path),
        )

        async def go() -> None:
            async with Client(params) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert "place_order" in names and "cancel_all" not in names
                res = await c.call_tool("place_order", {"operation_id": "op-1", **ORDER})
                assert res.structured_content["state"] == "acknowledged"
                listed = await c.call_tool("list_orders", {})
                assert listed.structured_content["orders"][0]["order_id"] == "ord-1"

        anyio.run(go)
        assert len(orders(shop)) == 1

    def test_streamable_http_with_an_http_upstream(
        self, make_gateway: Any, tmp_path: Path, shop: Path
    ) -> None:
        """The gateway over streamable HTTP (agent token), fronting an HTTP upstream."""
        from servicekit import free_port

        port = free_port()
        upstream = subprocess.Popen(
            [sys.executable, UPSTREAM, "keyed", "--http", str(port)],
            env={**os.environ, "SHOP_API_KEY": SECRET, "SHOP_STATE": str(shop)},
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        try:
            _wait_port(port)
            text = gateway_toml(tmp_path).replace(
                f'command = "{sys.executable}"\nargs = ["{UPSTREAM}", "keyed"]\n'
                'env = { SHOP_API_KEY = "GW_SHOP_KEY", SHOP_STATE = "GW_SHOP_STATE", '
                'SHOP_DELAY = "GW_SHOP_DELAY" }\n',
                f'url = "http://127.0.0.1:{port}/mcp"\ncredential_env = "GW_SHOP_KEY"\n',
            )
            gw = Gateway(parse_gateway(text, "gw.toml"), create=True)
            try:
                with uvicorn_thread(gateway_app(gw)) as url:

                    async def go() -> None:
                        async with httpx2.AsyncClient(
                            headers={"Authorization": f"Bearer {AGENT_A}"}, timeout=20
                        ) as http:
                            async with Client(
                                streamable_http_client(f"{url}/mcp", http_client=http)
                            ) as c:
                                res = await c.call_tool(
                                    "place_order", {"operation_id": "op-h", **ORDER}
                                )
                                assert res.structured_content["state"] == "acknowledged"
                                assert res.structured_content["scope"] == "alpha"

                    anyio.run(go)
            finally:
                gw.close()
        finally:
            upstream.terminate()
            upstream.wait(timeout=10)
        assert [o["idempotency_key"] for o in orders(shop)] == ["alpha:op-h"]


def _wait_port(port: int) -> None:
    import socket
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"upstream did not listen on {port}")


class TestOperatorCommands:
    def test_cli_controls_take_the_gateway_config(self, tmp_path: Path, shop: Path) -> None:
        """Invariant 7: `effectgate kill on` with the gateway's config stops its tool."""
        open_store(f"sqlite:///{tmp_path}/gateway.db", create=True).close()
        config = tmp_path / "gw.toml"
        config.write_text(gateway_toml(tmp_path))
        env = {k: v for k, v in os.environ.items() if k != "EFFECTGATE_OPERATOR_TOKEN"}
        killed = subprocess.run(
            [sys.executable, "-m", "effectgate", "kill", "on", "place_order",
             "--config", str(config), "--reason", "incident"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert killed.returncode == 0, killed.stderr
        gw = Gateway(parse_gateway(config.read_text(), "gw.toml"))
        try:
            (res,) = call(gw, ("place_order", {"operation_id": "op-k", **ORDER}))
        finally:
            gw.close()
        assert res.structured_content["outcome"] == "held"
        assert orders(shop) == []


class TestOverheadBench:
    def test_bench_runs_both_sides(self) -> None:
        """`python -m effectgate.bench.gateway_compare` measures both sides (speed is never
        asserted; that every gateway call was acknowledged is, inside the bench)."""
        from effectgate.bench.gateway_compare import run

        out = run(5, None, 1)
        assert out["calls_per_round"] == 5
        assert out["direct"]["calls_per_s"] > 0 and out["gateway"]["calls_per_s"] > 0
