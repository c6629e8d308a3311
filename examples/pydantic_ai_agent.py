"""A Pydantic AI agent whose orders go through effectgate (paper venue).
Run: python examples/pydantic_ai_agent.py

The model is Pydantic AI's ``FunctionModel`` (no network), scripted to place one order of notional
950: effectgate wants an approval, so the tool raises ``ApprovalRequired`` and the run ends with
``DeferredToolRequests``. An approver (another principal, over HTTP as the console would)
approves in effectgate; the harness resumes with ``DeferredToolResults`` and the order is sent once.
"""

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from effectgate.integrations import EffectgateClient
from effectgate.integrations.pydantic_ai import NAMESPACE_KEY, effectgate_toolset
from effectgate.testing import paper_service

ORDER = {
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "10",
    "limit_price": "95.00",
}


def scripted(messages: list[Any], _: Any) -> ModelResponse:
    """Calls submit_order once, then repeats what the tool said."""
    said = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if said:
        return ModelResponse(parts=[TextPart(str(said[-1]))])
    return ModelResponse(parts=[ToolCallPart("submit_order", ORDER, tool_call_id="call_1")])


def main() -> None:
    with paper_service() as ps:  # stands in for your `effectgate serve`
        client = EffectgateClient(ps.url, ps.harness_token)
        agent: Agent[Any, Any] = Agent(
            FunctionModel(scripted),
            toolsets=[effectgate_toolset(client)],
            output_type=[str, DeferredToolRequests],
        )
        deps = {NAMESPACE_KEY: "example-1"}
        first = agent.run_sync("Buy 10 XYZ-PERP at 95", deps=deps)
        assert isinstance(first.output, DeferredToolRequests)
        call = first.output.approvals[0]
        meta = first.output.metadata[call.tool_call_id]
        print("paused:", meta["operation_id"], "-", meta["reason"])
        ps.approve(meta["operation_id"], reason="within the desk's limits")
        done = agent.run_sync(
            message_history=first.all_messages(),
            deps=deps,
            deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
        )
        print(done.output)
        print("effects at the venue:", ps.venue.effect_count)


if __name__ == "__main__":
    main()
