"""Scripted models for the framework integrations: each framework's own test-model mechanism,
no network. Each model calls one tool once, then answers with the text of the tool's result (so a
test reads what the model was told)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from effectgate.integrations import EffectgateClient
from effectgate.integrations.langgraph import EffectgateToolNode

ORDER = {
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "4",
    "limit_price": "100.00",
}
BIG = {**ORDER, "quantity": "10", "limit_price": "95.00"}  # 950: waits for an approval
HUGE = {**ORDER, "quantity": "100", "limit_price": "95.00"}  # 9500: over max_value, refused


class CrashOnce(EffectgateClient):
    """A client whose first ``propose`` dies after the service answered: a process killed
    after the tool call and before the framework saved its result."""

    crashes = 1

    def propose(self, action: str, operation_id: str, arguments: Any) -> Any:
        out = super().propose(action, operation_id, arguments)
        if self.crashes:
            self.crashes -= 1
            raise RuntimeError("simulated crash after the tool call")
        return out


# --- LangGraph ------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def langgraph_app(client: EffectgateClient, args: dict[str, Any], call_id: str = "call_1") -> Any:
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="", tool_calls=[{"name": "submit_order", "args": args, "id": call_id}]
            )
        ]
    )

    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):  # answer with what the tool said
            return {"messages": [AIMessage(content=str(last.content))]}
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectgateToolNode(client, ["submit_order"]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def agents_model(args: dict[str, Any], call_id: str = "call_1") -> Any:
    from agents import Model, ModelResponse, Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Scripted(Model):
        async def get_response(self, *a: Any, **kw: Any) -> ModelResponse:
            items = a[1] if len(a) > 1 else kw["input"]
            outputs = [
                i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
            ]
            if outputs:
                text = str(outputs[-1]["output"])
                msg = ResponseOutputMessage(
                    id="msg_1",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
                )
                return ModelResponse(output=[msg], usage=Usage(), response_id=None)
            call = ResponseFunctionToolCall(
                type="function_call",
                name="submit_order",
                arguments=json.dumps(args),
                call_id=call_id,
                id="fc_1",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **kw: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the tests do not stream")

    return Scripted()


# --- Pydantic AI ----------------------------------------------------------------------------


def pydantic_model(args: dict[str, Any], call_id: str = "call_1") -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: list[Any], _: Any) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(str(returns[-1].content))])
        return ModelResponse(parts=[ToolCallPart("submit_order", args, tool_call_id=call_id)])

    return FunctionModel(respond)
