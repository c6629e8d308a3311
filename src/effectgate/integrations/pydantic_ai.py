"""effectgate for Pydantic AI (``pip install 'effectgate[pydantic-ai]'``).

:func:`effectgate_toolset` gives a ``FunctionToolset`` with one tool per action class::

    agent = Agent(model, toolsets=[effectgate_toolset(client)],
                  output_type=[str, DeferredToolRequests])

Identity: the operation id of a call is :func:`~effectgate.integrations.operation_id_for` of a
namespace and the call's ``tool_call_id``, which the message history keeps. The namespace is
``deps["effectgate_namespace"]`` when the run's deps are a mapping carrying it, else the
``namespace`` given here: give each conversation its own.

Approval (deferred tools): the tool proposes the call; when effectgate says
``waiting_for_approval`` it raises ``ApprovalRequired`` (metadata: operation id, fingerprint, the
policy's reason), and the run ends with ``DeferredToolRequests``. A person approves in effectgate
with an approver token; the harness then runs again with ``message_history`` and
``DeferredToolResults(approvals={call_id: True})``. The tool proposes again under the same id and
effectgate replays the operation the approval dispatched. ``True`` there is the harness's decision
to go on, never an approval: if effectgate still waits, the model is told so. ``ToolApproved(
override_args=...)`` changes the arguments under the same call: effectgate refuses them, since
the approval bound the fingerprint of the original ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai import ApprovalRequired, FunctionToolset, RunContext, Tool

from effectgate.integrations._client import EffectgateClient, ToolSpec, operation_id_for

__all__ = ["NAMESPACE_KEY", "effectgate_toolset"]

#: The key of mapping deps that names the run's operation-id namespace.
NAMESPACE_KEY = "effectgate_namespace"


def effectgate_toolset(
    client: EffectgateClient,
    actions: Sequence[str] | None = None,
    *,
    namespace: str = "pydantic-ai",
) -> FunctionToolset[Any]:
    """A toolset with one tool per action class (``actions``: only these)."""
    specs = client.tools(list(actions) if actions else None)
    return FunctionToolset([_tool(client, spec, namespace) for spec in specs])


def _tool(client: EffectgateClient, spec: ToolSpec, namespace: str) -> Tool[Any]:
    def run(ctx: RunContext[Any], **args: Any) -> str:
        deps = ctx.deps
        space = (
            str(deps[NAMESPACE_KEY])
            if isinstance(deps, Mapping) and deps.get(NAMESPACE_KEY)
            else namespace
        )
        operation_id = operation_id_for(space, ctx.tool_call_id or "")
        result = client.propose(spec.name, operation_id, args)
        if result.waiting and not ctx.tool_call_approved:
            raise ApprovalRequired(
                metadata={
                    "operation_id": operation_id,
                    "fingerprint": result.fingerprint,
                    "reason": (result.body.get("decision") or {}).get("reason"),
                    "message": result.message,
                }
            )
        return result.text()

    return Tool.from_schema(
        run,
        name=spec.name,
        description=spec.description,
        json_schema=spec.parameters,
        takes_ctx=True,
    )
