"""An OpenAI Agents SDK agent whose orders go through effectgate (paper venue).
Run: python examples/openai_agents_agent.py

The model is a scripted ``Model`` (no network) that places one order of notional 950: effectgate
wants an approval, so ``needs_approval`` is True and the run ends with an interruption. The harness
saves the ``RunState``; an approver (another principal, over HTTP as the console would) approves in
effectgate; the harness approves the interruption and resumes, and the order is sent once.
"""

import asyncio
import json
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, RunState, Usage, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses import ResponseOutputText

from effectgate.integrations import EffectgateClient
from effectgate.integrations.openai_agents import NAMESPACE_KEY, effectgate_tools
from effectgate.testing import paper_service

ORDER = {
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "10",
    "limit_price": "95.00",
}


class Scripted(Model):
    """Calls submit_order once, then repeats what the tool said."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        said = [
            i["output"]
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if said:
            text = ResponseOutputText(type="output_text", text=str(said[-1]), annotations=[])
            out: Any = ResponseOutputMessage(
                id="m1", type="message", role="assistant", status="completed", content=[text]
            )
        else:
            out = ResponseFunctionToolCall(
                type="function_call",
                name="submit_order",
                arguments=json.dumps(ORDER),
                call_id="call_1",
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> None:
    set_tracing_disabled(True)
    with paper_service() as ps:  # stands in for your `effectgate serve`
        client = EffectgateClient(ps.url, ps.harness_token)
        agent = Agent(name="trader", model=Scripted(), tools=effectgate_tools(client))
        context = {NAMESPACE_KEY: "example-1"}
        first = await Runner.run(agent, "Buy 10 XYZ-PERP at 95", context=context)
        saved = first.to_state().to_string()  # persist this while a person decides
        print("paused:", first.interruptions[0].tool_name)
        ps.approve("example-1.call_1", reason="within the desk's limits")
        state = await RunState.from_string(agent, saved)
        state.approve(state.get_interruptions()[0])
        done = await Runner.run(agent, state, context=context)
        print(done.final_output)
        print("effects at the venue:", ps.venue.effect_count)


if __name__ == "__main__":
    asyncio.run(main())
