"""``effectgate plans list|show`` (issue 14): a plan's account as a tree, and as JSON, on every
store."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from effectgate._core.budgets import Resources
from effectgate._core.reservations import (
    PlanPolicy,
    ReservationKind,
    ReservationRequest,
    Settlement,
)
from effectgate._doors.cli.main import app
from effectgate.store.roles import Store

DIGEST = "b" * 64


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def seeded(store_factory: Any) -> str:
    store: Store = store_factory()
    store.open_plan_account(
        "default",
        PlanPolicy("plan-1", DIGEST, Resources(steps=9, tokens=900, fan_out=4), 100.0, True),
        now=1.0,
        actor="h",
    )
    team = ReservationRequest(
        "team",
        "plan-1",
        DIGEST,
        "t0",
        "a0",
        ReservationKind.BRANCH,
        Resources(steps=6, tokens=600, fan_out=3),
        90.0,
    )
    leaf = ReservationRequest(
        "agent-a",
        "plan-1",
        DIGEST,
        "t1",
        "a1",
        ReservationKind.LEAF,
        Resources(steps=3, tokens=300, fan_out=1),
        80.0,
        parent_id="team",
    )
    store.reserve("default", team, now=2.0, actor="h")
    store.reserve("default", leaf, now=3.0, actor="h")
    store.settle(
        "default",
        "plan-1",
        Settlement(
            "agent-a",
            leaf.digest(),
            usage=Resources(1, 50, 0, 1, 0, 0),
            known=frozenset(
                {"steps", "tokens", "tool_calls", "fan_out", "replans", "money_micros"}
            ),
        ),
        now=4.0,
        actor="h",
    )
    return str(store_factory.url)


class TestPlansShow:
    def test_the_tree_names_used_reserved_and_remaining(self, store_factory: Any) -> None:
        url = seeded(store_factory)
        out = run("plans", "show", "plan-1", "--store", url)
        assert out.exit_code == 0, out.output
        assert "tokens: used 600 (settled 0, reserved 600), limit 900, 300 left" in out.output
        assert "money_micros: used 0 (settled 0, reserved 0), unbounded" in out.output
        assert "team branch, open" in out.output and "agent-a leaf, settled" in out.output
        assert "holds steps=1 tok=50 fan=1" in out.output

    def test_json_is_the_http_document(self, store_factory: Any) -> None:
        url = seeded(store_factory)
        out = run("plans", "show", "plan-1", "--store", url, "--json")
        doc = json.loads(out.output)
        assert doc["used"]["tokens"] == 600 and doc["remaining"]["tokens"] == 300
        assert doc["tree"][0]["children"][0]["holds"]["tokens"] == 50
        listed = json.loads(run("plans", "list", "--store", url, "--json").output)
        assert listed == [{"scope": "default", "plan_id": "plan-1"}]

    def test_an_unknown_plan_exits_1_naming_it(self, store_factory: Any) -> None:
        url = seeded(store_factory)
        out = run("plans", "show", "nope", "--store", url)
        assert out.exit_code == 1 and "no plan account 'nope'" in out.output

    def test_the_value_dimension_is_shown_where_the_plan_bounds_it(
        self, store_factory: Any
    ) -> None:
        store: Store = store_factory()
        limits = Resources(steps=9, tokens=900, tool_calls=3, fan_out=4, value_micros=5000)
        store.open_plan_account(
            "default",
            PlanPolicy("plan-v", DIGEST, limits, 100.0, True, value_bound=True),
            now=1.0,
            actor="h",
        )
        leaf = ReservationRequest(
            "a", "plan-v", DIGEST, "t1", "a1", ReservationKind.LEAF,
            Resources(steps=1, tokens=10, tool_calls=1, fan_out=1, value_micros=2000), 80.0,
        )  # fmt: skip
        store.reserve("default", leaf, now=2.0, actor="h")
        out = run("plans", "show", "plan-v", "--store", str(store_factory.url))
        assert out.exit_code == 0, out.output
        assert "value_micros: used 2000 (settled 0, reserved 2000), limit 5000, 3000 left" in (
            out.output
        )
        assert "value=2000" in out.output
