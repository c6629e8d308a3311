"""A stateless ``tools/call`` over streamable HTTP, answered in the request's own task.

For each stateless request the SDK's streamable-HTTP transport builds a transport, two pairs
of memory streams, a task group with a message router, a JSON-RPC dispatcher and a connection,
and spawns the handler into another task; a tool call then travels through those streams and
back. That set-up cost more than the gate's own work per call (issue 40, docs/benchmarks.md
"B5 over MCP"). A plain ``tools/call`` POST needs none of it: in stateless JSON-response mode
the answer is exactly one JSON-RPC reply in the POST's body, nothing else the handler sends has
a wire (the transport's router drops it) and the server cannot ask the client anything.

So :func:`answer` takes such a request and runs it through the SDK's own request kernel
(``serve_one``: the same ``ServerRunner``, middleware (OpenTelemetry), validation of the
params, handler lookup and result serialisation that the transport's dispatcher drives), maps
a failure the way the dispatcher does, and writes the reply the way the transport does. It
checks what the SDK's path checks before dispatch, in the same order (protocol-version era,
body limit, transport security, ``Accept``, ``Content-Type``, the JSON-RPC envelope); anything
else (initialize, lists, notifications, GET/DELETE, SSE, a session, a modern-era request,
anything malformed or unusual) returns ``False`` untouched and goes to the SDK's transport.
``tests/test_mcp_exchange.py`` sends the same requests both ways and compares the bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_one
from mcp.server.streamable_http import CONTENT_TYPE_JSON, check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from effectgate._doors._shared.mcp_screen import screen

__all__ = ["Exchange", "screened_request"]

_METHOD: Final = "tools/call"
_VERSION_HEADER: Final = MCP_PROTOCOL_VERSION_HEADER.lower().encode("ascii")
#: The dispatcher's logger: a handler's unmapped exception is logged where the SDK logs it.
_DISPATCH_LOG: Final = logging.getLogger("mcp.shared.jsonrpc_dispatcher")


@dataclass
class _OneReply:
    """The dispatch context of a stateless JSON-response request (the SDK's
    ``DispatchContext`` protocol): the reply is the only thing its wire carries."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: ServerMessageMetadata
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    # No session for a client's reply to land in, and a JSON body holds one message.
    can_send_request: bool = False

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        # Request-scoped messages have no wire in JSON-response mode: the transport's
        # router drops them too.
        return None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        return None


class Exchange:
    """The fast path of one stateless, JSON-response session manager's settings."""

    def __init__(
        self,
        server: Server[Any],
        security: TransportSecuritySettings | None,
        max_body: int,
        lifespan_state: Any,
    ) -> None:
        self._server = server
        self._security = TransportSecurityMiddleware(security)
        self._max_body = max_body
        self._lifespan_state = lifespan_state

    async def answer(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> bool:
        """Answer a plain ``tools/call`` POST whose whole ``body`` was read; ``False`` (and
        nothing sent) for anything else, which the caller hands to the SDK's transport."""
        version = self._era(scope, body)
        if version is None:
            return False
        request = Request(scope, receive)
        refused = await self._security.validate_request(request, is_post=True)
        if refused is not None:
            # The SDK's own refusal, sent here so its warning is logged once.
            await refused(scope, receive, send)
            return True
        if not check_accept_headers(request)[0] or not _json_content(request):
            return False
        message = _tool_call(body)
        if message is None:
            return False
        dctx = _OneReply(
            transport=TransportContext(kind="streamable-http", can_send_request=False),
            request_id=message.id,
            message_metadata=ServerMessageMetadata(request_context=request, can_send_request=False),
        )
        # What the stateless transport gives its connection: born ready, at the header's
        # version (or the spec's default when it is absent).
        connection = Connection.from_envelope(version, None, None)
        reply: JSONRPCResponse | JSONRPCError
        try:
            result = await serve_one(
                self._server,
                dctx,
                message.method,
                message.params,
                connection=connection,
                lifespan_state=self._lifespan_state,
            )
            reply = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        except Exception as exc:  # the dispatcher's exception-to-wire boundary
            error = handler_exception_to_error_data(exc)
            if error is None:
                _DISPATCH_LOG.exception("handler for %r raised", message.method)
                error = ErrorData(code=0, message=str(exc))
            reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        # The transport's JSON response, byte for byte.
        await Response(
            reply.model_dump_json(by_alias=True, exclude_unset=True),
            status_code=200,
            headers={"Content-Type": CONTENT_TYPE_JSON},
        )(scope, receive, send)
        return True

    def _era(self, scope: Scope, body: bytes) -> str | None:
        """The protocol version a handshake-era stateless POST runs at; ``None`` when the
        request is not one (the SDK routes it elsewhere or refuses it)."""
        if scope.get("method") != "POST" or len(body) > self._max_body:
            return None
        version: str | None = None
        declared: str | None = None
        for key, value in scope.get("headers", ()):
            if key == _VERSION_HEADER and version is None:
                version = value.decode("latin-1")
            elif key == b"content-length" and declared is None:
                declared = value.decode("latin-1")
        if declared is not None and not (declared.isdigit() and int(declared) == len(body)):
            return None  # the body limit's own checks, or a body that is not what was declared
        if version is None:
            return DEFAULT_NEGOTIATED_VERSION
        return version if version in HANDSHAKE_PROTOCOL_VERSIONS else None


def _json_content(request: Request) -> bool:
    """The transport's ``Content-Type`` check (after transport security's prefix check)."""
    content_type = request.headers.get("content-type", "")
    parts = [part.strip() for part in content_type.split(";")[0].split(",")]
    return CONTENT_TYPE_JSON in parts


def _tool_call(body: bytes) -> JSONRPCRequest | None:
    """The body as the transport parses and validates it, if it is a ``tools/call`` request."""
    try:
        message = jsonrpc_message_adapter.validate_python(
            pydantic_core.from_json(body), by_name=False
        )
    except (ValueError, ValidationError):
        return None
    if isinstance(message, JSONRPCRequest) and message.method == _METHOD:
        return message
    return None


async def screened_request(
    scope: Scope, receive: Receive, cap: int
) -> tuple[Scope, Receive, bytes | None]:
    """Buffer a POST body (up to ``cap``), screen it for duplicate keys, and replay it; the
    screened body too, when the whole of it was read."""
    if scope.get("method") != "POST":
        return scope, receive, None
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= cap + 4096:
        message = await receive()
        if message["type"] != "http.request":
            return scope, _replay([message]), None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
    body = b"".join(chunks)
    if more:  # over the cap: let the SDK refuse it, untouched
        replay = _replay([{"type": "http.request", "body": body, "more_body": True}], then=receive)
        return scope, replay, None
    screened = screen(body)
    data = screened if isinstance(screened, bytes) else screened.encode()
    if data is not body:
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(data)).encode())]}
    return scope, _replay([{"type": "http.request", "body": data, "more_body": False}]), data


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
