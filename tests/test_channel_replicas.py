"""Approval announcements with several replicas on one store (issue 18, docs/authority.md), on
every store engine: each approval round is announced once per channel, whichever replica's
pass gets there first; a failed delivery is retried (by any replica) until the tool accepts it.

Invariant (docs/authority.md, "Channels"; DESIGN.md invariant 1's method): the store decides
who announces, by a compare-and-set on a claim with a lease, not an in-process check; every
attempt is a chained audit entry written with its outcome.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate._service._channels import ApprovalWebhook, ChannelConfig
from effectgate.store.roles import Store
from servicekit import AGENT_A, ORDER, bearer, config_text

SECRET = "s3cret-chatops-0123456789"


class _SlowSink(BaseHTTPRequestHandler):
    """A chat tool that takes its time (so passes overlap) and may fail the first posts."""

    received: ClassVar[list[bytes]] = []
    fail_first: ClassVar[int] = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(0.15)
        with self.lock:
            failing = _SlowSink.fail_first > 0
            if failing:
                _SlowSink.fail_first -= 1
            else:
                _SlowSink.received.append(body)
        self.send_response(500 if failing else 204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sink() -> Iterator[str]:
    _SlowSink.received, _SlowSink.fail_first = [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowSink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()


def _awaiting(svc: Service) -> None:
    with TestClient(create_app(svc, mcp_http=False)) as client:
        r = client.post(
            "/v1/actions/submit_order",
            json={**ORDER, "quantity": "9.5"},
            headers={**bearer(AGENT_A), "Idempotency-Key": "op-1"},
        )
        assert r.json()["state"] == "awaiting_approval", r.text


def _announced(store: Store) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in store.iter_audit() if e.kind == "approval_announced"]


def test_two_services_announce_a_request_once(
    tmp_path: Path, store_factory: Any, sink: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EG_TEST_CHATOPS_SECRET", SECRET)
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + f"""
[channels.chatops]
url = "{sink}"
secret_env = "EG_TEST_CHATOPS_SECRET"
announce_every = 0.02
"""  # fmt: skip
    stores = [store_factory(), store_factory()]
    services = [Service(parse_config(text, "t.toml"), store=s) for s in stores]
    try:
        _awaiting(services[0])
        deadline = time.monotonic() + 10
        while not _SlowSink.received:
            assert time.monotonic() < deadline, "nothing was announced"
            time.sleep(0.02)
        time.sleep(0.8)  # dozens more passes of both replicas
        assert len(_SlowSink.received) == 1
        assert json.loads(_SlowSink.received[0])["operation_id"] == "op-1"
        [entry] = _announced(stores[1])
        assert entry["ok"] is True and entry["channel"] == "chatops"
    finally:
        for svc in services:
            svc.close()


def test_racing_passes_and_a_failed_delivery(
    tmp_path: Path, store_factory: Any, sink: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas' passes race; the first delivery fails (500): it is audited, its lease
    released, and a later pass, whichever replica's, delivers it: once."""
    monkeypatch.setenv("EG_TEST_CHATOPS_SECRET", SECRET)
    svc = Service(
        parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db"), "t.toml"),
        store=store_factory(),
    )
    try:
        _awaiting(svc)
    finally:
        svc.close()
    _SlowSink.fail_first = 1
    channel = ChannelConfig("chatops", SECRET.encode(), sink, 300.0, {})
    stores = [store_factory(), store_factory()]
    hooks = [ApprovalWebhook(channel, s) for s in stores]
    try:
        for _ in range(3):
            barrier = threading.Barrier(2)
            sent: list[int] = []

            def run(hook: ApprovalWebhook) -> None:
                barrier.wait()
                sent.append(hook.poll())

            threads = [threading.Thread(target=run, args=(h,)) for h in hooks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert len(_SlowSink.received) == 1
        outcomes = [(e["ok"], e["status"]) for e in _announced(stores[0])]
        assert outcomes == [(False, 500), (True, 204)]
    finally:
        for h in hooks:
            h.close()


def test_a_claim_changes_hands_only_after_its_lease(store: Store) -> None:
    key = ("chatops", "alpha", "op-1", 5000.0)
    assert store.claim_announcement(*key, holder="a", now=1.0, lease=30.0)
    assert not store.claim_announcement(*key, holder="b", now=2.0, lease=30.0)  # a holds it
    assert store.claim_announcement(*key, holder="b", now=31.0, lease=30.0)  # a's lease ran out
    # a, late, cannot mark b's claim delivered; b can, and then no one claims it again.
    store.finish_announcement(*key, holder="a", delivered=True, detail={}, now=32.0)
    assert not store.claim_announcement(*key, holder="c", now=40.0, lease=30.0)  # b holds it
    store.finish_announcement(*key, holder="b", delivered=True, detail={}, now=33.0)
    assert not store.claim_announcement(*key, holder="c", now=1000.0, lease=30.0)
    # Another round of the same operation is announced anew.
    assert store.claim_announcement("chatops", "alpha", "op-1", 9000.0, holder="c", now=1000.0,
                                    lease=30.0)  # fmt: skip
