"""Signed receipts through the doors (issue 41 part 2): ``effectgate receipt keygen|get|verify``
round trips, ``GET /v1/operations/{id}/receipt`` under an agent token, and the MCP
``get_receipt`` tool through the official SDK's real client. On every store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler
from effectgate._doors.cli.main import app
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.receipts import RECEIPT_TOOL
from effectgate._doors.mcp.server import build_server
from effectgate._evidence.receipt_signing import RECEIPT_KEY_ENV, load_public_keys, verify_receipt
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, ReceiptInvalid
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.testing import ManualClock
from servicekit import AGENT_A, AGENT_B, ORDER, bearer, config_text


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", RECEIPT_KEY_ENV: ""})


def keygen(folder: Path) -> tuple[Path, Path]:
    out = run("receipt", "keygen", "--out", str(folder))
    assert out.exit_code == 0, out.output
    kid = re.search(r"key id ([0-9a-f]{16})", out.output)
    assert kid is not None
    return folder / f"receipt-{kid[1]}.pem", folder / f"receipt-{kid[1]}.pub.pem"


@pytest.fixture
def ledger(store_factory: Any) -> Iterator[tuple[str, PaperVenue, Reconciler]]:
    """A ledger with op-1 acknowledged and op-wait awaiting approval; its URL."""
    store = store_factory()
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    registry = default_registry()
    policy = PolicySet({"submit_order": LimitPolicy(approve_above=Decimal("900"))})
    gate = Gate(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, policy=policy,
        clock=clock,
    )  # fmt: skip
    gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
    gate.submit("submit_order", "op-wait", dict(EXAMPLE_ORDER, quantity="9.5"))
    rec = Reconciler(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    yield str(store_factory.url), venue, rec


class TestCli:
    def test_keygen_get_verify_round_trip(self, ledger: Any, tmp_path: Path) -> None:
        url, _, _ = ledger
        private, public = keygen(tmp_path / "keys")
        out = tmp_path / "r.json"
        key = ("--store", url, "--key", str(private))
        got = run("receipt", "get", "op-1", *key, "--out", str(out))
        assert got.exit_code == 0, got.output
        assert "acknowledged" in got.output
        ok = run("receipt", "verify", str(out), "--public-key", str(public))
        assert ok.exit_code == 0, ok.output
        assert "VALID" in ok.output and "default:op-1 acknowledged" in ok.output
        receipt = json.loads(out.read_text())
        assert verify_receipt(receipt, load_public_keys([public])).op_key == "default:op-1"

    def test_a_tampered_file_or_a_wrong_key_exits_1_saying_why(
        self, ledger: Any, tmp_path: Path
    ) -> None:
        url, _, _ = ledger
        private, public = keygen(tmp_path / "keys")
        _, other = keygen(tmp_path / "other")
        out = tmp_path / "r.json"
        run("receipt", "get", "op-1", "--store", url, "--key", str(private), "--out", str(out))
        wrong = run("receipt", "verify", str(out), "--public-key", str(other))
        assert wrong.exit_code == 1 and "INVALID" in wrong.output
        assert "unknown_key" in wrong.output
        receipt = json.loads(out.read_text())
        receipt["statement"]["venue_id"] = "V-424242"
        out.write_text(json.dumps(receipt))
        bad = run("receipt", "verify", str(out), "--public-key", str(public), "--json")
        assert bad.exit_code == 1 and "changed after signing" in bad.output
        assert '"reason": "bad_signature"' in bad.output

    def test_superseded_receipts_are_reported(self, ledger: Any, tmp_path: Path) -> None:
        url, venue, rec = ledger
        private, public = keygen(tmp_path / "keys")
        key = ("--store", url, "--key", str(private))
        first, both = tmp_path / "first.json", tmp_path / "all.json"
        run("receipt", "get", "op-1", *key, "--out", str(first))
        venue.set_honour_key(False)
        venue.inject_record("default:op-1")
        rec.sweep()
        assert run("receipt", "get", "op-1", *key, "--all", "--out", str(both)).exit_code == 0
        out = run("receipt", "verify", str(first), str(both), "--public-key", str(public))
        assert out.exit_code == 0, out.output
        assert "SUPERSEDED by" in out.output and "contradicted" in out.output
        shown = json.loads(
            run("receipt", "verify", str(both), "--public-key", str(public), "--json").output
        )
        assert [r["superseded_by"] is not None for r in shown] == [True, False]
        assert shown[1]["supersedes"] == json.loads(first.read_text())["receipt_id"]

    def test_a_non_final_operation_or_no_key_exits_nonzero(
        self, ledger: Any, tmp_path: Path
    ) -> None:
        url, _, _ = ledger
        private, _ = keygen(tmp_path / "keys")
        wait = run("receipt", "get", "op-wait", "--store", url, "--key", str(private))
        assert wait.exit_code == 1 and "not final" in wait.output
        nokey = run("receipt", "get", "op-1", "--store", url)
        assert nokey.exit_code == 1 and "no receipt signing key" in nokey.output
        junk = tmp_path / "junk.pem"
        junk.write_text("x")
        assert run("receipt", "get", "op-1", "--store", url, "--key", str(junk)).exit_code == 2


class TestHttp:
    @pytest.fixture
    def service(self, store_factory: Any, tmp_path: Path) -> Iterator[Service]:
        private, self.public = keygen(tmp_path / "keys")
        text = config_text(store_url=store_factory.url)
        text += f'\n[receipts]\nkey_file = "{private}"\n'
        cfg = parse_config(text, "test.toml")
        svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
        yield svc
        svc.close()

    def submit(self, client: TestClient, op: str, **changes: str) -> None:
        r = client.post(
            "/v1/actions/submit_order",
            content=json.dumps({**ORDER, **changes}).encode(),
            headers=bearer(AGENT_A, **{"Content-Type": "application/json", "Idempotency-Key": op}),
        )
        assert r.status_code == 201, r.text

    def test_the_receipt_of_a_final_operation(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            self.submit(client, "op-1")
            r = client.get("/v1/operations/op-1/receipt", headers=bearer(AGENT_A))
            assert r.status_code == 200, r.text
            assert r.headers["cache-control"] == "no-store"
            verified = verify_receipt(r.json(), load_public_keys([self.public]))
            assert (verified.op_key, verified.state) == ("alpha:op-1", "acknowledged")
            every = client.get("/v1/operations/op-1/receipt?history=true", headers=bearer(AGENT_A))
            assert [x["receipt_id"] for x in every.json()["receipts"]] == [verified.receipt_id]

    def test_another_tenant_not_final_and_no_token(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            self.submit(client, "op-1")
            self.submit(client, "op-wait", quantity="9.5")
            other = client.get("/v1/operations/op-1/receipt", headers=bearer(AGENT_B))
            assert other.status_code == 404 and other.json()["code"] == "operation_not_found"
            wait = client.get("/v1/operations/op-wait/receipt", headers=bearer(AGENT_A))
            assert wait.status_code == 409
            assert (wait.json()["code"], wait.json()["reason"]) == (
                "receipt_unavailable", "not_final",
            )  # fmt: skip
            assert client.get("/v1/operations/op-1/receipt").status_code == 401

    def test_without_a_key_the_receipt_is_unavailable(self, store_factory: Any) -> None:
        cfg = parse_config(config_text(store_url=store_factory.url), "test.toml")
        svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                self.submit(client, "op-1")
                r = client.get("/v1/operations/op-1/receipt", headers=bearer(AGENT_A))
                assert r.status_code == 409 and r.json()["reason"] == "no_signing_key"
        finally:
            svc.close()


ALPHA = Principal("alpha", "agent", "alpha")
BETA = Principal("beta", "agent", "beta")


def _keyed_service(store_url: str, private: Path | None) -> Service:
    text = config_text(store_url=store_url)
    if private is not None:
        text += f'\n[receipts]\nkey_file = "{private}"\n'
    return Service(parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(PaperVenue())})


async def _tool(c: Client, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    out = await c.call_tool(name, args)
    body = out.structured_content
    assert isinstance(body, dict), out
    return bool(out.is_error), body


class TestMcp:
    """Invariant 8, carried outside the ledger: ``get_receipt`` over MCP hands out the same
    signed receipt as the HTTP route, naming the audit head that covers the final entry; it
    verifies offline with the public key alone and an edited field is detected. Another
    tenant's operation is not found."""

    def test_the_receipt_tool_signs_what_anyone_can_verify(
        self, store_factory: Any, tmp_path: Path
    ) -> None:
        private, public = keygen(tmp_path / "keys")
        svc = _keyed_service(store_factory.url, private)
        try:

            async def go() -> None:
                async with Client(build_server(svc, ALPHA)) as c:
                    tools = {t.name: t for t in (await c.list_tools()).tools}
                    assert tools[RECEIPT_TOOL].annotations is not None
                    assert tools[RECEIPT_TOOL].annotations.read_only_hint is True
                    assert tools[RECEIPT_TOOL].input_schema["required"] == ["operation_id"]
                    done = await c.call_tool("submit_order", {"operation_id": "op-1", **ORDER})
                    assert not done.is_error, done
                    err, receipt = await _tool(c, RECEIPT_TOOL, {"operation_id": "op-1"})
                    assert not err, receipt
                    verified = verify_receipt(receipt, load_public_keys([public]))
                    assert (verified.op_key, verified.state) == ("alpha:op-1", "acknowledged")
                    err, every = await _tool(
                        c, RECEIPT_TOOL, {"operation_id": "op-1", "history": True}
                    )
                    assert not err
                    assert [r["receipt_id"] for r in every["receipts"]] == [verified.receipt_id]
                    tampered = json.loads(json.dumps(receipt))
                    tampered["statement"]["state"] = "failed"
                    with pytest.raises(ReceiptInvalid):
                        verify_receipt(tampered, load_public_keys([public]))
                async with Client(build_server(svc, BETA)) as other:
                    err, body = await _tool(other, RECEIPT_TOOL, {"operation_id": "op-1"})
                    assert err and body["code"] == "operation_not_found"

            anyio.run(go)
        finally:
            svc.close()

    def test_refusals_are_error_results_naming_why(
        self, store_factory: Any, tmp_path: Path
    ) -> None:
        private, _ = keygen(tmp_path / "keys")
        keyed = _keyed_service(store_factory.url, private)
        try:

            async def go() -> None:
                async with Client(build_server(keyed, ALPHA)) as c:
                    wait = {"operation_id": "op-wait", **ORDER, "quantity": "9.5"}
                    assert not (await c.call_tool("submit_order", wait)).is_error
                    err, body = await _tool(c, RECEIPT_TOOL, {"operation_id": "op-wait"})
                    assert err and (body["code"], body["reason"]) == (
                        "receipt_unavailable", "not_final",
                    )  # fmt: skip
                    for bad, field in (
                        ({}, "operation_id"),
                        ({"operation_id": "op-wait", "history": "yes"}, "history"),
                        ({"operation_id": "op-wait", "extra": 1}, "extra"),
                    ):
                        err, body = await _tool(c, RECEIPT_TOOL, bad)
                        assert err and body["code"] == "invalid_intent"
                        assert body["field"] == field

            anyio.run(go)
        finally:
            keyed.close()
        bare = _keyed_service(store_factory.url, None)
        try:

            async def unkeyed() -> None:
                async with Client(build_server(bare, ALPHA)) as c:
                    done = await c.call_tool("submit_order", {"operation_id": "op-2", **ORDER})
                    assert not done.is_error, done
                    err, body = await _tool(c, RECEIPT_TOOL, {"operation_id": "op-2"})
                    assert err and body["reason"] == "no_signing_key"

            anyio.run(unkeyed)
        finally:
            bare.close()


def test_the_config_names_a_key_file_that_exists(tmp_path: Path) -> None:
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db")
    with pytest.raises(ConfigError, match=r"receipts\.key_file"):
        parse_config(text + '\n[receipts]\nkey_file = "missing.pem"\n', "t.toml", base_dir=tmp_path)
