"""CLI commands for the service: ``init``, ``check``, ``serve``, ``mcp``; config-aware helpers.

Exit codes scripts can rely on (shared with :mod:`effectgate._doors.cli.main`): 0 success,
1 failure (not found, refused), 2 usage or invalid configuration, 3 a new alarm (divergence).
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from effectgate._doors.cli._tables import print_table
from effectgate.errors import ConfigError, EffectgateError
from effectgate.store.roles import Store

if TYPE_CHECKING:
    from effectgate._service import Service, ServiceConfig

__all__ = [
    "ConfigOpt",
    "LogFormat",
    "LogFormatOpt",
    "bind_port",
    "open_ledger",
    "port_problem",
    "register",
    "require_extra",
    "service_from",
]

ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        envvar="EFFECTGATE_CONFIG",
        help="Service config file (TOML); see docs/service.md.",
    ),
]

# soft_wrap: a message is one line however narrow the terminal or pipe (tables still fit).
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
EXIT_FAILED, EXIT_USAGE = 1, 2


def _invalid(*messages: str) -> NoReturn:
    for message in messages:
        err.print(f"[red]invalid configuration[/red] {escape(message)}", highlight=False)
    raise typer.Exit(EXIT_USAGE)


def load_service_config(config: str) -> ServiceConfig:
    from effectgate._doors._shared.config_kind import is_gateway_config
    from effectgate._service import load_config

    gateway = is_gateway_config(config)  # operator commands on a gateway's classes
    if gateway:
        # Only here: the gateway's package needs the MCP SDK; a service config loads without.
        require_extra("server")
    try:
        if gateway:
            from effectgate._doors.gateway._config import service_config_of

            return service_config_of(config)
        return load_config(config)
    except ConfigError as exc:
        _invalid(exc.message)


def open_ledger(store: str | None, config: str | None) -> Store:
    """The ledger named by ``--store`` or by the config's ``[store]`` (exactly one)."""
    from effectgate.store import open_store

    if (store is None) == (config is None):
        err.print("give exactly one of --store URL or --config FILE")
        raise typer.Exit(EXIT_USAGE)
    if store is not None:
        return open_store(store)
    cfg = load_service_config(config or "")
    return open_store(cfg.store.url, **dict(cfg.store.options))


def require_extra(extra: str) -> None:
    """Refuse, naming the extra to install, when a command needs a library it did not bring."""
    from effectgate._service import missing_modules

    missing = missing_modules(extra)
    if missing:
        raise ConfigError(
            f"this command needs {', '.join(missing)}, from the {extra!r} extra: "
            f"pip install 'effectgate[{extra}]'"
        )


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


LogFormatOpt = Annotated[
    LogFormat | None,
    typer.Option(
        help="Log lines as text or JSON, timestamped (default: \\[service] log_format, else text)."
    ),
]


def service_from(
    config: str,
    *,
    log_level: str | None = None,
    log_format: LogFormat | None = None,
    create: bool = False,
) -> Service:
    """The service of a config file, after the same checks ``effectgate check`` makes.

    With ``log_level``, logging is set up first (the format from the option, else the config),
    so that what the service says while starting is formatted like the rest.
    """
    from effectgate._service import Service, configure_logging, preflight

    cfg = load_service_config(config)
    if log_level is not None:
        configure_logging(log_level, log_format.value if log_format else cfg.service.log_format)
    checked = preflight(cfg)
    if not checked.ok:
        _invalid(*checked.problems)
    try:
        # Only serve may start a configured ledger that does not exist yet (create=True).
        return Service(cfg, create=create)
    except ConfigError as exc:
        _invalid(exc.message)


def init(
    directory: Annotated[
        Path,
        typer.Option("--dir", help="Where to write effectgate.toml and effectgate_classes.py."),
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    shell: Annotated[
        bool,
        typer.Option(
            "--shell",
            help="Print the tokens as export lines for eval "
            '(eval "$(effectgate init --shell)" sets AGENT_TOKEN, OPERATOR_TOKEN and '
            "EFFECTGATE_URL, where serve listens).",
        ),
    ] = False,
    venue: Annotated[
        str | None,
        typer.Option(
            help="stripe, aws or email: add that real venue's adapter and an example class "
            "(paper: the default); or the base URL of an HTTP venue (effectgate venue serve) "
            "instead of the in-process paper venue."
        ),
    ] = None,
    venue_key_env: Annotated[
        str,
        typer.Option(help="With --venue: the environment variable holding the venue's API key."),
    ] = "EFFECTGATE_VENUE_KEY",
) -> None:
    """Write a working starter config and example action classes (paper venue)."""
    from effectgate._service import load_config, write_starter

    try:
        starter = write_starter(directory, force=force, venue=venue, venue_key_env=venue_key_env)
    except ConfigError as exc:
        err.print(escape(exc.message), highlight=False)
        raise typer.Exit(EXIT_FAILED) from None
    cfg = load_config(starter.config)  # the starter must always be valid
    url = f"http://{cfg.service.host}:{cfg.service.port}"  # where serve will listen
    if shell:
        # stdout is for eval: export lines, and comments a shell ignores.
        print(
            f"# wrote {starter.config} and {starter.classes}; the tokens are shown once "
            "(only their SHA-256 is stored, in the ledger)"
        )
        print(f"export AGENT_TOKEN={shlex.quote(starter.agent_token)}")
        print(f"export OPERATOR_TOKEN={shlex.quote(starter.operator_token)}")
        print(f"export EFFECTGATE_URL={shlex.quote(url)}")
        err.print(
            f"wrote {starter.config}; AGENT_TOKEN, OPERATOR_TOKEN and EFFECTGATE_URL ({url}) "
            f"are set if this ran under eval. next: effectgate serve --config {starter.config}",
            highlight=False,
        )
        return
    console.print(f"wrote {starter.config} and {starter.classes}")
    console.print("[bold]tokens (shown once; only their SHA-256 is stored, in the ledger):[/bold]")
    console.print(f"  agent:    {starter.agent_token}", highlight=False)
    console.print(f"  operator: {starter.operator_token}", highlight=False)
    console.print(
        f"next: effectgate serve --config {starter.config} (it listens on {url})", highlight=False
    )


def check(
    config: Annotated[str, typer.Option("--config", "-c", envvar="EFFECTGATE_CONFIG")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    connect: Annotated[
        bool, typer.Option("--connect", help="Also connect to the PostgreSQL store.")
    ] = False,
) -> None:
    """Check that `serve` will start: the file, credentials, the store (exit 2 naming the key).

    Per class: the venue contract and the delivery claim read from its conformance report, and
    the speculation settings. A gateway's config (``[upstreams]``) is checked as the gateway."""
    from effectgate._doors._shared.check_view import class_summary, print_class_details
    from effectgate._service import preflight

    if _gateway_check(config, as_json=as_json, connect=connect):
        return
    cfg = load_service_config(config)
    checked = preflight(cfg, connect=connect)
    if not checked.ok:
        _invalid(*checked.problems)
    from effectgate._service._venues import class_claims

    claims = class_claims(cfg.registry, cfg.path, {n: a.kind for n, a in cfg.adapters.items()})
    summary: dict[str, Any] = {
        "store": cfg.store.url.split("://")[0],
        "checked": list(checked.notes),
        "adapters": {n: a.kind for n, a in cfg.adapters.items()},
        "classes": {
            ac.name: class_summary(
                ac,
                claims[ac.name],
                policy=ac.name in cfg.policy_names,
                dispatch_timeout=cfg.service.dispatch_timeout,
                in_flight_grace=cfg.service.in_flight_grace,
            )
            for ac in cfg.registry
        },
        "tokens": {t.name: {"role": t.role, "scope": t.scope} for t in cfg.tokens},
    }
    if as_json:
        print(json.dumps(summary))
        return
    table = Table(title=f"{config}: valid")
    for col in ("class", "adapter", "effect class", "tier floor", "policy", "delivery"):
        table.add_column(col)
    for name, c in summary["classes"].items():
        table.add_row(
            name,
            c["adapter"],
            c["effect_class"],
            c["tier_floor"],
            "yes" if c["policy"] else "[red]none: deny all[/red]",
            c["delivery"],
        )
    print_table(console, table)
    print_class_details(console, summary["classes"])
    for note in checked.notes:
        console.print(note, highlight=False, markup=False)


def _gateway_check(config: str, *, as_json: bool, connect: bool) -> bool:
    """``check`` of a gateway's config (True: it was one, and it was checked)."""
    from effectgate._doors._shared.config_kind import is_gateway_config

    if not is_gateway_config(config):
        return False
    require_extra("server")
    from effectgate._doors._shared.check_view import print_class_details
    from effectgate._doors.gateway._check import gateway_check

    try:
        checked = gateway_check(config, connect=connect)
    except ConfigError as exc:
        _invalid(exc.message)
    if not checked.ok:
        _invalid(*checked.problems)
    summary = checked.summary
    if as_json:
        print(json.dumps(summary))
        return True
    table = Table(title=f"{config}: valid (gateway)")
    for col in ("tool", "upstream", "schema", "effect class", "tier floor", "policy", "delivery"):
        table.add_column(col)
    for name, c in summary["classes"].items():
        table.add_row(
            name,
            f"{c['upstream']}:{c['upstream_tool']}",
            c["schema"],
            c["effect_class"],
            c["tier_floor"],
            "yes" if c["policy"] else "[red]none: deny all[/red]",
            c["delivery"],
        )
    for name, h in summary["held"].items():
        table.add_row(name, h["upstream"], "[red]held[/red]", "-", "-", "-", "not served")
    print_table(console, table)
    print_class_details(console, summary["classes"])
    for name, h in summary["held"].items():
        console.print(
            f"{name}: held: the upstream's schema {h['live'][:12]} is not the pinned "
            f"{h['pinned'][:12]} (effectgate gateway-schemas; gateway-accept after review)",
            highlight=False,
        )
    for note in summary["checked"]:
        console.print(note, highlight=False, markup=False)
    return True


def serve(
    config: Annotated[str, typer.Option("--config", "-c", envvar="EFFECTGATE_CONFIG")],
    host: Annotated[str | None, typer.Option(help="Override \\[service] host.")] = None,
    port: Annotated[int | None, typer.Option(help="Override \\[service] port.")] = None,
    log_level: Annotated[LogLevel, typer.Option(help="Log level (uvicorn's too).")] = LogLevel.info,
    log_format: LogFormatOpt = None,
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log/--no-access-log",
            help="One log line per request at INFO (uvicorn's access log). Off under heavy "
            "load: formatting and writing it costs about as much as parsing the request.",
        ),
    ] = True,
    loop: Annotated[
        str,
        typer.Option(
            help="uvicorn's event loop: auto (uvloop when installed), asyncio, uvloop.", hidden=True
        ),
    ] = "auto",
    http: Annotated[
        str,
        typer.Option(
            help="uvicorn's HTTP parser: auto (httptools when installed), h11, httptools.",
            hidden=True,
        ),
    ] = "auto",
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Server processes sharing the port (one GIL each; worker 0 runs the standing "
            "reconciler). More than 1 pays on PostgreSQL; SQLite serialises their writes.",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API (and MCP at /mcp) with the standing reconciler."""
    import ipaddress

    require_extra("server")
    service = service_from(config, log_level=log_level.value, log_format=log_format, create=True)
    settings = service.config.service
    bind = host or settings.host
    if not settings.public and bind != "localhost" and not ipaddress.ip_address(bind).is_loopback:
        err.print(f"{bind} is not a loopback address (set public = true in [service])")
        service.close()
        raise typer.Exit(EXIT_USAGE)
    paper = sorted(n for n, a in service.config.adapters.items() if a.kind == "paper")
    if workers > 1 and paper:
        # Each process would hold a venue of its own: one worker's reconciler would find
        # nothing of the orders another placed, and call them absent.
        err.print(
            f"--workers {workers}: adapter {paper[0]!r} is the in-process paper venue, which "
            "lives in one process; serve one worker, or run the paper venue as a server "
            "(effectgate venue serve) behind an http adapter"
        )
        service.close()
        raise typer.Exit(EXIT_USAGE)
    port = port if port is not None else settings.port
    try:
        # Bound here, not by uvicorn: uvicorn reports a busy port with its start-up failure
        # code 3, which is reconcile's alarm code.
        sock = bind_port(bind, port)
    except OSError as exc:
        service.close()
        err.print(port_problem(bind, port, exc), highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    if workers == 1:
        try:
            _run(
                service,
                sock,
                (bind, port),
                standing=True,
                log_level=log_level.value,
                access_log=access_log,
                loop=loop,
                http=http,
            )
        finally:
            sock.close()
        return
    # The ledger was created and checked above; each worker opens its own after the fork.
    service.close()
    from effectgate._doors.cli.workers import supervise

    def serve_one(index: int) -> None:
        mine = service_from(config, log_level=log_level.value, log_format=log_format)
        _run(
            mine,
            sock,
            (bind, port),
            standing=index == 0,
            log_level=log_level.value,
            access_log=access_log,
            loop=loop,
            http=http,
        )

    if supervise(workers, sock, serve_one):
        err.print("a serve worker stopped on its own; the others were stopped (log above)")
        raise typer.Exit(EXIT_FAILED)


def _run(
    service: Service,
    sock: socket.socket,
    where: tuple[str, int],
    *,
    standing: bool,
    log_level: str,
    access_log: bool,
    loop: str,
    http: str,
) -> None:
    """One uvicorn server for ``service`` on the bound ``sock``; closes ``service``."""
    import uvicorn

    from effectgate._doors.http.app import create_app

    app = create_app(service, standing_reconciler=standing)
    # log_config=None: uvicorn's loggers propagate to the handler set up above (timestamps,
    # --log-format) instead of installing their own.
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=where[0],
            port=where[1],
            log_level=log_level,
            log_config=None,
            server_header=False,
            access_log=access_log,
            # uvloop and httptools when installed (the server extra pulls them in where they
            # build): the event loop and the HTTP parser in C, not Python.
            loop=loop,
            http=http,
        )
    )
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        err.print("serve stopped while starting (the log above says why)")
        raise typer.Exit(EXIT_FAILED) from None
    finally:
        service.close()


def bind_port(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (listening is left to the server)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restart may rebind while old connections are in TIME_WAIT. A
        # listening socket still refuses a second bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def port_problem(host: str, port: int, exc: OSError) -> str:
    """What to tell an operator whose server could not bind ``host:port``."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another effectgate serve or venue "
            "serve?); stop that process or choose another port with --port"
        )
    if exc.errno == errno.EACCES:
        return f"not allowed to bind port {port} on {host} (ports below 1024 need privileges)"
    return f"cannot bind port {port} on {host}: {exc.strerror or exc}"


def mcp(
    config: Annotated[str, typer.Option("--config", "-c", envvar="EFFECTGATE_CONFIG")],
    token_env: Annotated[
        str,
        typer.Option(help="Environment variable holding this agent's token (decides its scope)."),
    ] = "EFFECTGATE_AGENT_TOKEN",  # noqa: S107 - a variable name
    log_format: LogFormatOpt = None,
) -> None:
    """Serve MCP over stdio for one agent (logs go to stderr; stdout is the protocol)."""
    require_extra("server")
    import anyio

    from effectgate._core.principals import Capability
    from effectgate._doors.mcp.server import run_stdio

    token = os.environ.get(token_env, "")
    service = service_from(config, log_level="warning", log_format=log_format)
    try:
        service.tokens.from_token(token).require(Capability.PROPOSE)
    except EffectgateError as exc:
        err.print(f"{token_env}: {exc.message} (an agent token is required)")
        service.close()
        raise typer.Exit(EXIT_USAGE) from None
    try:
        # Checked again on every tool call: a token revoked mid-session stops there.
        anyio.run(run_stdio, service, lambda: service.tokens.from_token(token))
    finally:
        service.close()


def register(app: typer.Typer) -> None:
    """Add the service commands to the main CLI."""
    app.command()(init)
    app.command()(check)
    app.command()(serve)
    app.command()(mcp)
