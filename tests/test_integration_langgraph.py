"""LangGraph integration (issue 17): effectgate tools in a checkpointed graph, approvals on
``interrupt()``, against a real HTTP service on the paper venue; LangGraph's fake chat model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from agentkit import BIG, HUGE, ORDER, CrashOnce, langgraph_app
from effectgate.integrations import EffectgateClient, operation_id_for
from effectgate.integrations._paper import PaperService, paper_service
from effectgate.integrations.langgraph import call_key


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def tool_message(state: Any) -> ToolMessage:
    found = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert found, state
    return found[-1]


class TestCrashAfterTheToolCall:
    def test_a_resumed_step_replays_the_operation_and_makes_one_effect(
        self, ps: PaperService
    ) -> None:
        """Invariant 1 (at most one dispatch per operation id): the step died after effectgate
        sent the order; resuming the thread from its checkpoint sends the same operation id,
        which replays."""
        before = ps.venue.effect_count
        graph = langgraph_app(CrashOnce(ps.url, ps.harness_token), ORDER, call_id="call_crash")
        with pytest.raises(RuntimeError, match="simulated crash"):
            graph.invoke({"messages": [("user", "buy 4")]}, cfg("lg-crash"))
        assert ps.venue.effect_count == before + 1
        state = graph.invoke(None, cfg("lg-crash"))
        msg = tool_message(state)
        assert msg.artifact["replayed"] is True and "outcome: done" in str(msg.content)
        assert ps.venue.effect_count == before + 1
        call = next(m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls)
        key = call_key(call, "call_crash")
        assert msg.artifact["operation_id"] == operation_id_for("lg-crash", key)


class TestApprovalOnInterrupt:
    def test_the_run_pauses_and_resumes_with_the_approved_payload(self, ps: PaperService) -> None:
        client = EffectgateClient(ps.url, ps.harness_token)
        graph = langgraph_app(client, BIG, call_id="call_big")
        before = ps.venue.effect_count
        out = graph.invoke({"messages": [("user", "buy 10")]}, cfg("lg-approve"))
        (pending,) = out["__interrupt__"]
        op_id = pending.value["operation_id"]
        assert pending.value["fingerprint"] and "needs approval" in str(pending.value["reason"])
        # Resuming before anyone approved pauses again and sends nothing: the resume value
        # is not an approval.
        out = graph.invoke(Command(resume="go"), cfg("lg-approve"))
        assert out["__interrupt__"] and ps.venue.effect_count == before
        ps.approve(op_id)  # the approver principal, over HTTP
        assert ps.venue.effect_count == before + 1
        out = graph.invoke(Command(resume="approved"), cfg("lg-approve"))
        assert "outcome: done" in str(tool_message(out).content)
        assert "Done" in str(out["messages"][-1].content)
        assert ps.venue.effect_count == before + 1

    def test_changed_arguments_under_the_approved_call_are_refused(self, ps: PaperService) -> None:
        """Invariant 2 (same operation id, other fingerprint: refused): the checkpoint is edited
        to carry other arguments for the same tool call; what ran is what was approved."""
        client = EffectgateClient(ps.url, ps.harness_token)
        graph = langgraph_app(client, BIG, call_id="call_edit")
        out = graph.invoke({"messages": [("user", "buy 10")]}, cfg("lg-edit"))
        op_id = out["__interrupt__"][0].value["operation_id"]
        ps.approve(op_id)
        call = next(m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls)
        edited = call.model_copy(
            update={"tool_calls": [{**call.tool_calls[0], "args": {**BIG, "quantity": "9"}}]}
        )
        graph.update_state(cfg("lg-edit"), {"messages": [edited]}, as_node="agent")
        out = graph.invoke(None, cfg("lg-edit"))
        text = str(tool_message(out).content)
        assert "outcome: refused" in text and "idempotency_conflict" in text
        assert ps.service.store.get("default", op_id).effect["quantity"] == "10"


class TestOneOperationPerCall:
    def test_calls_numbered_per_turn_are_two_operations(self, ps: PaperService) -> None:
        """Two turns whose provider numbers calls from call_0 each time: two deliberate,
        identical orders are two actions (never merged by a reused call id)."""
        client = EffectgateClient(ps.url, ps.harness_token)
        before = ps.venue.effect_count
        for turn in range(2):
            graph = langgraph_app(client, ORDER, call_id="call_0")
            out = graph.invoke({"messages": [("user", f"buy 4, turn {turn}")]}, cfg("lg-turns"))
            msg = tool_message(out)
            assert "outcome: done" in str(msg.content) and msg.artifact["replayed"] is False
        assert ps.venue.effect_count == before + 2


class TestOutcomesReachTheModel:
    def test_a_policy_rejection_is_text_the_model_can_act_on(self, ps: PaperService) -> None:
        graph = langgraph_app(EffectgateClient(ps.url, ps.harness_token), HUGE, "call_huge")
        out = graph.invoke({"messages": [("user", "buy 100")]}, cfg("lg-huge"))
        text = str(out["messages"][-1].content)
        assert "outcome: refused" in text and "over limit 1000" in text

    def test_an_uncertain_outcome_says_retry_with_the_same_id(self, ps: PaperService) -> None:
        ps.venue.fail_next(1, after_apply=True)
        graph = langgraph_app(EffectgateClient(ps.url, ps.harness_token), ORDER, "call_unk")
        out = graph.invoke({"messages": [("user", "buy 4")]}, cfg("lg-unk"))
        text = str(out["messages"][-1].content)
        assert "outcome: uncertain" in text and "same operation id is safe" in text
