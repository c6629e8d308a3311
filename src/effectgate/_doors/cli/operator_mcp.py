"""``effectgate operator-mcp``: the operator MCP tool set over stdio (docs/authority.md).

Imports the MCP SDK only when run, so the CLI works without the ``server`` extra.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from effectgate._core.principals import Capability
from effectgate.errors import EffectgateError

__all__ = ["register"]


def operator_mcp(
    config: Annotated[str, typer.Option("--config", "-c", envvar="EFFECTGATE_CONFIG")],
    token_env: Annotated[
        str, typer.Option(help="Environment variable holding an approver's or operator's token.")
    ] = "EFFECTGATE_APPROVER_TOKEN",  # noqa: S107 - a variable name
) -> None:
    """Serve the operator MCP tool set (approvals) over stdio, on an approver's credential."""
    from effectgate._doors.cli.service import require_extra, service_from

    require_extra("server")
    import anyio

    from effectgate._doors.mcp.operator import run_operator_stdio

    token = os.environ.get(token_env, "")
    service = service_from(config, log_level="warning", log_format=None)
    try:
        service.tokens.from_token(token).require(Capability.APPROVE)
    except EffectgateError as exc:
        service.close()
        raise typer.BadParameter(f"{token_env}: {exc.message}") from None
    try:
        # Checked again on every tool call: a token revoked mid-session stops there.
        anyio.run(run_operator_stdio, service, lambda: service.tokens.from_token(token))
    finally:
        service.close()


def register(app: typer.Typer) -> None:
    app.command("operator-mcp")(operator_mcp)
