"""Kill switch rehearsals over the operator HTTP API (issue 39 item 12), under a real server,
on both stores: record a dry run or a drill, list them, and each class's schedule status.

Invariant 7 (a kill switch stops every new dispatch of its class at once) is only as good as
the last time someone saw it work; invariant 11 (nothing waits silently): the status names a
class whose ``rehearsal_period`` passed, as the ``rehearsal-overdue`` alert does. Recording
needs an operator of scope ``"*"``; agents never reach it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
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

PERIOD = 3600.0


@dataclass
class Live:
    url: str
    http: httpx.Client
    service: Service
    clock: ManualClock


@pytest.fixture
def live(tmp_path: Path, store: Store) -> Iterator[Live]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db").replace(
        "[classes.submit_order]\n", f"[classes.submit_order]\nrehearsal_period = {PERIOD}\n", 1
    )
    clock = ManualClock()
    service = Service(
        parse_config(text, "test.toml"),
        adapters={"venue": PaperAdapter(PaperVenue())},
        store=store,
        clock=clock,
    )
    with (
        uvicorn_thread(create_app(service, mcp_http=False)) as url,
        httpx.Client(base_url=f"{url}/v1/admin", headers=bearer(OPERATOR), timeout=10) as http,
    ):
        yield Live(url, http, service, clock)
    service.close()


def status(live: Live) -> dict[str, dict]:
    r = live.http.get("/kill/rehearsals/status")
    assert r.status_code == 200, r.text
    return {s["action"]: s for s in r.json()}


class TestRehearsalsOverHttp:
    def test_a_dry_run_is_recorded_and_flips_nothing(self, live: Live) -> None:
        """Invariant 7: the dry run counts what the switch would hold; nothing is flipped."""
        agent = bearer(AGENT_A, **{"Idempotency-Key": "op-1", "Content-Type": "application/json"})
        big = json.dumps({**ORDER, "quantity": "10", "limit_price": "95.00"}).encode()
        sent = httpx.post(f"{live.url}/v1/actions/submit_order", content=big, headers=agent)
        assert sent.is_success, sent.text
        r = live.http.post("/kill/submit_order/rehearsals", json={"reason": "monthly"})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["kind"] == "blast_radius" and out["operator"] == "ops"
        assert out["detail"]["awaiting_approval"] == 1 and out["detail"]["reason"] == "monthly"
        assert not live.service.store.controls("submit_order").killed
        (entry,) = [e for e in live.service.store.iter_audit() if e.kind == "kill_rehearsal"]
        assert entry.detail["rehearsal"] == out["id"]

    def test_a_drill_flips_the_switch_and_back_and_is_listed_newest_first(self, live: Live) -> None:
        """Invariant 7: the drill sees the switch held in the store and leaves it off."""
        dry = live.http.post("/kill/submit_order/rehearsals").json()
        live.clock.advance(5)
        drill = live.http.post("/kill/submit_order/rehearsals", json={"drill": True}).json()
        assert drill["kind"] == "drill" and drill["detail"]["held_seen"] is True
        assert not live.service.store.controls("submit_order").killed
        listed = live.http.get("/kill/rehearsals", params={"action": "submit_order"}).json()
        assert [r["id"] for r in listed] == [drill["id"], dry["id"]]
        assert live.http.get("/kill/rehearsals", params={"action": "cancel_order"}).json() == []
        kinds = [e.kind for e in live.service.store.iter_audit()]
        assert kinds.count("kill_switch_on") == 1 and kinds.count("kill_switch_off") == 1

    def test_a_drill_is_refused_while_the_switch_is_really_on(self, live: Live) -> None:
        assert live.http.put("/kill/submit_order", json={"reason": "incident"}).is_success
        r = live.http.post("/kill/submit_order/rehearsals", json={"drill": True})
        assert r.status_code == 400 and r.json()["code"] == "invalid_control", r.text
        assert live.service.store.controls("submit_order").killed
        assert live.http.get("/kill/rehearsals").json() == []

    def test_status_per_class_follows_the_period(self, live: Live) -> None:
        """Invariant 11: never rehearsed is overdue; a rehearsal makes it due a period later;
        past the period it is overdue again, exactly when the alert would page."""
        first = status(live)
        assert first["submit_order"]["overdue"] and first["submit_order"]["last"] is None
        assert first["cancel_order"] == {
            "action": "cancel_order",
            "period": None,
            "last": None,
            "due_at": None,
            "overdue": False,
        }
        done = live.http.post("/kill/submit_order/rehearsals").json()
        now = status(live)["submit_order"]
        assert not now["overdue"] and now["last"]["id"] == done["id"]
        assert now["due_at"] == done["at"] + PERIOD
        live.clock.advance(PERIOD + 1)
        assert status(live)["submit_order"]["overdue"]
        one = live.http.get("/kill/rehearsals/status", params={"action": "submit_order"}).json()
        assert [s["action"] for s in one] == ["submit_order"]

    def test_who_may_rehearse_and_read(self, live: Live) -> None:
        base = f"{live.url}/v1/admin"
        for token in (AGENT_A, SCOPED_OPERATOR):
            r = httpx.post(f"{base}/kill/submit_order/rehearsals", headers=bearer(token))
            assert r.status_code == 403, r.text
        assert httpx.get(f"{base}/kill/rehearsals", headers=bearer(AGENT_A)).status_code == 403
        scoped = httpx.get(f"{base}/kill/rehearsals/status", headers=bearer(SCOPED_OPERATOR))
        assert scoped.status_code == 200
        assert live.http.get("/kill/rehearsals").json() == []
        unknown = live.http.post("/kill/no_such_class/rehearsals")
        assert unknown.status_code == 404 and unknown.json()["code"] == "unknown_action_class"
        extra = live.http.post("/kill/submit_order/rehearsals", json={"drill": True, "x": 1})
        assert extra.status_code in (400, 422) and live.http.get("/kill/rehearsals").json() == []
