"""A break-glass grant is loud when *used*, not only when made (issue 18, docs/authority.md).

Invariant (docs/authority.md, "Delegated authority"): every dispatch a break-glass grant
authorises writes a ``grant_break_glass_used`` audit entry on the operation in the transaction
that writes ``submitted`` (DESIGN.md invariant 8: chained, tamper-evident), records a
``break-glass-use`` alert and hands it to the alert sink after the commit; a dispatch that does
not commit (held by the kill switch) leaves neither. On every store engine.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from fastapi.testclient import TestClient

from effectgate import Gate, LimitPolicy, Operator, PolicySet
from effectgate._core.controls import Alert
from effectgate._core.grants import parse_spec
from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._doors.http.app import create_app
from effectgate._evidence.audit import verify_store
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.break_glass import ALERT_KIND, AUDIT_KIND, BreakGlassUses
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import AGENT_A, ORDER, bearer, config_text

NOW = 1000.0


def loud_gate(store: Store, sink: list[Alert]) -> tuple[Gate, PaperVenue]:
    clock = ManualClock(NOW)
    venue = PaperVenue(clock=clock)
    gate = Gate(
        store=store,
        registry=Registry([submit_order_class()]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    uses = BreakGlassUses(sink.append)
    gate.pipeline = replace(
        gate.pipeline,
        authorise=grant_authoriser(environment="production", uses=uses),
        in_tx=(uses.in_tx,),
        after_commit=(uses.after_commit,),
    )
    return gate, venue


def grant(store: Store, *, glass: bool) -> str:
    raw: dict[str, object] = {"actions": ["submit_order"], "expires_in": 900, "hops": 0}
    if glass:
        raw["break_glass"] = True
    return store.create_grant("alice", parse_spec(raw, now=NOW), created_by="ops", now=NOW).grant_id


def uses_of(store: Store, operation_id: str) -> list[dict[str, object]]:
    return [
        e.detail
        for e in store.audit_entries(scope="default", operation_id=operation_id, limit=50)
        if e.kind == AUDIT_KIND
    ]


def test_every_dispatch_under_break_glass_is_audited_and_alerted(store: Store) -> None:
    sink: list[Alert] = []
    gate, venue = loud_gate(store, sink)
    gid = grant(store, glass=True)
    for n in (1, 2):
        row = gate.submit("submit_order", f"op-{n}", EXAMPLE_ORDER, principal="alice")
        assert row.state is State.ACKNOWLEDGED
        [use] = uses_of(store, f"op-{n}")
        assert use["grant_id"] == gid and use["holder"] == "alice"
    assert venue.effect_count == 2
    # One alert per use, stored and delivered, besides the one for the grant's creation.
    stored = [a for a in store.list_alerts() if a.kind == ALERT_KIND]
    assert sorted(a.subject for a in stored) == [f"{gid}:default:op-1", f"{gid}:default:op-2"]
    assert [a.subject for a in sink] == [f"{gid}:default:op-1", f"{gid}:default:op-2"]
    assert any(a.kind == "break-glass" for a in store.list_alerts())  # its creation
    assert verify_store(store).ok


def test_an_ordinary_grant_is_quiet(store: Store) -> None:
    sink: list[Alert] = []
    gate, _ = loud_gate(store, sink)
    grant(store, glass=False)
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="alice")
    assert row.state is State.ACKNOWLEDGED
    assert uses_of(store, "op-1") == [] and sink == []
    assert not [a for a in store.list_alerts() if a.kind == ALERT_KIND]


def test_a_held_dispatch_leaves_no_use_behind(store: Store) -> None:
    """The use is written in the dispatch transaction: a dispatch the kill switch holds (no
    commit of ``submitted``) is not a use; releasing it and dispatching is one, once."""
    sink: list[Alert] = []
    gate, venue = loud_gate(store, sink)
    grant(store, glass=True)
    op = Operator(store=store, registry=gate.registry, clock=gate.clock)
    op.kill("submit_order", operator="ops", reason="drill")
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="alice")
    assert row.state is State.VALIDATED and venue.effect_count == 0
    assert uses_of(store, "op-1") == [] and sink == []
    op.release("submit_order", operator="ops")
    assert gate.dispatch("op-1").state is State.ACKNOWLEDGED
    assert len(uses_of(store, "op-1")) == 1 and len(sink) == 1


class _Pager(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Pager.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_service_wires_it(tmp_path: Path, store: Store) -> None:
    """With ``[authority] grants = true`` the service's gate carries the use check and its
    alert delivery: an HTTP proposal under a break-glass grant is dispatched, audited, and
    paged through the service's ``[alerts] webhook``."""
    _Pager.received = []
    pager = ThreadingHTTPServer(("127.0.0.1", 0), _Pager)
    threading.Thread(target=pager.serve_forever, daemon=True).start()
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + (
        "\n[authority]\ngrants = true\n\n[alerts]\n"
        f'webhook = "http://127.0.0.1:{pager.server_address[1]}/page"\n'
    )
    svc = Service(parse_config(text, "t.toml"), store=store)
    try:
        raw = {"actions": ["submit_order"], "scope": "alpha", "expires_in": 900, "hops": 0,
               "break_glass": True}  # fmt: skip
        gid = store.create_grant(
            "alpha", parse_spec(raw, now=svc.clock()), created_by="ops", now=svc.clock()
        ).grant_id
        with TestClient(create_app(svc, mcp_http=False)) as client:
            r = client.post(
                "/v1/actions/submit_order",
                json=ORDER,
                headers={**bearer(AGENT_A), "Idempotency-Key": "op-1"},
            )
            assert r.json()["state"] == "acknowledged", r.text
        [use] = [
            e.detail
            for e in store.audit_entries(scope="alpha", operation_id="op-1", limit=50)
            if e.kind == AUDIT_KIND
        ]
        assert use["grant_id"] == gid
        pages = [p for p in _Pager.received if p["kind"] == ALERT_KIND]
        assert [p["subject"] for p in pages] == [f"{gid}:alpha:op-1"]
    finally:
        svc.close()
        pager.shutdown()
