"""The budgets' MCP door through the SDK's real client, on both stores: a harness reserves,
admits a run, checks, settles and reads usage; an agent's token neither sees nor calls them.

Invariant 12 (docs/design.md): what the tools admit never overdraws; a settled leaf admits
nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client

from effectgate._core.budgets import Resources
from effectgate._core.reservations import PlanPolicy
from effectgate._doors.mcp.budgets import BUDGET_TOOL_NAMES
from effectgate._doors.mcp.receipts import RECEIPT_TOOL
from effectgate._doors.mcp.server import LOOKUP_TOOL, build_server
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from servicekit import config_text

HARNESS = Principal("harness-1", "harness", "alpha")
AGENT = Principal("alpha", "agent", "alpha")
DIGEST = "c" * 64


@pytest.fixture
def service(store_factory: Any) -> Iterator[Service]:
    cfg = parse_config(config_text(store_url=store_factory.url), "test.toml")
    svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
    now = time.time()
    policy = PlanPolicy(
        "plan-m",
        DIGEST,
        Resources(steps=10, tokens=1000, tool_calls=10, fan_out=3, value_micros=10**9),
        now + 3600,
        token_only=True,
        value_bound=True,
    )
    svc.store.open_plan_account("alpha", policy, now=now, actor="harness-1")
    yield svc
    svc.close()


def _leaf(rid: str, tokens: int = 400) -> dict[str, Any]:
    return {
        "plan_id": "plan-m",
        "reservation_id": rid,
        "plan_digest": DIGEST,
        "task_id": f"task-{rid}",
        "owner_ref": f"att-{rid}",
        "kind": "leaf",
        "allocation": {"steps": 4, "tokens": tokens, "tool_calls": 3, "fan_out": 1},
        "deadline": time.time() + 1800,
    }


async def _call(c: Client, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    out = await c.call_tool(name, args)
    body = out.structured_content
    assert isinstance(body, dict)
    return bool(out.is_error), body


class TestBudgetToolsOverMcp:
    def test_only_a_harness_sees_and_may_call_the_budget_tools(self, service: Service) -> None:
        async def go() -> None:
            async with Client(build_server(service, AGENT)) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert names - {"evaluate_submit_order", "evaluate_cancel_order"} == {
                    "submit_order", "cancel_order", LOOKUP_TOOL, RECEIPT_TOOL
                }  # fmt: skip
                err, body = await _call(c, "budget_usage", {"plan_id": "plan-m"})
                assert err and body["code"] == "forbidden"
            async with Client(build_server(service, HARNESS)) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert BUDGET_TOOL_NAMES <= names and LOOKUP_TOOL in names

        anyio.run(go)

    def test_reserve_admit_check_settle_and_usage(self, service: Service) -> None:
        """Invariant 12 end to end over MCP: the run's budget is its leaf's; settling the run
        charges what it used and refunds the rest; the settled leaf admits nothing more."""

        async def go() -> None:
            async with Client(build_server(service, HARNESS)) as c:
                err, got = await _call(c, "budget_reserve", _leaf("leaf-1"))
                assert not err and got["new"] is True and got["reservation_id"] == "leaf-1"
                err, again = await _call(c, "budget_reserve", _leaf("leaf-1") | {
                    "deadline": got["deadline"]})  # fmt: skip
                assert not err and again["new"] is False
                err, link = await _call(
                    c,
                    "budget_admit_run",
                    {"plan_id": "plan-m", "reservation_id": "leaf-1", "run_id": "run-1"},
                )
                assert not err and link["run_id"] == "run-1" and link["new"] is True
                err, ok = await _call(
                    c, "budget_check", {"plan_id": "plan-m", "reservation_id": "leaf-1"}
                )
                assert not err and ok["open"] is True
                service.store.begin_run_step("alpha", "run-1", now=time.time())
                service.store.record_run_tokens("alpha", "run-1", 150, now=time.time())
                err, usage = await _call(c, "budget_usage", {"run_id": "run-1"})
                assert not err and usage["usage"]["steps"] == 1
                assert usage["budget"]["max_tokens"] == 400
                assert usage["reservation"]["reservation_id"] == "leaf-1"
                assert usage["dispatched_value_micros"] == 0
                err, settled = await _call(c, "budget_settle", {"run_id": "run-1"})
                assert not err and settled["charge"]["tokens"] == 150
                assert settled["charge"]["steps"] == 1 and settled["receipt_digest"]
                err, refused = await _call(
                    c, "budget_check", {"plan_id": "plan-m", "reservation_id": "leaf-1"}
                )
                assert err and refused["code"] == "budget_exceeded"
                assert refused["dimension"] == "settled"
                err, tree = await _call(c, "budget_usage", {"plan_id": "plan-m"})
                assert not err and tree["used"]["tokens"] == 150
                assert tree["remaining"]["tokens"] == 850
                assert tree["remaining"]["value_micros"] == 10**9

        anyio.run(go)

    def test_an_over_budget_reservation_names_the_dimension(self, service: Service) -> None:
        async def go() -> None:
            async with Client(build_server(service, HARNESS)) as c:
                err, body = await _call(c, "budget_reserve", _leaf("big", tokens=5000))
                assert err and body["code"] == "budget_exceeded"
                assert body["dimension"] == "tokens"
            assert service.store.plan_account("alpha", "plan-m").reservations == 0

        anyio.run(go)

    @pytest.mark.parametrize(
        ("name", "args", "field"),
        [
            ("budget_check", {"plan_id": "plan-m"}, "reservation_id"),
            ("budget_check", {"plan_id": "plan-m", "reservation_id": 5}, "reservation_id"),
            ("budget_usage", {"plan_id": "plan-m", "run_id": "r"}, "plan_id"),
            ("budget_settle", {}, "run_id"),
            ("budget_usage", {"plan_id": "plan-m", "extra": 1}, "extra"),
        ],
    )
    def test_bad_arguments_name_the_field_and_change_nothing(
        self, service: Service, name: str, args: dict[str, Any], field: str
    ) -> None:
        async def go() -> None:
            async with Client(build_server(service, HARNESS)) as c:
                err, body = await _call(c, name, args)
                assert err and body.get("field") == field, body

        before = len(list(service.store.iter_audit()))
        anyio.run(go)
        assert len(list(service.store.iter_audit())) == before
