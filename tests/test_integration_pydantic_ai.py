"""Pydantic AI integration (issue 17): effectgate tools as deferred tools (``ApprovalRequired``,
``DeferredToolResults``), against a real HTTP service; Pydantic AI's ``FunctionModel``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved

from agentkit import BIG, HUGE, ORDER, pydantic_model
from effectgate.integrations import EffectgateClient, operation_id_for
from effectgate.integrations._paper import PaperService, paper_service
from effectgate.integrations.pydantic_ai import NAMESPACE_KEY, effectgate_toolset


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


def agent(ps: PaperService, args: dict[str, Any], call_id: str) -> Agent[Any, Any]:
    client = EffectgateClient(ps.url, ps.harness_token)
    return Agent(
        pydantic_model(args, call_id),
        toolsets=[effectgate_toolset(client, ["submit_order"])],
        output_type=[str, DeferredToolRequests],
        deps_type=dict,
    )


def deps(space: str) -> dict[str, str]:
    return {NAMESPACE_KEY: space}


class TestApprovalAsDeferredTool:
    def test_deferred_then_resumed_after_the_approver_approved(self, ps: PaperService) -> None:
        a = agent(ps, BIG, "call_big")
        before = ps.venue.effect_count
        first = a.run_sync("buy 10", deps=deps("pa-approve"))
        assert isinstance(first.output, DeferredToolRequests)
        (call,) = first.output.approvals
        meta = first.output.metadata[call.tool_call_id]
        assert meta["operation_id"] == operation_id_for("pa-approve", "call_big")
        assert meta["fingerprint"] and ps.venue.effect_count == before
        ps.approve(meta["operation_id"])
        done = a.run_sync(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
            deps=deps("pa-approve"),
        )
        assert "outcome: done" in done.output
        assert ps.venue.effect_count == before + 1

    def test_a_harness_go_ahead_is_not_an_approval(self, ps: PaperService) -> None:
        a = agent(ps, BIG, "call_early")
        first = a.run_sync("buy 10", deps=deps("pa-early"))
        before = ps.venue.effect_count
        out = a.run_sync(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_early": True}),
            deps=deps("pa-early"),
        )
        assert "outcome: waiting_for_approval" in out.output
        assert ps.venue.effect_count == before

    def test_changed_arguments_at_approval_are_refused(self, ps: PaperService) -> None:
        """Invariant 2 (same operation id, other fingerprint: refused): ``override_args``
        changes the call's arguments after effectgate's approval bound the original ones."""
        a = agent(ps, BIG, "call_edit")
        first = a.run_sync("buy 10", deps=deps("pa-edit"))
        op_id = operation_id_for("pa-edit", "call_edit")
        ps.approve(op_id)
        out = a.run_sync(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(
                approvals={"call_edit": ToolApproved(override_args={**BIG, "quantity": "9"})}
            ),
            deps=deps("pa-edit"),
        )
        assert "outcome: refused" in out.output and "idempotency_conflict" in out.output
        assert ps.service.store.get("default", op_id).effect["quantity"] == "10"


class TestCrashAfterTheToolCall:
    def test_resuming_the_same_history_twice_makes_one_effect(self, ps: PaperService) -> None:
        """Invariant 1 (at most one dispatch per operation id): the first resume ran the tool
        and its process died before keeping the new history; the harness resumes again."""
        a = agent(ps, BIG, "call_twice")
        first = a.run_sync("buy 10", deps=deps("pa-twice"))
        ps.approve(operation_id_for("pa-twice", "call_twice"))
        before = ps.venue.effect_count
        for _ in range(2):
            out = a.run_sync(
                message_history=first.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"call_twice": True}),
                deps=deps("pa-twice"),
            )
            assert "outcome: done" in out.output
        assert ps.venue.effect_count == before


class TestOutcomesReachTheModel:
    def test_a_policy_rejection_is_text(self, ps: PaperService) -> None:
        out = agent(ps, HUGE, "call_huge").run_sync("buy 100", deps=deps("pa-huge"))
        assert "outcome: refused" in out.output and "over limit 1000" in out.output

    def test_an_uncertain_outcome_is_text(self, ps: PaperService) -> None:
        ps.venue.fail_next(1, after_apply=True)
        out = agent(ps, ORDER, "call_unk").run_sync("buy 4", deps=deps("pa-unk"))
        assert "outcome: uncertain" in out.output and "same operation id is safe" in out.output
