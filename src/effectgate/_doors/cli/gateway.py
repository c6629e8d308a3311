"""CLI: ``effectgate gateway`` (serve the MCP gateway), ``gateway-schemas`` and
``gateway-accept`` (the schema pins), and ``scan`` (calls that bypass the boundary)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli.service import require_extra
from effectgate.errors import EffectgateError

__all__ = ["register"]

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
EXIT_USAGE = 2
ACCEPT_AUDIT = "gateway_schema_accepted"

GatewayConfigOpt = Annotated[
    str, typer.Option("--config", "-c", envvar="EFFECTGATE_GATEWAY_CONFIG", help="Gateway TOML.")
]


def gateway(
    config: GatewayConfigOpt,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio.")
    ] = False,
    token_env: Annotated[
        str, typer.Option(help="stdio: environment variable holding the agent's token.")
    ] = "EFFECTGATE_AGENT_TOKEN",  # noqa: S107 - a variable name
) -> None:
    """Serve MCP in front of the upstream MCP servers the config names (stdio by default)."""
    require_extra("server")
    import anyio

    from effectgate._doors.gateway import Gateway, gateway_app, load_gateway, run_gateway_stdio

    path = Path(config)
    gw = Gateway(load_gateway(path), base_dir=path.resolve().parent, create=http)
    try:
        for name, (pin, live) in gw.held().items():
            err.print(f"held: {name} (pinned {pin[:12]}, upstream now {live[:12]})")
        gw.start_schema_watch()
        if http:
            import uvicorn

            from effectgate._doors.cli.service import bind_port

            settings = gw.service.config.service
            sock = bind_port(settings.host, settings.port)
            app = gateway_app(gw, standing_reconciler=True)
            try:
                uvicorn.Server(uvicorn.Config(app, log_config=None, server_header=False)).run(
                    sockets=[sock]
                )
            finally:
                sock.close()
            return
        token = os.environ.get(token_env, "")
        try:
            gw.service.tokens.from_token(token).require(Capability.PROPOSE)
        except EffectgateError as exc:
            err.print(f"{token_env}: {exc.message} (an agent token is required)")
            raise typer.Exit(EXIT_USAGE) from None
        gw.service.start_reconciler()
        gw.service.start_dispatcher()
        anyio.run(run_gateway_stdio, gw, lambda: gw.service.tokens.from_token(token))
    finally:
        gw.close()


def gateway_schemas(
    config: GatewayConfigOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Each governed tool's pinned schema digest against its upstream's live one."""
    rows = _schema_rows(config)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            console.print(
                f"{row['tool']:<24} {row['status']:<8} pinned {row['pinned'][:12]} "
                f"live {str(row['live'])[:12]}",
                highlight=False,
            )
    # Exit 1 while any tool is held: a deployment check can gate on it.
    if any(r["status"] != "ok" for r in rows):
        raise typer.Exit(1)


def gateway_accept(
    config: GatewayConfigOpt,
    tool: Annotated[str, typer.Option(help="The governed tool whose new schema you accept.")],
    sha256: Annotated[
        str, typer.Option(help="The live digest you reviewed (gateway-schemas shows it).")
    ],
    reason: Annotated[str | None, typer.Option(help="Why (audited).")] = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Accept a drifted upstream schema: re-pin it in the config file, audited in the ledger.

    The digest must be the one the upstream serves now: a schema that changed again after you
    reviewed it is not accepted."""
    from effectgate._doors.gateway import load_gateway
    from effectgate.store import open_store

    rows = {r["tool"]: r for r in _schema_rows(config)}
    if tool not in rows:
        err.print(f"no governed tool {tool!r} (known: {', '.join(sorted(rows))})")
        raise typer.Exit(EXIT_USAGE)
    row = rows[tool]
    if row["live"] != sha256:
        err.print(f"{tool}: the upstream serves {row['live']}, not {sha256}; review it again")
        raise typer.Exit(EXIT_USAGE)
    if row["pinned"] == sha256:
        console.print(f"{tool}: already pinned to {sha256[:12]}; nothing to do")
        return
    path = Path(config)
    text = path.read_text(encoding="utf-8")
    if text.count(row["pinned"]) != 1:
        err.print(f"{tool}: the pinned digest appears {text.count(row['pinned'])} times in {path}")
        raise typer.Exit(EXIT_USAGE)
    cfg = load_gateway(path)
    from effectgate._doors.gateway._config import bind

    bound_store = bind(cfg, {}, base_dir=path.resolve().parent).service.store
    # The operator's first act on a new gateway: its ledger may not exist yet.
    ledger = open_store(bound_store.url, create=True, **dict(bound_store.options))
    try:
        actor = acting(ledger, token_env, Capability.OPERATE)
        ledger.append_audit(
            ACCEPT_AUDIT,
            {
                "tool": tool,
                "upstream": cfg.tools[tool].upstream,
                "pinned_sha256": row["pinned"],
                "accepted_sha256": sha256,
                "by": actor,
                "reason": reason,
            },
            now=time.time(),
        )
    finally:
        ledger.close()
    # Audited first: a pin changed without its audit line is what this refuses to allow.
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text.replace(row["pinned"], sha256), encoding="utf-8")
    tmp.replace(path)
    console.print(f"{tool}: accepted {sha256[:12]} (was {row['pinned'][:12]}); restart the gateway")


def _schema_rows(config: str) -> list[dict[str, str]]:
    from effectgate._doors.gateway import load_gateway
    from effectgate._doors.gateway._config import schema_digest
    from effectgate._doors.gateway._upstream import UpstreamLink

    cfg = load_gateway(config)
    rows: list[dict[str, str]] = []
    for name, spec in cfg.upstreams.items():
        link = UpstreamLink(spec)
        try:
            listed = {t.name: t for t in link.list_tools()}
        finally:
            link.close()
        for tname, gt in cfg.tools.items():
            if gt.upstream != name:
                continue
            found = listed.get(gt.tool)
            live = schema_digest(found.input_schema) if found is not None else "missing"
            status = "ok" if live == gt.pin else ("missing" if found is None else "drifted")
            rows.append({"tool": tname, "status": status, "pinned": gt.pin, "live": live})
    return rows


def scan(
    paths: Annotated[list[str], typer.Argument(help="Files or directories to scan.")],
    rules: Annotated[
        str | None, typer.Option(help="TOML with \\[scan] consequential/gated pattern lists.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Report consequential calls that bypass effectgate (exit 1 if any: fit for CI)."""
    from effectgate._checks.scan import load_rules, scan_paths

    extra, gated = load_rules(rules) if rules else ([], [])
    report = scan_paths(paths, consequential=extra, gated=gated)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for f in report.findings:
            console.print(f"{f.file}:{f.line}:{f.column}: ungated {f.call}", highlight=False)
        for file, why in report.skipped:
            err.print(f"{file}: not scanned ({why})")
        console.print(
            f"{report.files} files: {len(report.findings)} ungated consequential calls, "
            f"{len(report.gated)} calls through the gate, {len(report.in_adapters)} inside "
            "effectgate adapters",
            highlight=False,
        )
    if report.findings:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(gateway)
    app.command("gateway-schemas")(gateway_schemas)
    app.command("gateway-accept")(gateway_accept)
    app.command()(scan)
