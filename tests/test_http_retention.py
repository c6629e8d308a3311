"""Evidence that lasts over the operator HTTP API (issue 20, docs/evidence.md): legal holds
(place, list, release; audited), anchoring (now, verify) and prune, under a real server, on
both stores. Operator tokens only; anchoring and pruning need an every-scope operator and use
only the service's ``[anchor]`` anchors. Invariant 8: the chain verifies after a prune."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from effectgate._doors.http.app import create_app
from effectgate._service import Service
from effectgate._service._config import parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import (
    AGENT_A,
    OPERATOR,
    ORDER,
    SCOPED_OPERATOR,
    bearer,
    config_text,
    uvicorn_thread,
)


@dataclass
class Live:
    url: str
    service: Service
    clock: ManualClock
    anchors: Path


def serve(tmp_path: Path, store: Store, *, anchor: bool) -> Iterator[Live]:
    anchors = tmp_path / "anchors.jsonl"
    extra = f'\n[anchor]\ninterval = 0\nfiles = ["{anchors}"]\n' if anchor else ""
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + extra
    clock = ManualClock()
    service = Service(
        parse_config(text, "test.toml"),
        adapters={"venue": PaperAdapter(PaperVenue())},
        store=store,
        clock=clock,
    )
    with uvicorn_thread(create_app(service, mcp_http=False)) as url:
        yield Live(url, service, clock, anchors)
    service.close()


@pytest.fixture
def live(tmp_path: Path, store: Store) -> Iterator[Live]:
    yield from serve(tmp_path, store, anchor=True)


def submit(live: Live, op: str) -> None:
    r = httpx.post(
        f"{live.url}/v1/actions/submit_order",
        content=json.dumps(ORDER).encode(),
        headers=bearer(AGENT_A, **{"Idempotency-Key": op, "Content-Type": "application/json"}),
    )
    assert r.status_code in (200, 201), r.text


class TestHoldsOverHttp:
    def test_place_list_release_audited(self, live: Live) -> None:
        url = f"{live.url}/v1/admin/holds"
        r = httpx.post(
            url, json={"scope": "alpha", "reason": "litigation"}, headers=bearer(OPERATOR)
        )
        assert r.status_code == 200, r.text
        hold = r.json()
        assert hold["placed_by"] and hold["operation_id"] is None
        listed = httpx.get(url, headers=bearer(OPERATOR)).json()
        assert [h["hold_id"] for h in listed] == [hold["hold_id"]]
        released = httpx.post(
            f"{url}/{hold['hold_id']}/release", json={"reason": "settled"}, headers=bearer(OPERATOR)
        )
        assert released.status_code == 200 and released.json()["released_at"] is not None
        assert httpx.get(url, headers=bearer(OPERATOR)).json() == []
        kinds = [e.kind for e in live.service.store.audit_entries(limit=1000)]
        assert "legal_hold_placed" in kinds and "legal_hold_released" in kinds
        again = httpx.post(
            f"{url}/{hold['hold_id']}/release", json={"reason": "x"}, headers=bearer(OPERATOR)
        )
        assert again.status_code == 404

    def test_agents_and_other_scopes_are_refused(self, live: Live) -> None:
        url = f"{live.url}/v1/admin/holds"
        body = {"scope": "beta", "reason": "r"}
        assert httpx.post(url, json=body, headers=bearer(AGENT_A)).status_code == 403
        assert httpx.post(url, json=body, headers=bearer(SCOPED_OPERATOR)).status_code == 403
        assert live.service.store.list_holds() == []
        bad = httpx.post(url, json={"scope": "alpha"}, headers=bearer(OPERATOR))
        assert bad.status_code in (400, 422) and live.service.store.list_holds() == []

    @pytest.mark.parametrize("reason", [" ", "\u0085", "\t\n"])
    def test_a_blank_reason_is_a_400_and_holds_nothing(self, live: Live, reason: str) -> None:
        """Whitespace passes the body's length check; the store's own check refuses it as an
        invalid control (400, ``invalid_control``), never a 500 (found by schemathesis)."""
        url = f"{live.url}/v1/admin/holds"
        r = httpx.post(url, json={"scope": "alpha", "reason": reason}, headers=bearer(OPERATOR))
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "invalid_control", r.text
        assert live.service.store.list_holds() == []


class TestAnchorAndPruneOverHttp:
    def test_anchor_verify_prune_and_the_chain_still_verifies(self, live: Live) -> None:
        for i in range(40):  # PostgreSQL: several per lane, so not every one is a head
            submit(live, f"op-{i}")
        r = httpx.post(f"{live.url}/v1/admin/anchor", headers=bearer(OPERATOR))
        assert r.status_code == 200, r.text
        assert live.anchors.exists() and r.json()["anchored_at"]
        # Invariant 8: the anchoring is in the chain itself, naming the operator who asked.
        entry = live.service.store.audit_entries(limit=100_000)[-1]
        assert entry.kind == "audit_anchored"
        recorded = json.loads(entry.detail_text)
        assert recorded["by"] == "ops" and recorded["digest"] == r.json()["digest"]
        checked = httpx.get(f"{live.url}/v1/admin/anchor/verify", headers=bearer(OPERATOR))
        assert checked.status_code == 200 and checked.json()["intact"] is True
        live.clock.advance(2_000_000)  # now 1970-02-04: past key retention
        pruned = httpx.post(
            f"{live.url}/v1/admin/prune",
            json={"before": "2100-01-01T00:00:00Z"},
            headers=bearer(OPERATOR),
        )
        assert pruned.status_code == 400  # the cut-off is in the future: nothing pruned
        pruned = httpx.post(
            f"{live.url}/v1/admin/prune",
            json={"before": "1970-02-01T00:00:00Z"},
            headers=bearer(OPERATOR),
        )
        assert pruned.status_code == 200, pruned.text
        doc = pruned.json()
        assert doc["operations"] > 0 and doc["verify"]["ok"] is True
        after = httpx.get(f"{live.url}/v1/admin/anchor/verify", headers=bearer(OPERATOR))
        assert after.json()["intact"] is True

    def test_a_scoped_operator_cannot_anchor_or_prune(self, live: Live) -> None:
        h = bearer(SCOPED_OPERATOR)
        assert httpx.post(f"{live.url}/v1/admin/anchor", headers=h).status_code == 403
        r = httpx.post(
            f"{live.url}/v1/admin/prune", json={"before": "1970-02-01T00:00:00Z"}, headers=h
        )
        assert r.status_code == 403 and not live.anchors.exists()

    def test_a_naive_date_is_refused(self, live: Live) -> None:
        r = httpx.post(
            f"{live.url}/v1/admin/prune",
            json={"before": "1970-02-01T00:00:00"},
            headers=bearer(OPERATOR),
        )
        assert r.status_code in (400, 422) and not live.anchors.exists()


def test_without_an_anchor_section_nothing_is_anchored(tmp_path: Path, store: Store) -> None:
    for live in serve(tmp_path, store, anchor=False):
        r = httpx.post(f"{live.url}/v1/admin/anchor", headers=bearer(OPERATOR))
        assert r.status_code == 400 and "[anchor]" in r.json()["detail"]
        r = httpx.post(
            f"{live.url}/v1/admin/prune",
            json={"before": "1970-02-01T00:00:00Z"},
            headers=bearer(OPERATOR),
        )
        assert r.status_code == 400 and "audit_pruned" not in {
            e.kind for e in store.audit_entries(limit=1000)
        }
