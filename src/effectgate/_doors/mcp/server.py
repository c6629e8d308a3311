"""The MCP door (official ``mcp`` SDK 2.x): one tool per action class, and a read-only lookup.

Each action class ``X`` is a tool named ``X`` whose ``inputSchema`` is the intent schema plus a
required ``operation_id`` property, and whose ``outputSchema`` is the operation result; results
carry ``structuredContent``. Arguments go through the same strict core as HTTP bodies: nothing
is coerced (``"5"`` is not ``5``, ``5.0`` is not a decimal string) and unknown keys are refused.
A refusal is an ``isError`` result whose structured content names the field and the reason, so
a model can correct itself. ``evaluate_X`` (one per class, read-only) answers what ``X`` would
do now and returns an ``evaluation_token``; ``X`` takes it as an optional argument and is then
refused if anything the evaluation covered changed. ``get_operation`` looks an operation up,
``get_receipt`` hands out its signed receipt once final (:mod:`.receipts`); no tool reaches
operator actions. A harness's token also sees the budget tools
(:mod:`effectgate._doors.mcp.budgets`: reserve, admit a run, check, settle, usage); an agent's
token neither sees nor may call them.

Operation id (see docs/service.md): the caller supplies it as an argument, minted once when the
action is decided on and repeated verbatim on every retry. It lives in the transcript, so a
model that re-runs and re-derives the same intent finds and reuses it; the server never mints
it (a lost reply would then turn a retry into a second action) and never derives it from the
payload (two deliberate identical actions would merge). A harness that wants to pin the id
outside the model's control sends it in the request ``_meta`` under
``io.effectgate/operation_id``; an argument that differs from the pinned id is refused. It
binds the action to a run call the same way: ``io.effectgate/run_call`` (``{"run_id", "slot",
"call_id"}``, docs/runs.md); the model cannot set ``_meta``, and no tool records a call.

Transports: stdio (``effectgate mcp``; the agent token comes from an environment variable and is
checked against the ledger on every tool call) and streamable HTTP at ``/mcp`` in the HTTP
service's process (agent bearer token per request).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from effectgate import __version__
from effectgate._core.principals import Capability
from effectgate._core.runs import RunCallRef
from effectgate._doors._shared.mcp_screen import REFUSED_META, ScreenedLines
from effectgate._doors._shared.models import OperationOut, operation_out, problem_for
from effectgate._doors._shared.offload import offload
from effectgate._doors._shared.receipts import ReceiptIssuer
from effectgate._doors._shared.run_wire import RUN_CALL_META_KEY, parse_run_call
from effectgate._doors._shared.tracing import mcp_carrier
from effectgate._doors.mcp._exchange import Exchange, screened_request
from effectgate._doors.mcp.budgets import BUDGET_TOOL_NAMES, BUDGET_TOOLS, budget_call
from effectgate._doors.mcp.receipts import RECEIPT_TOOL, receipt_call, receipt_tool
from effectgate._execute import tracing as _tracing
from effectgate._service import Principal, Service
from effectgate.errors import (
    EffectgateError,
    IntentError,
    ServiceUnavailable,
    Unauthenticated,
    UnknownActionClass,
)
from effectgate.store.base import OPERATION_ID_PATTERN

__all__ = [
    "EVALUATE_PREFIX",
    "LOOKUP_TOOL",
    "OPERATION_ID_SCHEMA",
    "PIN_META_KEY",
    "REQUEST_KEY_SCHEMA",
    "McpHttpMount",
    "build_server",
    "evaluate_tool",
    "lookup_tool",
    "principal_for",
    "run_stdio",
    "tool_definitions",
]

LOOKUP_TOOL: Final = "get_operation"
#: ``evaluate_X`` for each class ``X``: what proposing it would do now, read-only.
EVALUATE_PREFIX: Final = "evaluate_"
EVALUATION_TOKEN_SCHEMA: Final = {
    "type": "string",
    "maxLength": 8192,
    "description": "Optional: the evaluation_token an evaluate_ tool returned for this payload; "
    "the action is then refused if anything that evaluation covered has changed.",
}
PIN_META_KEY: Final = "io.effectgate/operation_id"
_PRINCIPAL_KEY: Final = "effectgate.principal"
OPERATION_ID_SCHEMA: Final = {
    "type": "string",
    "pattern": f"^{OPERATION_ID_PATTERN.pattern}$",
    "maxLength": 128,
    "description": "The operation id: mint it once when you decide on this action and send "
    "the same id on every retry of it. A new id is a new action.",
}

#: ``operation_id`` of a class whose ids effectgate mints (docs/service.md, "Operation ids").
REQUEST_KEY_SCHEMA: Final = {
    **OPERATION_ID_SCHEMA,
    "description": "A request key: choose it once per proposal and send it again on every "
    "retry of the proposal. effectgate mints the operation id and returns it in the result's "
    "operation_id (a proposal waiting for approval carries a proposal: handle there until the "
    "approval mints the id); send that (or the same key) to retry. The same key with another "
    "payload is refused.",
}


def tool_definitions(service: Service) -> list[types.Tool]:
    output = OperationOut.model_json_schema()
    tools: list[types.Tool] = []
    for ac in service.config.registry:
        schema = ac.json_schema()
        plain = json.loads(json.dumps(schema))
        schema["properties"] = {
            "operation_id": REQUEST_KEY_SCHEMA
            if ac.operation_ids == "minted"
            else OPERATION_ID_SCHEMA,
            "evaluation_token": EVALUATION_TOKEN_SCHEMA,
            **schema["properties"],
        }
        schema["required"] = ["operation_id", *schema.get("required", [])]
        tools.append(evaluate_tool(ac.name, plain))
        mutation = ac.effect_class.value != "read_only"
        tools.append(
            types.Tool(
                name=ac.name,
                title=ac.name.replace("_", " "),
                description=(
                    f"Propose a {ac.name} action ({ac.effect_class.value}; oversight "
                    f"tier at least {ac.tier_floor.value}). Deterministic policy decides; "
                    "the result is the journalled operation. Decimals are JSON strings."
                ),
                input_schema=schema,
                output_schema=output,
                annotations=types.ToolAnnotations(
                    read_only_hint=not mutation,
                    destructive_hint=mutation,
                    idempotent_hint=True,
                    open_world_hint=True,
                ),
            )
        )
    tools.append(lookup_tool(output))
    tools.append(receipt_tool(OPERATION_ID_SCHEMA))
    return tools


def evaluate_tool(action: str, schema: dict[str, Any]) -> types.Tool:
    """``evaluate_ACTION``: the intent schema, an optional ``operation_id``; read-only."""
    schema["properties"] = {"operation_id": OPERATION_ID_SCHEMA, **schema["properties"]}
    return types.Tool(
        name=f"{EVALUATE_PREFIX}{action}",
        title=f"evaluate {action.replace('_', ' ')}",
        description=(
            f"Ask what a {action} action would do now, without doing it: the decision and its "
            "reasons (policy, controls, budgets left, approvals needed and from whom, the "
            f"venue's dry run) and an evaluation_token to pass to {action} so that it is "
            "refused if anything changed since. Writes nothing."
        ),
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=True, idempotent_hint=True, open_world_hint=True
        ),
    )


def lookup_tool(output: dict[str, Any]) -> types.Tool:
    """The read-only ``get_operation`` tool, answering with the ``output`` schema."""
    return types.Tool(
        name=LOOKUP_TOOL,
        title="get operation",
        description="Look up an operation you proposed, by its operation id (read-only).",
        input_schema={
            "type": "object",
            "properties": {"operation_id": OPERATION_ID_SCHEMA},
            "required": ["operation_id"],
            "additionalProperties": False,
        },
        output_schema=output,
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )


def build_server(
    service: Service, principal: Principal | Callable[[], Principal] | None = None
) -> Server[Any]:
    """The MCP server. Over HTTP the principal comes from each request. Otherwise from
    ``principal``: a fixed one, or a callable that authenticates afresh on every tool call
    (stdio: a token revoked while the session runs is refused from its next call)."""
    tools = tool_definitions(service)
    issuer = ReceiptIssuer(service)  # the receipt key is read here, at start

    async def list_tools(
        ctx: ServerRequestContext[Any], __: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # A harness also sees the budget tools; an agent (a model's token) never does.
        try:
            who = await principal_for(ctx, principal)
        except EffectgateError:
            return types.ListToolsResult(tools=tools)
        harness = who.may(Capability.RECORD_RUNS)
        return types.ListToolsResult(tools=tools + list(BUDGET_TOOLS) if harness else tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            who = await principal_for(ctx, principal)
            service.limiter.check(who)
            if params.name in BUDGET_TOOL_NAMES:
                return await _budget(service, who, params)
            if params.name == RECEIPT_TOOL and RECEIPT_TOOL not in service.config.registry:
                body = await anyio.to_thread.run_sync(
                    receipt_call, issuer, who, dict(params.arguments or {})
                )
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=json.dumps(body))],
                    structured_content=body,
                )
            return await _call(service, who, params)
        except EffectgateError as exc:
            _, body, _ = problem_for(exc)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(body))],
                structured_content=body,
                is_error=True,
            )

    return Server(
        "effectgate",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        instructions="Propose actions with the tools; each call needs an operation_id "
        "you mint once per action and repeat on retries.",
    )


async def principal_for(
    ctx: ServerRequestContext[Any], fixed: Principal | Callable[[], Principal] | None
) -> Principal:
    """The calling agent: the one :class:`McpHttpMount` put in the HTTP request's scope, else
    ``fixed`` (a principal, or a callable that authenticates afresh)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    found = scope.get(_PRINCIPAL_KEY) if isinstance(scope, Mapping) else None
    if isinstance(found, Principal):
        return found
    if isinstance(fixed, Principal):
        return fixed
    if fixed is not None:
        # The lookup reads the ledger: in a worker thread, never on the event loop.
        return await anyio.to_thread.run_sync(fixed)
    raise Unauthenticated("no agent token for this session")


async def _call(
    service: Service, who: Principal, params: types.CallToolRequestParams
) -> types.CallToolResult:
    refused = (params.meta or {}).get(REFUSED_META)
    if refused is not None:
        raise IntentError(
            f"duplicate key {str(refused)!r} in the tool call; send each key once",
            field=str(refused),
            reason="duplicate_key",
        )
    args = dict(params.arguments or {})
    if params.name.startswith(EVALUATE_PREFIX) and params.name not in service.config.registry:
        action = params.name.removeprefix(EVALUATE_PREFIX)
        run_call = parse_run_call((params.meta or {}).get(RUN_CALL_META_KEY))
        return await _evaluate(service, who, action, args, run_call)
    if "operation_id" not in args:
        raise IntentError(
            "required field 'operation_id' is missing", field="operation_id", reason="missing"
        )
    op_id = args.pop("operation_id")
    if not isinstance(op_id, str) or not OPERATION_ID_PATTERN.fullmatch(op_id):
        raise IntentError(
            f"must be a string matching {OPERATION_ID_PATTERN.pattern}",
            field="operation_id",
            reason="invalid_operation_id",
        )
    pinned = (params.meta or {}).get(PIN_META_KEY)
    if pinned is not None and pinned != op_id:
        raise IntentError(
            "differs from the operation id your harness pinned for this call; send the pinned id",
            field="operation_id",
            reason="pinned_mismatch",
        )
    if params.name == LOOKUP_TOOL:
        if args:
            raise IntentError(
                f"unknown field {sorted(args)[0]!r} (allowed: operation_id)",
                field=sorted(args)[0],
                reason="extra_forbidden",
            )
        op = await anyio.to_thread.run_sync(service.lookup, who, op_id)
    elif params.name in service.config.registry:
        run_call = parse_run_call((params.meta or {}).get(RUN_CALL_META_KEY))
        token = args.pop("evaluation_token", None)
        if token is not None and not isinstance(token, str):
            raise IntentError("must be a string", field="evaluation_token", reason="string_type")
        with _tracing.attach_remote(mcp_carrier(params.meta)):
            op = await offload(service.propose, who, params.name, op_id, args, run_call, token)
    else:
        raise UnknownActionClass(f"no tool named {params.name!r}")
    out = operation_out(op, service.config.registry).model_dump(mode="json")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(out))], structured_content=out
    )


async def _evaluate(
    service: Service, who: Principal, action: str, args: dict[str, Any], run_call: RunCallRef | None
) -> types.CallToolResult:
    if action not in service.config.registry:
        raise UnknownActionClass(f"no tool named {EVALUATE_PREFIX}{action!r}")
    op_id = args.pop("operation_id", None)
    if op_id is not None and (
        not isinstance(op_id, str) or not OPERATION_ID_PATTERN.fullmatch(op_id)
    ):
        raise IntentError(
            f"must be a string matching {OPERATION_ID_PATTERN.pattern}",
            field="operation_id",
            reason="invalid_operation_id",
        )
    result = await offload(service.evaluate, who, action, args, op_id, run_call)
    out = result.to_dict()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(out))], structured_content=out
    )


async def _budget(
    service: Service, who: Principal, params: types.CallToolRequestParams
) -> types.CallToolResult:
    who.require(Capability.RECORD_RUNS)
    if (params.meta or {}).get(REFUSED_META) is not None:
        raise IntentError(
            "duplicate key in the tool call; send each key once", reason="duplicate_key"
        )
    body = await anyio.to_thread.run_sync(
        budget_call, service, who, params.name, dict(params.arguments or {})
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))], structured_content=body
    )


async def run_stdio(service: Service, authenticate: Callable[[], Principal]) -> None:
    """Serve MCP over this process's stdin/stdout until the client closes it; every tool call
    is authenticated afresh by ``authenticate``."""
    server = build_server(service, authenticate)
    lines = ScreenedLines(
        anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    )
    async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
        await server.run(read, write, server.create_initialization_options())


class McpHttpMount:
    """An ASGI MCP endpoint (``/mcp``, ``/mcp/operator``): bearer auth on every request, then
    the SDK's streamable HTTP.

    Stateless with JSON responses, so any worker can answer any request (no session affinity).
    """

    def __init__(
        self,
        service: Service,
        server: Server[Any] | None = None,
        *,
        capability: Capability = Capability.PROPOSE,
        fast_path: bool = True,
    ) -> None:
        self._service = service
        # ``server``: another MCP server over the same service (the gateway's, the operator's).
        self._server = server if server is not None else build_server(service)
        # What the bearer must be able to do: propose (the agent's tools), approve (the
        # operator's): one credential never opens the other door.
        self._capability = capability
        # ``fast_path=False``: every request through the SDK's transport (the equivalence
        # test compares the two).
        self._fast_path = fast_path
        self._manager: StreamableHTTPSessionManager | None = None
        self._exchange: Exchange | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        settings = self._service.config.service
        security = (
            None
            if settings.public
            else TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        )
        # A session manager runs once; every app lifespan gets its own.
        manager = StreamableHTTPSessionManager(
            app=self._server,
            stateless=True,
            json_response=True,
            security_settings=security,
            max_request_body_size=settings.max_body_bytes + 4096,
        )
        async with manager.run():
            self._manager = manager
            if self._fast_path:
                # The manager entered the server's lifespan once; the fast path shares its state.
                self._exchange = Exchange(
                    self._server, security, manager.max_request_body_size, manager._lifespan_state
                )
            try:
                yield
            finally:
                self._manager = None
                self._exchange = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._manager is None:
            status, body, extra = problem_for(
                ServiceUnavailable("the MCP endpoint runs only inside the app's lifespan")
            )
            await JSONResponse(
                body, status_code=status, headers=extra, media_type="application/problem+json"
            )(scope, receive, send)
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        try:
            who = await offload(self._service.tokens.from_header, headers.get("authorization"))
            who.require(self._capability)
        except EffectgateError as exc:
            status, body, extra = problem_for(exc)
            await JSONResponse(
                body, status_code=status, headers=extra, media_type="application/problem+json"
            )(scope, receive, send)
            return
        scope, receive, data = await screened_request(
            scope, receive, self._service.config.service.max_body_bytes
        )
        scope = {**scope, _PRINCIPAL_KEY: who}
        exchange = self._exchange
        # A plain stateless tools/call is answered here; everything else by the SDK.
        if (
            data is not None
            and exchange is not None
            and await exchange.answer(scope, receive, send, data)
        ):
            return
        await self._manager.handle_request(scope, receive, send)
