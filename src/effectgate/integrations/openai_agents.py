"""effectgate for the OpenAI Agents SDK (``pip install 'effectgate[openai-agents]'``).

:func:`effectgate_tools` turns the service's action classes into ``FunctionTool`` objects::

    agent = Agent(name="trader", tools=effectgate_tools(EffectgateClient(url, harness_token)))

Identity: the operation id of a call is :func:`~effectgate.integrations.operation_id_for` of a
namespace and the call's ``call_id``, which the SDK keeps in the ``RunState`` (the model response
is part of it). The namespace is ``context["effectgate_namespace"]`` when the run's context is a
mapping carrying it, else the ``namespace`` given here: give each conversation its own.

Approval: each tool's ``needs_approval`` callable proposes the call to effectgate (journalled,
decided by policy; an automatic one is dispatched there and then) and answers True exactly when
effectgate says ``waiting_for_approval``. The run then ends with ``interruptions``; serialise
``result.to_state()`` (``to_string()``), have a person approve in effectgate with an approver
token, then ``state.approve(item)`` and ``Runner.run(agent, state)``. The tool proposes again under
the same id: effectgate replays the operation, which the approval dispatched. ``state.approve``
is the harness's decision to go on, never an approval: if effectgate still waits, the model is
told so. The approval binds the fingerprint, so changed arguments under the same call are refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from effectgate.integrations._client import EffectgateClient, ToolResult, ToolSpec, operation_id_for

__all__ = ["NAMESPACE_KEY", "effectgate_tools"]

#: The key of a mapping run context that names the run's operation-id namespace.
NAMESPACE_KEY = "effectgate_namespace"


def effectgate_tools(
    client: EffectgateClient, actions: Sequence[str] | None = None, *, namespace: str = "agents"
) -> list[FunctionTool]:
    """One ``FunctionTool`` per action class (``actions``: only these)."""
    return [
        _tool(client, spec, namespace) for spec in client.tools(list(actions) if actions else None)
    ]


def _namespace(ctx: RunContextWrapper[Any], default: str) -> str:
    context = ctx.context
    if isinstance(context, Mapping) and context.get(NAMESPACE_KEY):
        return str(context[NAMESPACE_KEY])
    return default


def _tool(client: EffectgateClient, spec: ToolSpec, namespace: str) -> FunctionTool:
    def propose(ctx: RunContextWrapper[Any], call_id: str, args: Mapping[str, Any]) -> ToolResult:
        return client.propose(
            spec.name, operation_id_for(_namespace(ctx, namespace), call_id), args
        )

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        result = await asyncio.to_thread(propose, ctx, call_id, params)
        return result.waiting

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        try:
            args = json.loads(raw or "{}")
        except ValueError:
            return "outcome: refused\nThe arguments are not JSON; nothing was sent."
        if not isinstance(args, dict):
            return "outcome: refused\nThe arguments must be a JSON object; nothing was sent."
        result = await asyncio.to_thread(propose, ctx, ctx.tool_call_id, args)
        return result.text()

    check: Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]] = needs_approval
    return FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=spec.parameters,
        on_invoke_tool=invoke,
        strict_json_schema=False,  # optional fields stay optional; effectgate parses strictly
        needs_approval=check,
    )
