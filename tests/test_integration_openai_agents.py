"""OpenAI Agents SDK integration (issue 17): effectgate tools with ``needs_approval`` and a
``RunState`` resumed after an approval, against a real HTTP service; a scripted ``Model``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from agents import Agent, Runner, RunState, set_tracing_disabled
from agents.exceptions import ModelBehaviorError

from agentkit import BIG, HUGE, ORDER, agents_model
from effectgate.integrations import EffectgateClient, operation_id_for
from effectgate.integrations._paper import PaperService, paper_service
from effectgate.integrations.openai_agents import NAMESPACE_KEY, effectgate_tools

set_tracing_disabled(True)  # no trace export: tests use no network


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


def agent(ps: PaperService, args: dict[str, Any], call_id: str) -> Agent[Any]:
    client = EffectgateClient(ps.url, ps.harness_token)
    return Agent(
        name="trader",
        model=agents_model(args, call_id),
        tools=effectgate_tools(client, ["submit_order"]),  # type: ignore[arg-type]
    )


def run(a: Agent[Any], start: Any, space: str) -> Any:
    async def go() -> Any:
        return await Runner.run(a, start, context={NAMESPACE_KEY: space})

    return anyio.run(go)


def restore(a: Agent[Any], saved: str) -> Any:
    async def go() -> Any:
        return await RunState.from_string(a, saved)

    return anyio.run(go)


class TestApprovalThroughRunState:
    def test_interrupted_then_resumed_after_the_approver_approved(self, ps: PaperService) -> None:
        a = agent(ps, BIG, "call_big")
        before = ps.venue.effect_count
        first = run(a, "buy 10", "oa-approve")
        (item,) = first.interruptions
        assert item.tool_name == "submit_order" and ps.venue.effect_count == before
        saved = first.to_state().to_string()  # what a harness persists while it waits
        op_id = operation_id_for("oa-approve", "call_big")
        ps.approve(op_id)
        state = restore(a, saved)
        state.approve(state.get_interruptions()[0])
        done = run(a, state, "oa-approve")
        assert "outcome: done" in str(done.final_output)
        assert ps.venue.effect_count == before + 1

    def test_a_harness_go_ahead_is_not_an_approval(self, ps: PaperService) -> None:
        a = agent(ps, BIG, "call_early")
        first = run(a, "buy 10", "oa-early")
        state = first.to_state()
        state.approve(state.get_interruptions()[0])
        before = ps.venue.effect_count
        out = run(a, state, "oa-early")
        assert "outcome: waiting_for_approval" in str(out.final_output)
        assert ps.venue.effect_count == before

    def test_a_saved_state_edited_to_other_arguments_is_refused(self, ps: PaperService) -> None:
        """Invariant 2 (same operation id, other fingerprint: refused): the persisted RunState
        is edited to carry other arguments for the approved call. The SDK itself refuses the
        edited call (it fingerprints invocations); effectgate refuses the same arguments under
        the operation id whatever carries them; what ran is what was approved."""
        a = agent(ps, BIG, "call_edit")
        saved = run(a, "buy 10", "oa-edit").to_state().to_string()
        op_id = operation_id_for("oa-edit", "call_edit")
        ps.approve(op_id)
        edited = saved.replace('\\"quantity\\": \\"10\\"', '\\"quantity\\": \\"9\\"')
        assert edited != saved
        state = restore(a, edited)
        with pytest.raises(ModelBehaviorError):  # at approve, or at the latest on resume
            state.approve(state.get_interruptions()[0])
            run(a, state, "oa-edit")
        client = EffectgateClient(ps.url, ps.harness_token)
        again = client.propose("submit_order", op_id, {**BIG, "quantity": "9"})
        assert again.outcome == "refused" and "idempotency_conflict" in again.message
        assert ps.service.store.get("default", op_id).effect["quantity"] == "10"


class TestCrashAfterTheToolCall:
    def test_resuming_the_same_saved_state_twice_makes_one_effect(self, ps: PaperService) -> None:
        """Invariant 1 (at most one dispatch per operation id): the first resume ran the tool
        and its process died before saving; the harness resumes the saved state again."""
        a = agent(ps, BIG, "call_twice")
        saved = run(a, "buy 10", "oa-twice").to_state().to_string()
        ps.approve(operation_id_for("oa-twice", "call_twice"))
        before = ps.venue.effect_count
        for _ in range(2):
            state = restore(a, saved)
            state.approve(state.get_interruptions()[0])
            out = run(a, state, "oa-twice")
            assert "outcome: done" in str(out.final_output)
        assert ps.venue.effect_count == before


class TestOutcomesReachTheModel:
    def test_a_policy_rejection_is_text(self, ps: PaperService) -> None:
        out = run(agent(ps, HUGE, "call_huge"), "buy 100", "oa-huge")
        assert "outcome: refused" in str(out.final_output)
        assert "over limit 1000" in str(out.final_output)

    def test_an_uncertain_outcome_is_text(self, ps: PaperService) -> None:
        ps.venue.fail_next(1, after_apply=True)
        out = run(agent(ps, ORDER, "call_unk"), "buy 4", "oa-unk")
        assert "outcome: uncertain" in str(out.final_output)
        # needs_approval proposed it; the tool's replay moments later finds it in flight:
        # either way the model is told it is uncertain and to ask again under the same id.
        assert "retry" in str(out.final_output).lower()
        assert "new operation id" not in str(out.final_output) or "do not" in str(out.final_output)
