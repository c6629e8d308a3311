"""A LangGraph agent whose orders go through effectgate (paper venue). Run: python examples/langgraph_agent.py

The chat model is LangGraph's fake one, scripted to place one order of notional 950: effectgate's
policy wants an approval above 900, so the run pauses on interrupt(); an approver (another
principal, here over HTTP as the console would) approves; the run resumes and the order is sent
once. With a real model: bind ``node.tool_schemas()`` to it instead.
"""

from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from effectgate.integrations import EffectgateClient
from effectgate.integrations.langgraph import EffectgateToolNode
from effectgate.testing import paper_service

ORDER = {
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "10",
    "limit_price": "95.00",
}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def main() -> None:
    with paper_service() as ps:  # stands in for your `effectgate serve`
        tools = EffectgateToolNode(EffectgateClient(ps.url, ps.harness_token))
        model = FakeMessagesListChatModel(
            responses=[
                AIMessage("", tool_calls=[{"name": "submit_order", "args": ORDER, "id": "call_1"}]),
                AIMessage("The order is placed."),
            ]
        )

        def agent(state: State) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        def route(state: State) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node("tools", tools)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["tools", END])
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "example-1"}}

        out = graph.invoke({"messages": [("user", "Buy 10 XYZ-PERP at 95")]}, config)
        pause = out["__interrupt__"][0].value
        print("paused:", pause["operation_id"], "-", pause["reason"])
        ps.approve(pause["operation_id"], reason="within the desk's limits")
        out = graph.invoke(Command(resume="approved"), config)
        print(out["messages"][-2].content)
        print("effects at the venue:", ps.venue.effect_count)


if __name__ == "__main__":
    main()
