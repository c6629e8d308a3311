"""Run calls at the front doors: the harness routes, the operators' seal and snapshot routes, the
``Effectgate-Run-Call`` header and the MCP ``_meta`` key (issue 13), on every store."""

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

from effectgate import verify_run_snapshot
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.server import build_server
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from runkit import digest, tool_call
from servicekit import AGENT_A, OPERATOR, ORDER, bearer, config_text, uvicorn_thread

SCOPE = "alpha"


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


@pytest.fixture
def harness(store: Store) -> str:
    return store.create_principal("runner", "harness", SCOPE, created_by="ops", now=1.0).token


def call_body(slot: str, kind: str = "tool") -> dict[str, Any]:
    body: dict[str, Any] = {
        "slot": slot,
        "call_id": f"{slot}-c1",
        "kind": kind,
        "request_digest": digest(slot),
        "request_bytes": 10,
    }
    if kind == "tool":
        body["tool"] = "place_order"
    else:
        body |= {"provider": "acme-llm", "model": "acme-large-2"}
    return body


def propose(client: Any, key: str, token: str, run_call: str | None = None) -> Any:
    headers = bearer(token, **{"Idempotency-Key": key, "Content-Type": "application/json"})
    if run_call is not None:
        headers["Effectgate-Run-Call"] = run_call
    return client.post(
        "/v1/actions/submit_order", content=json.dumps(ORDER).encode(), headers=headers
    )


class TestHarnessRoutes:
    def test_record_replay_conflict_and_completion(self, client: TestClient, harness: str) -> None:
        url = "/v1/runs/run-1/calls"
        first = client.post(url, json=call_body("t-1"), headers=bearer(harness))
        assert first.status_code == 201, first.text
        assert first.json()["scope"] == SCOPE
        assert client.post(url, json=call_body("t-1"), headers=bearer(harness)).status_code == 200
        changed = {**call_body("t-1"), "call_id": "other"}
        r = client.post(url, json=changed, headers=bearer(harness))
        assert r.status_code == 409 and r.json()["code"] == "run_call_conflict"
        done = {"call_id": "t-1-c1", "result_digest": digest("r"), "result_bytes": 1}
        put = f"{url}/t-1/completion"
        assert client.put(put, json=done, headers=bearer(harness)).status_code == 201
        assert client.put(put, json=done, headers=bearer(harness)).status_code == 200
        other = {**done, "result_bytes": 2}
        assert client.put(put, json=other, headers=bearer(harness)).status_code == 409
        page = client.get(f"{url}?limit=1", headers=bearer(harness)).json()
        assert [c["call"]["slot"] for c in page["calls"]] == ["t-1"]

    def test_bad_bodies_are_400_and_agents_cannot_record(
        self, client: TestClient, harness: str
    ) -> None:
        url = "/v1/runs/run-1/calls"
        bad = {**call_body("t-1"), "request_digest": "nothex"}
        r = client.post(url, json=bad, headers=bearer(harness))
        assert r.status_code == 400 and r.json()["code"] == "invalid_run_call"
        extra = {**call_body("t-1"), "prompt": "the bytes"}
        assert client.post(url, json=extra, headers=bearer(harness)).status_code == 400
        r = client.post(url, json=call_body("t-1"), headers=bearer(AGENT_A))
        assert r.status_code == 403, "the model's credential never records a call"


class TestBindingAtTheDoors:
    def test_the_header_binds_and_a_sealed_run_refuses(
        self, client: TestClient, harness: str, store: Store
    ) -> None:
        client.post("/v1/runs/run-1/calls", json=call_body("t-1"), headers=bearer(harness))
        ok = propose(client, "op-1", harness, "run-1/t-1/t-1-c1")
        assert ok.status_code == 201, ok.text
        assert store.run_binding(SCOPE, "op-1") is not None
        wrong = propose(client, "op-2", harness, "run-1/t-9/x")
        assert wrong.status_code == 404 and wrong.json()["code"] == "run_call_not_found"
        malformed = propose(client, "op-3", harness, "run-1/t-1")
        assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_run_call"
        sealed = client.post(
            f"/v1/admin/runs/{SCOPE}/run-1/seal", json={"reason": "done"}, headers=bearer(OPERATOR)
        )
        assert sealed.status_code == 200 and sealed.json()["actor"] == "ops"
        replay = propose(client, "op-1", harness, "run-1/t-1/t-1-c1")
        assert replay.status_code == 409 and replay.json()["code"] == "run_sealed"
        assert replay.json()["operation"]["state"] == "acknowledged"

    def test_mcp_meta_binds(self, service: Service, store: Store) -> None:
        store.record_run_call("alpha", tool_call("t-1"), now=1.0, actor="runner")
        agent = service.tokens.from_token(AGENT_A)

        async def go() -> None:
            async with Client(build_server(service, lambda: agent)) as c:
                meta = {"io.effectgate/run_call": {"run_id": "run-1", "slot": "t-1",
                                                   "call_id": "t-1-c1"}}  # fmt: skip
                ok = await c.call_tool("submit_order", {"operation_id": "op-m", **ORDER}, meta=meta)
                assert not ok.is_error, ok.structured_content
                bad = await c.call_tool(
                    "submit_order",
                    {"operation_id": "op-n", **ORDER},
                    meta={"io.effectgate/run_call": "run-1"},
                )
                assert bad.is_error and bad.structured_content["code"] == "invalid_run_call"

        anyio.run(go)
        assert store.run_binding("alpha", "op-m") is not None
        assert store.get("alpha", "op-n") is None


class TestOperatorRoutesUnderARealServer:
    def test_list_seal_snapshot_and_verify(
        self, tmp_path: Path, venue: PaperVenue, store: Store, harness: str
    ) -> None:
        svc = make(tmp_path, store, venue)
        op = bearer(OPERATOR)
        try:
            with uvicorn_thread(create_app(svc, mcp_http=False)) as url:
                httpx.post(f"{url}/v1/runs/run-1/calls", json=call_body("m-1", "model"),
                           headers=bearer(harness))  # fmt: skip
                runs = httpx.get(f"{url}/v1/admin/runs?sealed=false", headers=op).json()
                assert [r["run_id"] for r in runs] == ["run-1"]
                early = httpx.post(f"{url}/v1/admin/runs/{SCOPE}/run-1/snapshot", headers=op)
                assert early.status_code == 409 and early.json()["code"] == "run_not_sealed"
                no_reason = httpx.post(
                    f"{url}/v1/admin/runs/{SCOPE}/run-1/seal", json={}, headers=op
                )
                assert no_reason.status_code == 400
                seal = httpx.post(
                    f"{url}/v1/admin/runs/{SCOPE}/run-1/seal", json={"reason": "end"}, headers=op
                )
                assert seal.status_code == 200, seal.text
                snap = httpx.post(f"{url}/v1/admin/runs/{SCOPE}/run-1/snapshot", headers=op)
                assert snap.status_code == 201
                digest_ = snap.headers["Effectgate-Snapshot-Digest"]
                assert verify_run_snapshot(snap.content)["digest"] == digest_
                kept = httpx.get(
                    f"{url}/v1/admin/runs/{SCOPE}/run-1/snapshots/{digest_}", headers=op
                )
                assert kept.content == snap.content
                shown = httpx.get(f"{url}/v1/admin/runs/{SCOPE}/run-1", headers=op).json()
                assert shown["seal"]["reason"] == "end" and len(shown["snapshots"]) == 1
                denied = httpx.post(
                    f"{url}/v1/admin/runs/{SCOPE}/run-1/seal",
                    json={"reason": "x"},
                    headers=bearer(harness),
                )
                assert denied.status_code == 403, "seals need an operator"
        finally:
            svc.close()


class TestMetrics:
    def test_open_runs_and_unresolved_provider_calls(
        self, client: TestClient, harness: str
    ) -> None:
        client.post("/v1/runs/run-1/calls", json=call_body("m-1", "model"), headers=bearer(harness))
        client.post("/v1/runs/run-2/calls", json=call_body("t-1"), headers=bearer(harness))
        text = client.get("/metrics", headers=bearer(OPERATOR)).text
        assert "\neffectgate_runs_open 2.0" in text
        assert "\neffectgate_provider_calls_unresolved 1.0" in text
        client.post(
            f"/v1/admin/runs/{SCOPE}/run-2/seal", json={"reason": "end"}, headers=bearer(OPERATOR)
        )
        assert "\neffectgate_runs_open 1.0" in client.get("/metrics", headers=bearer(OPERATOR)).text
