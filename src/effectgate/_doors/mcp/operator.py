"""The operator-facing MCP tool set (docs/authority.md): approvals from an MCP client.

A server of its own, separate from the agent's (:mod:`effectgate._doors.mcp.server`), on its own
credential: an approver's or operator's token, checked against the ledger (or the JWT verifier)
on every tool call, so a revoked approver stops at the next call. Its tools:

* ``list_pending_approvals``: the requests awaiting approval in the caller's scope
* ``approve`` / ``refuse`` ``{scope, operation_id, fingerprint, reason?}``: one answer to exactly
  that payload, under the same rules as every approval (approver roles, no self-approval,
  distinct approvers); the approver recorded is the credential's principal

No tool proposes an action; the agent's tools are not here. ``effectgate operator-mcp`` serves
it over stdio (token from ``EFFECTGATE_APPROVER_TOKEN``); the service serves it over streamable
HTTP at ``/mcp/operator`` (``[service] operator_mcp_http = true``), where each HTTP request
carries and re-checks the approver's bearer token (:class:`~effectgate._doors.mcp.server.
McpHttpMount` with the approve capability).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from effectgate import __version__
from effectgate._core.principals import Capability
from effectgate._core.states import State
from effectgate._doors._shared.mcp_screen import REFUSED_META
from effectgate._doors._shared.models import problem_for
from effectgate._doors.mcp.server import McpHttpMount, principal_for
from effectgate._service import Principal, Service
from effectgate.errors import EffectgateError, IntentError, PermissionDenied, UnknownActionClass

__all__ = ["OPERATOR_TOOLS", "build_operator_server", "operator_mcp_mount", "run_operator_stdio"]

_ANSWER = {
    "type": "object",
    "properties": {
        "scope": {"type": "string"},
        "operation_id": {"type": "string"},
        "fingerprint": {"type": "string"},
        "reason": {"type": "string", "maxLength": 500},
    },
    "required": ["scope", "operation_id", "fingerprint"],
    "additionalProperties": False,
}
OPERATOR_TOOLS = (
    types.Tool(
        name="list_pending_approvals",
        description="Requests awaiting approval in your scope, with each payload's fingerprint.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="approve",
        description="Approve exactly this payload (its fingerprint) of one operation.",
        input_schema=_ANSWER,
    ),
    types.Tool(
        name="refuse",
        description="Refuse this payload of one operation; it ends denied.",
        input_schema=_ANSWER,
    ),
)


def _pending(service: Service, who: Principal) -> dict[str, Any]:
    scope = None if who.scope == "*" else who.scope
    rows = service.store.list_operations(state=State.AWAITING_APPROVAL, scope=scope, limit=200)
    return {
        "pending": [
            {"scope": r.scope, "operation_id": r.operation_id, "action": r.action,
             "fingerprint": r.fingerprint, "tier": r.tier, "reason": r.reason,
             "effect": dict(r.effect)}
            for r in rows
        ]
    }  # fmt: skip


def _answer(
    service: Service, who: Principal, args: dict[str, Any], approve: bool
) -> dict[str, Any]:
    allowed = {"scope", "operation_id", "fingerprint", "reason"}
    extra = sorted(set(args) - allowed)
    if extra:
        raise IntentError(f"unknown field {extra[0]!r}", field=extra[0], reason="extra_forbidden")
    for key in ("scope", "operation_id", "fingerprint"):
        if not isinstance(args.get(key), str):
            raise IntentError(f"{key} must be a string", field=key, reason="missing")
    if who.scope not in ("*", args["scope"]):
        raise PermissionDenied(f"{who.name!r} is limited to scope {who.scope!r}")
    reason = args.get("reason") if isinstance(args.get("reason"), str) else None
    if approve:
        out = service.operator.approve(
            args["operation_id"],
            fingerprint=args["fingerprint"],
            approver=who.name,
            scope=args["scope"],
            reason=reason,
            claimed_roles=who.approver_roles,
        )
    else:
        out = service.operator.refuse(
            args["operation_id"],
            fingerprint=args["fingerprint"],
            approver=who.name,
            scope=args["scope"],
            reason=reason,
        )
    return {
        # A minted-id proposal's completing approval names the operation it minted.
        "operation_id": out.operation.operation_id,
        "state": out.operation.state.value,
        "approvals": out.approvals,
        "required": out.required,
    }


def build_operator_server(
    service: Service, authenticate: Callable[[], Principal] | None = None
) -> Server[Any]:
    """The operator MCP server. Over HTTP the caller is the principal the mount authenticated
    for this request; otherwise ``authenticate`` runs on every tool call (stdio)."""

    async def list_tools(
        _: ServerRequestContext[Any], __: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(OPERATOR_TOOLS))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            who = await principal_for(ctx, authenticate)
            who.require(Capability.APPROVE)
            service.limiter.check(who)
            refused = (params.meta or {}).get(REFUSED_META)
            if refused is not None:  # the HTTP door's screen saw a key twice
                raise IntentError(
                    f"duplicate key {str(refused)!r} in the tool call; send each key once",
                    field=str(refused),
                    reason="duplicate_key",
                )
            args = dict(params.arguments or {})
            if params.name == "list_pending_approvals":
                body = await anyio.to_thread.run_sync(_pending, service, who)
            elif params.name in ("approve", "refuse"):
                body = await anyio.to_thread.run_sync(
                    _answer, service, who, args, params.name == "approve"
                )
            else:
                raise UnknownActionClass(f"no tool named {params.name!r}")
        except EffectgateError as exc:
            body = problem_for(exc)[1]
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(body))],
                structured_content=body,
                is_error=True,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(body))], structured_content=body
        )

    return Server(
        "effectgate-operator",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        instructions="Answer approval requests: list them, then approve or refuse a payload "
        "by its fingerprint.",
    )


async def run_operator_stdio(service: Service, authenticate: Callable[[], Principal]) -> None:
    """Serve the operator tool set over stdio until the client closes it."""
    server = build_operator_server(service, authenticate)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def operator_mcp_mount(service: Service) -> McpHttpMount:
    """The operator tool set over streamable HTTP: an approver's or operator's bearer token on
    every request (an agent's is refused at the door, 403)."""
    return McpHttpMount(service, build_operator_server(service), capability=Capability.APPROVE)
