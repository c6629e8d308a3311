"""The HTTP door's trace context: a caller's W3C ``traceparent`` becomes the parent of the
gate's spans (effectgate._execute.tracing). A pass-through when tracing is off."""

from __future__ import annotations

from typing import Any

from effectgate._execute import tracing as _tracing

__all__ = ["TraceContext", "mcp_carrier"]

_HEADERS = (b"traceparent", b"tracestate")


class TraceContext:
    """Pure ASGI middleware: no per-request work unless tracing is on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _tracing.enabled():
            await self.app(scope, receive, send)
            return
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", ())
            if k in _HEADERS
        }
        with _tracing.attach_remote(carrier):
            await self.app(scope, receive, send)


def mcp_carrier(meta: Any) -> dict[str, str] | None:
    """``traceparent``/``tracestate`` from an MCP request's ``_meta`` (None: none, or off)."""
    if not _tracing.enabled() or not isinstance(meta, dict):
        return None
    return {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
