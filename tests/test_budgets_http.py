"""Budgets at the HTTP front door (issue 14), under a real uvicorn server, on every store: the
harness's routes for run budgets and plan accounts, the operators' reads, and the stable
``budget_exceeded`` code naming its dimension."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from servicekit import AGENT_A, OPERATOR, bearer, config_text, uvicorn_thread

SCOPE = "alpha"
DIGEST = "c" * 64


@pytest.fixture
def url(tmp_path: Path, store: Store) -> Iterator[str]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/unused.db")
    svc = Service(
        parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(PaperVenue())}, store=store
    )
    try:
        with uvicorn_thread(create_app(svc, mcp_http=False)) as u:
            yield u
    finally:
        svc.close()


@pytest.fixture
def harness(store: Store) -> dict[str, str]:
    token = store.create_principal("runner", "harness", SCOPE, created_by="ops", now=1.0).token
    return bearer(token)


def leaf(rid: str, **alloc: int) -> dict[str, Any]:
    return {
        "reservation_id": rid,
        "plan_digest": DIGEST,
        "task_id": f"task-{rid}",
        "owner_ref": f"att-{rid}",
        "kind": "leaf",
        "allocation": alloc,
        "deadline": 4_000_000_000.0,
    }


class TestRunBudgetRoutes:
    def test_fix_step_and_charge_then_refuse_naming_the_dimension(
        self, url: str, harness: dict[str, str]
    ) -> None:
        body = {"max_steps": 1, "max_tokens": 50}
        first = httpx.put(f"{url}/v1/runs/run-1/budget", json=body, headers=harness)
        assert first.status_code == 201, first.text
        again = httpx.put(f"{url}/v1/runs/run-1/budget", json=body, headers=harness)
        assert again.status_code == 200
        step = httpx.post(
            f"{url}/v1/runs/run-1/budget/steps", json={"configured_output": 80}, headers=harness
        )
        assert step.status_code == 200 and step.json()["output_limit"] == 50
        charged = httpx.post(
            f"{url}/v1/runs/run-1/budget/tokens", json={"reported_tokens": None}, headers=harness
        )
        assert charged.json()["usage"] == {
            "steps": 1,
            "tokens": 50,
            "reported_tokens": 0,
            "tool_calls": 0,
            "estimated": True,
        }
        refused = httpx.post(f"{url}/v1/runs/run-1/budget/steps", json={}, headers=harness)
        assert refused.status_code == 409
        assert refused.json()["code"] == "budget_exceeded"
        assert refused.json()["dimension"] == "steps"
        bad = httpx.put(f"{url}/v1/runs/run-2/budget", json={"max_steps": -1}, headers=harness)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_budget"

    def test_an_agent_token_cannot_touch_budgets(self, url: str) -> None:
        got = httpx.put(f"{url}/v1/runs/run-1/budget", json={}, headers=bearer(AGENT_A))
        assert got.status_code == 403


class TestPlanRoutes:
    def test_open_reserve_settle_and_read_the_tree(self, url: str, harness: dict[str, str]) -> None:
        plan = {
            "plan_id": "plan-1",
            "plan_digest": DIGEST,
            "limits": {"steps": 10, "tokens": 100, "fan_out": 2},
            "deadline": 4_100_000_000.0,
            "token_only": True,
        }
        assert httpx.post(f"{url}/v1/plans", json=plan, headers=harness).status_code == 201
        r = httpx.post(
            f"{url}/v1/plans/plan-1/reservations",
            json=leaf("a", steps=4, tokens=60),
            headers=harness,
        )
        assert r.status_code == 201, r.text
        digest = r.json()["request_digest"]
        over = httpx.post(
            f"{url}/v1/plans/plan-1/reservations", json=leaf("b", tokens=41), headers=harness
        )
        assert over.status_code == 409
        problem = over.json()
        assert (problem["code"], problem["dimension"]) == ("budget_exceeded", "tokens")
        assert problem["outcome"] == "refused" and "'b'" in problem["detail"]
        check = httpx.post(f"{url}/v1/plans/plan-1/reservations/a/check", headers=harness)
        assert check.status_code == 200
        settle = {
            "reservation_id": "a",
            "request_digest": digest,
            "usage": {"steps": 1, "tokens": 10, "fan_out": 1},
            "known": ["steps", "tokens", "tool_calls", "fan_out", "replans", "money_micros"],
        }
        done = httpx.post(f"{url}/v1/plans/plan-1/settlements", json=settle, headers=harness)
        assert done.status_code == 201 and len(done.json()["receipt_digest"]) == 64
        op = bearer(OPERATOR)
        listed = httpx.get(f"{url}/v1/admin/plans", headers=op).json()
        assert listed == [{"scope": SCOPE, "plan_id": "plan-1"}]
        tree = httpx.get(f"{url}/v1/admin/plans/{SCOPE}/plan-1", headers=op).json()
        assert tree["used"]["tokens"] == 10 and tree["remaining"]["tokens"] == 90
        assert tree["remaining"]["money_micros"] is None
        assert tree["tree"][0]["reservation_id"] == "a" and tree["tree"][0]["settled"]
        missing = httpx.get(f"{url}/v1/admin/plans/{SCOPE}/nope", headers=op)
        assert missing.status_code == 404 and missing.json()["code"] == "reservation_not_found"
        # Metrics per plan: used, reserved, remaining per dimension and the count.
        metrics = httpx.get(f"{url}/metrics", headers=op).text
        assert (
            'effectgate_plan_used{dimension="tokens",plan="plan-1",scope="alpha"} 10.0' in metrics
        )
        assert (
            'effectgate_plan_remaining{dimension="tokens",plan="plan-1",scope="alpha"} 90.0'
            in metrics
        )
        assert 'effectgate_plan_reservations{plan="plan-1",scope="alpha"} 1.0' in metrics
        assert 'effectgate_plan_remaining{dimension="money_micros"' not in metrics

    def test_admit_a_run_under_a_leaf_and_settle_it(
        self, url: str, harness: dict[str, str]
    ) -> None:
        """Invariant 12: the run's budget is its leaf's; settling the run settles the leaf
        from the run's stored usage, and value is bounded where the plan says so."""
        plan = {
            "plan_id": "plan-2",
            "plan_digest": DIGEST,
            "limits": {"steps": 10, "tokens": 100, "tool_calls": 5, "fan_out": 2,
                       "value_micros": 5_000_000},
            "deadline": 4_100_000_000.0,
            "token_only": True,
            "value_bound": True,
        }  # fmt: skip
        assert httpx.post(f"{url}/v1/plans", json=plan, headers=harness).status_code == 201
        alloc = {"steps": 3, "tokens": 50, "tool_calls": 2, "fan_out": 1, "value_micros": 10}
        r = httpx.post(
            f"{url}/v1/plans/plan-2/reservations", json=leaf("a", **alloc), headers=harness
        )
        assert r.status_code == 201, r.text
        admit = f"{url}/v1/plans/plan-2/reservations/a/runs/run-9"
        first = httpx.post(admit, headers=harness)
        assert first.status_code == 201, first.text
        assert first.json()["reservation_id"] == "a"
        assert httpx.post(admit, headers=harness).status_code == 200  # a replay
        budget = httpx.get(f"{url}/v1/runs/run-9/budget", headers=harness).json()
        assert budget["budget"]["max_tokens"] == 50 and budget["budget"]["max_tool_calls"] == 2
        httpx.post(f"{url}/v1/runs/run-9/budget/steps", json={}, headers=harness)
        done = httpx.post(f"{url}/v1/runs/run-9/settlement", headers=harness)
        assert done.status_code == 201, done.text
        # One step and nothing else used; no effect dispatched, so value charges zero.
        assert done.json()["charge"] == {"steps": 1, "tokens": 0, "tool_calls": 0, "fan_out": 1,
                                         "replans": 0, "money_micros": 0}  # fmt: skip
        late = httpx.post(f"{url}/v1/runs/run-9/budget/steps", json={}, headers=harness)
        assert late.status_code == 409 and late.json()["dimension"] == "settled"
