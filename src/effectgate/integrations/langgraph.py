"""effectgate for LangGraph (``pip install 'effectgate[langgraph]'``).

:class:`EffectgateToolNode` is a graph node that runs the tool calls of the last AI message
through effectgate, and :meth:`~EffectgateToolNode.tool_schemas` gives the schemas to bind to a
chat model (``model.bind_tools(node.tool_schemas())``)::

    node = EffectgateToolNode(EffectgateClient(url, harness_token))
    builder.add_node("tools", node)
    graph = builder.compile(checkpointer=InMemorySaver())  # any checkpointer: one is required

Identity: the operation id of a tool call is :func:`~effectgate.integrations.operation_id_for`
of the thread id and :func:`call_key`: the tool call's id and the id of the AI message that
carries it (``add_messages`` gives every message a uuid when the model did not), so a provider
that numbers calls per turn (``call_0``) still gets one operation per call. That message is
checkpointed before this node runs, so a step that crashed after the call and is resumed, or a
node that re-runs after an interrupt, sends the same operation again: effectgate replays it and
nothing is sent twice.

Approval: when effectgate answers ``waiting_for_approval`` the node calls LangGraph's
``interrupt()`` with the operation id, fingerprint and the policy's reason; the run pauses and
the checkpoint keeps it. A person approves in effectgate (console, CLI, API) with an approver
token. ``Command(resume=...)`` re-runs the node: it asks effectgate again under the same id and,
if the operation still waits, pauses again. The resume value is never taken as an approval; only
effectgate's record counts, and the approval binds the fingerprint, so the arguments that run are
the approved ones: a checkpoint edited to carry other arguments under the same call is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import interrupt

from effectgate.integrations._client import EffectgateClient, ToolResult, operation_id_for

__all__ = ["EffectgateToolNode", "call_key", "thread_namespace"]

_PLAIN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}")


def thread_namespace(config: RunnableConfig | None) -> str:
    """The operation-id namespace of a run: its ``thread_id`` (hashed if it is not plain)."""
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or str(thread) == "":
        raise ValueError(
            "EffectgateToolNode needs a checkpointer and a thread_id in the run config: "
            "without them a resumed step could not find its operation again"
        )
    text = str(thread)
    if _PLAIN.fullmatch(text):
        return text
    return "t" + hashlib.sha256(text.encode()).hexdigest()[:24]


def call_key(message: AIMessage, call_id: str) -> str:
    """What identifies one tool call in a thread: its id and its message's id (when set)."""
    if not call_id:
        raise ValueError("a tool call without an id cannot be bound to an operation")
    return f"{call_id}:{message.id}" if message.id else call_id


class EffectgateToolNode:
    """Run the last AI message's tool calls as effectgate operations; one ToolMessage each.

    ``actions``: the action classes offered (default: all the service has).
    ``messages_key``: the state key holding the message list.
    """

    def __init__(
        self,
        client: EffectgateClient,
        actions: Sequence[str] | None = None,
        *,
        messages_key: str = "messages",
    ) -> None:
        self.client = client
        self.specs = {s.name: s for s in client.tools(list(actions) if actions else None)}
        self.messages_key = messages_key

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function tools, for ``chat_model.bind_tools(...)``."""
        return [
            {
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": s.description,
                    "parameters": s.parameters,
                },
            }
            for s in self.specs.values()
        ]

    def __call__(
        self, state: Mapping[str, Any], config: RunnableConfig
    ) -> dict[str, list[ToolMessage]]:
        namespace = thread_namespace(config)
        messages = state[self.messages_key]
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage):
            raise ValueError("EffectgateToolNode runs after an AI message with tool calls")
        out: list[ToolMessage] = []
        for call in last.tool_calls:
            name = call["name"]
            call_id = call.get("id") or ""
            if name not in self.specs:
                out.append(
                    ToolMessage(
                        content=f"outcome: refused\nNo tool named {name!r}; the tools are "
                        f"{sorted(self.specs)}. Nothing was sent.",
                        tool_call_id=call_id,
                        name=name,
                        status="error",
                    )
                )
                continue
            operation_id = operation_id_for(namespace, call_key(last, call_id))
            result = self._run(name, operation_id, call["args"])
            out.append(
                ToolMessage(
                    content=result.text(),
                    tool_call_id=call_id,
                    name=name,
                    artifact=result.body,
                    status="success" if result.outcome == "done" else "error",
                )
            )
        return {self.messages_key: out}

    def _run(self, name: str, operation_id: str, args: Mapping[str, Any]) -> ToolResult:
        result = self.client.propose(name, operation_id, args)
        while result.waiting:
            # Pauses the run (the checkpoint keeps it); on resume this node runs again from
            # the top, the propose above replays, and this loop asks effectgate afresh.
            interrupt(
                {
                    "effectgate": "approval",
                    "operation_id": operation_id,
                    "action": name,
                    "fingerprint": result.fingerprint,
                    "reason": (result.body.get("decision") or {}).get("reason"),
                    "message": result.message,
                }
            )
            result = self.client.propose(name, operation_id, args)
        return result
