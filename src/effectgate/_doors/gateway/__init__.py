"""The MCP gateway: effectgate in front of unmodified upstream MCP servers (docs/gateway.md)."""

from __future__ import annotations

from effectgate._doors.gateway._adapter import ReadTools, ToolBinding, UpstreamAdapter
from effectgate._doors.gateway._config import (
    Bound,
    GatewayConfig,
    bind,
    load_gateway,
    parse_gateway,
    schema_digest,
)
from effectgate._doors.gateway._server import (
    Gateway,
    build_gateway_server,
    gateway_app,
    run_gateway_stdio,
)
from effectgate._doors.gateway._upstream import UpstreamLink, UpstreamSpec

__all__ = [
    "Bound",
    "Gateway",
    "GatewayConfig",
    "ReadTools",
    "ToolBinding",
    "UpstreamAdapter",
    "UpstreamLink",
    "UpstreamSpec",
    "bind",
    "build_gateway_server",
    "gateway_app",
    "load_gateway",
    "parse_gateway",
    "run_gateway_stdio",
    "schema_digest",
]
