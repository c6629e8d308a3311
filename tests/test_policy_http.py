"""Governed policy over the operator HTTP API (issue 18, docs/authority.md), under a real uvicorn
server, on both stores: propose with diff, approve by another principal, reject, list, show,
replay, load; the same semantics as ``effectgate policy``.

Invariants (docs/authority.md, "Policy as a governed artefact"): a change takes effect only when
a principal other than its author approves it; every change is a chained audit entry (DESIGN.md
invariant 8); bad input is a specific 400 that writes nothing but the audit log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from effectgate._doors.http.app import create_app
from effectgate._evidence.audit import verify_store
from effectgate._service import Service, parse_config
from effectgate.store.roles import Store
from servicekit import (
    AGENT_A,
    OPERATOR,
    ORDER,
    SCOPED_OPERATOR,
    bearer,
    config_text,
    uvicorn_thread,
)

STRICTER = """
[policies.submit_order]
max_value = "300"

[policies.cancel_order]
"""


@pytest.fixture
def served(tmp_path: Path, store: Store) -> Iterator[tuple[str, str, Store]]:
    """The service's URL, a second global operator's token, the store."""
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db")
    svc = Service(parse_config(text, "t.toml"), store=store)
    second = store.create_principal("ops2", "operator", "*", created_by="test", now=1.0).token
    try:
        with uvicorn_thread(create_app(svc, mcp_http=False)) as url:
            yield url, second, store
    finally:
        svc.close()


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.iter_audit() if e.kind.startswith("policy_")]


def test_propose_replay_approve_by_another(served: tuple[str, str, Store]) -> None:
    url, second, store = served
    with httpx.Client(base_url=url, timeout=10) as c:
        # One recorded decision to replay: a 400 order, allowed under the config's 1000 limit.
        headers = bearer(AGENT_A, **{"Idempotency-Key": "k1", "Content-Type": "application/json"})
        r = c.post("/v1/actions/submit_order", content=json.dumps(ORDER).encode(), headers=headers)
        assert r.status_code in (200, 201), r.text
        r = c.post("/v1/admin/policies/replay", json={"policy": STRICTER}, headers=bearer(OPERATOR))
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["replayed"] == 1 and report["counts"] == {"submit_order": {"allow->deny": 1}}
        assert kinds(store) == []  # a replay writes nothing

        r = c.post("/v1/admin/policies", json={"policy": STRICTER, "note": "tighter"},
                   headers=bearer(OPERATOR))  # fmt: skip
        assert r.status_code == 201, r.text
        proposal = r.json()
        pid = proposal["proposal_id"]
        assert proposal["state"] == "open" and proposal["author"] == "ops"
        assert proposal["diff"] and any("300" in line for line in proposal["diff"])

        # Its author cannot approve it.
        r = c.post(f"/v1/admin/policies/{pid}/approve", headers=bearer(OPERATOR))
        assert r.status_code == 403 and r.json()["code"] == "self_approval"
        assert c.get("/v1/admin/policies", headers=bearer(OPERATOR)).json()["active"] is None

        shown = c.get(f"/v1/admin/policies/{pid}", headers=bearer(second)).json()
        assert shown["diff"] == proposal["diff"] and shown["state"] == "open"
        r = c.post(f"/v1/admin/policies/{pid}/approve", headers=bearer(second))
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "applied" and r.json()["decided_by"] == "ops2"
        listed = c.get("/v1/admin/policies", headers=bearer(OPERATOR)).json()
        assert listed["active"] == proposal["policy_hash"]
        # Applied: approving again is refused.
        assert (
            c.post(f"/v1/admin/policies/{pid}/approve", headers=bearer(second)).status_code == 400
        )
    assert kinds(store) == ["policy_proposed", "policy_activated"]
    assert verify_store(store).ok


def test_reject_closes_a_proposal(served: tuple[str, str, Store]) -> None:
    url, second, store = served
    with httpx.Client(base_url=url, timeout=10) as c:
        pid = c.post("/v1/admin/policies", json={"policy": STRICTER},
                     headers=bearer(OPERATOR)).json()["proposal_id"]  # fmt: skip
        r = c.post(f"/v1/admin/policies/{pid}/reject", json={"reason": "too tight"},
                   headers=bearer(second))  # fmt: skip
        assert r.status_code == 200 and r.json()["state"] == "rejected"
        # Closed: neither approved nor rejected again.
        r = c.post(f"/v1/admin/policies/{pid}/approve", headers=bearer(second))
        assert r.status_code == 400 and "rejected" in r.json()["detail"]
        r = c.post(f"/v1/admin/policies/{pid}/reject", json={}, headers=bearer(OPERATOR))
        assert r.status_code == 400
        assert c.get("/v1/admin/policies", headers=bearer(OPERATOR)).json()["active"] is None
    assert kinds(store) == ["policy_proposed", "policy_rejected"]
    [entry] = [e for e in store.iter_audit() if e.kind == "policy_rejected"]
    assert entry.detail["by"] == "ops2" and entry.detail["reason"] == "too tight"


def test_bad_input_and_wrong_principals_write_nothing(served: tuple[str, str, Store]) -> None:
    url, _, store = served
    with httpx.Client(base_url=url, timeout=10) as c:
        for bad in ("[policies.no_such_class]\n", "[policies.submit_order]\nmax_value = 1.5e\n",
                    '[policies.submit_order]\nmax_valu = "3"\n'):  # fmt: skip
            r = c.post("/v1/admin/policies", json={"policy": bad}, headers=bearer(OPERATOR))
            assert r.status_code == 400, r.text
            assert r.json()["code"] == "invalid_control" and r.json()["field"] == "policy"
        r = c.post("/v1/admin/policies", json={"policy": STRICTER, "extra": 1},
                   headers=bearer(OPERATOR))  # fmt: skip
        assert r.status_code == 400
        # A tenant's operator cannot change what every tenant runs under; an agent no policy.
        r = c.post("/v1/admin/policies", json={"policy": STRICTER}, headers=bearer(SCOPED_OPERATOR))
        assert r.status_code == 403
        r = c.post("/v1/admin/policies", json={"policy": STRICTER}, headers=bearer(AGENT_A))
        assert r.status_code == 403
        # Approval is required by default: a load is refused.
        r = c.post("/v1/admin/policies/load", json={"policy": STRICTER}, headers=bearer(OPERATOR))
        assert r.status_code == 403
        assert c.get("/v1/admin/policies/pp_0000000000000000",
                     headers=bearer(OPERATOR)).status_code == 400  # fmt: skip
        assert c.get("/v1/admin/policies/nope", headers=bearer(OPERATOR)).status_code == 400
    assert kinds(store) == []
    assert store.list_policy_proposals() == []


def test_load_where_approval_is_optional(tmp_path: Path, store: Store) -> None:
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + (
        '\n[authority]\npolicy_approval = "optional"\n'
    )
    svc = Service(parse_config(text, "t.toml"), store=store)
    try:
        with (
            uvicorn_thread(create_app(svc, mcp_http=False)) as url,
            httpx.Client(base_url=url, timeout=10) as c,
        ):
            r = c.post("/v1/admin/policies/load", json={"policy": STRICTER, "note": "now"},
                       headers=bearer(OPERATOR))  # fmt: skip
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "loaded"
            active = c.get("/v1/admin/policies", headers=bearer(OPERATOR)).json()["active"]
            assert active == r.json()["policy_hash"]
        assert kinds(store) == ["policy_loaded", "policy_activated"]
    finally:
        svc.close()
