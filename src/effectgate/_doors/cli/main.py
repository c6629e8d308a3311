"""The operators' command line (Typer + Rich)."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from effectgate._core.states import State
from effectgate._doors.cli import service as cli_service
from effectgate._doors.cli._lazy import LazyGroup
from effectgate._doors.cli._tables import print_table
from effectgate._doors.cli.service import ConfigOpt, LogFormat, LogFormatOpt, open_ledger
from effectgate.errors import ConfigError, EffectgateError

if TYPE_CHECKING:
    from effectgate._execute.reconciler import Reconciler, ReconcileReport
    from effectgate.adapters.http import HttpVenueAdapter
    from effectgate.store.roles import Store

# -h as well as --help; sub-commands inherit it from this context. LazyGroup: the commands
# in _lazy.LAZY are imported when they run, not for --help or a Tab.
app = typer.Typer(
    help="effectgate: the boundary between an agent's proposal and its effect.",
    no_args_is_help=True,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=LazyGroup,
)
venue_app = typer.Typer(
    help="The paper venue: a reference system of record for rehearsals.", no_args_is_help=True
)
ops_app = typer.Typer(help="Inspect ledger operations.", no_args_is_help=True)
app.add_typer(venue_app, name="venue")
app.add_typer(ops_app, name="ops")

#: The help's panels, in the order they are shown; every top-level command is in one
#: (tests/test_cli_starter.py checks it).
PANELS = {
    "Getting started": ("init", "check", "serve", "demo"),
    "Operating": (
        "reconcile", "dispatch", "ops", "approvals", "kill", "breaker", "quarantine",
        "continue", "token", "grants", "policy", "authority", "shadow", "plans",
    ),
    "Evidence": ("divergences", "alerts", "audit", "receipt", "runs", "verify"),
    "Venues and gateway": (
        "venue", "mcp", "gateway", "gateway-schemas", "gateway-accept", "operator-mcp",
    ),
    "Development": ("bench", "simulate", "scan"),
}  # fmt: skip


def _command_name(info: typer.models.CommandInfo) -> str:
    if info.name:
        return info.name
    callback = info.callback.__name__ if info.callback else ""
    return callback.strip("_").replace("_", "-")


def _place_in_panels() -> None:
    """Order the top-level commands by panel and give each its panel."""
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    LazyGroup.panels, LazyGroup.order = panel_of, tuple(panel_of)
    order = {name: i for i, name in enumerate(panel_of)}
    for info in app.registered_commands:
        info.rich_help_panel = panel_of.get(_command_name(info))
    for group in app.registered_groups:
        group.rich_help_panel = panel_of.get(group.name or "")
    app.registered_commands.sort(key=lambda c: order.get(_command_name(c), len(order)))
    app.registered_groups.sort(key=lambda g: order.get(g.name or "", len(order)))


# soft_wrap: a message is one line however narrow the terminal or pipe (tables still fit).
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="EFFECTGATE_STORE",
        help="Ledger URL: sqlite:///PATH or postgresql://... (or give --config).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

# Exit codes scripts can rely on.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ALARM = 0, 1, 2, 3


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"effectgate {version('effectgate')}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """effectgate: the boundary between an agent's proposal and its effect."""


@app.command()
def demo(
    store: Annotated[
        str | None,
        typer.Option(
            "--store", help="Run on this store (postgresql://...); default: temporary SQLite."
        ),
    ] = None,
) -> None:
    """Run every scenario of the ledger contract and show what was observed."""
    from effectgate._checks.demo import run_demo

    logging.basicConfig(level=logging.CRITICAL)  # the table is the output; alarms are expected
    results = run_demo(store)
    table = Table(
        title=f"effectgate demo on {'PostgreSQL' if store else 'SQLite'}", show_lines=False
    )
    for col in ("#", "scenario", "checks", "observed", "held"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(
            r.number,
            r.title,
            r.invariant,
            r.observed,
            "[green]yes[/green]" if r.held else "[red]NO[/red]",
        )
    print_table(console, table)
    failed = [r for r in results if not r.held]
    if failed:
        err.print(f"[red]{len(failed)} guarantee(s) did not hold[/red]")
        raise typer.Exit(EXIT_FAILED)
    console.print(f"[green]all {len(results)} guarantees held[/green]")


@app.command()
def reconcile(
    store: StoreOpt = None,
    venue: Annotated[
        str | None,
        typer.Option(help="Paper-venue base URL the HTTP adapter talks to (with --store)."),
    ] = None,
    venue_key_env: Annotated[
        str, typer.Option(help="Name of the environment variable holding the venue API key.")
    ] = "EFFECTGATE_VENUE_KEY",
    watch: Annotated[bool, typer.Option("--watch", help="Run as a standing job.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between passes with --watch.")] = 5.0,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Settle uncertain rows against the venue and report divergences."""
    from effectgate._execute.alerts import default_sink
    from effectgate._execute.reconciler import Reconciler
    from effectgate.examples import default_registry

    closers: list[Callable[[], None]] = []
    if config is not None:
        if store is not None or venue is not None:
            err.print("--config replaces --store and --venue")
            raise typer.Exit(EXIT_USAGE)
        service = cli_service.service_from(config, log_level="warning", log_format=log_format)
        rec = service.reconciler
        closers.append(service.close)
    else:
        ledger, adapter = _ledger_and_venue(store, venue, venue_key_env, log_format, closers)
        # A sink, even the log-only default, runs the maintenance rules every pass (aged
        # uncertain rows, horizon vs retention) and records orphans and duplicates as alerts.
        rec = Reconciler(
            store=ledger,
            registry=default_registry(adapter="http"),
            adapters={"http": adapter},
            keep_repaired=False,
            alerts=default_sink(),
        )

    def show(report: ReconcileReport) -> None:
        data = {
            "swept": report.swept,
            "ledger_rows": report.ledger_rows,
            "venue_records": report.venue_records,
            "confirmed": report.confirmed,
            "written_off": report.written_off,
            "still_uncertain": report.still_uncertain,
            "quarantined": report.quarantined,
            "probe_errors": report.probe_errors,
            "new_divergences": [list(d) for d in report.new_divergences],
        }
        if as_json:
            print(json.dumps(data), flush=True)
        else:
            console.print(", ".join(f"{k}={v}" for k, v in data.items() if k != "new_divergences"))
            for kind, key, ids, state in report.new_divergences:
                err.print(f"[red]ALARM[/red] {kind} key={key} venue_ids={list(ids)} ledger={state}")

    try:
        if watch:
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            with suppress(KeyboardInterrupt):
                rec.watch(interval, stop, show)
            return
        # A progress bar only where someone watches it: not in --json, not in a pipe or log.
        report = _with_progress(rec) if not as_json and err.is_terminal else rec.run_once()
        show(report)
        if report.alarms:
            raise typer.Exit(EXIT_ALARM)
    finally:
        for close in closers:
            close()


@app.command()
def dispatch(
    store: StoreOpt = None,
    venue: Annotated[
        str | None,
        typer.Option(help="Paper-venue base URL the HTTP adapter talks to (with --store)."),
    ] = None,
    venue_key_env: Annotated[
        str, typer.Option(help="Name of the environment variable holding the venue API key.")
    ] = "EFFECTGATE_VENUE_KEY",
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many rows.")] = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Send the rows a control released (approved, switch lifted, breaker reset): one pass.

    What `effectgate serve` does every dispatch_interval; run it when no service is running.
    """
    from effectgate._core.policy import PolicySet
    from effectgate._execute.dispatcher import Dispatcher
    from effectgate._execute.executor import Gate
    from effectgate.examples import default_registry

    closers: list[Callable[[], None]] = []
    if config is not None:
        if store is not None or venue is not None:
            err.print("--config replaces --store and --venue")
            raise typer.Exit(EXIT_USAGE)
        service = cli_service.service_from(config, log_level="warning", log_format=log_format)
        closers.append(service.close)
        dispatcher = service.dispatcher
    else:
        ledger, adapter = _ledger_and_venue(store, venue, venue_key_env, log_format, closers)
        # No policy is consulted: a released row was decided when it was journalled.
        gate = Gate(
            store=ledger,
            registry=default_registry(adapter="http"),
            adapters={"http": adapter},
            policy=PolicySet(),
        )
        dispatcher = Dispatcher(gate)
    try:
        report = dispatcher.run_once(limit)
    finally:
        for close in closers:
            close()
    if as_json:
        print(json.dumps(report.to_dict()))
    else:
        console.print(", ".join(f"{k}={v}" for k, v in report.to_dict().items()))
    if report.errors:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def divergences(store: StoreOpt = None, as_json: JsonOpt = False, config: ConfigOpt = None) -> None:
    """List every divergence the reconciler has recorded (each once)."""
    ledger = open_ledger(store, config)
    try:
        rows = ledger.list_divergences()
    finally:
        ledger.close()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "kind": d.kind,
                        "op_key": d.op_key,
                        "venue_ids": list(d.venue_ids),
                        "ledger_state": d.ledger_state,
                        "first_seen": d.first_seen,
                    }
                    for d in rows
                ]
            )
        )
        return
    table = Table(title="divergences")
    for col in ("kind", "operation key", "venue ids", "ledger state", "first seen"):
        table.add_column(col)
    for d in rows:
        table.add_row(
            d.kind,
            d.op_key,
            ", ".join(d.venue_ids),
            d.ledger_state or "-",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.first_seen)),
        )
    print_table(console, table)


@ops_app.command("list")
def ops_list(
    store: StoreOpt = None,
    state: Annotated[str | None, typer.Option(help="Filter by state.")] = None,
    action: Annotated[str | None, typer.Option(help="Filter by action class.")] = None,
    older_than: Annotated[
        float | None, typer.Option(help="Only rows not updated for this many seconds.")
    ] = None,
    limit: int = 100,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    scope: Annotated[str | None, typer.Option(help="Filter by tenant scope.")] = None,
) -> None:
    """List operations, most recently updated first."""
    if state is not None and state not in {s.value for s in State}:
        err.print(f"unknown state {state!r}; one of: {', '.join(s.value for s in State)}")
        raise typer.Exit(EXIT_USAGE)
    ledger = open_ledger(store, config)
    try:
        rows = ledger.list_operations(
            state=State(state) if state else None,
            action=action,
            limit=limit,
            scope=scope,
            older_than=time.time() - older_than if older_than is not None else None,
        )
    finally:
        ledger.close()
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
        return
    table = Table(title=f"operations ({len(rows)})")
    for col in ("scope", "operation id", "action", "state", "venue id", "updated"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.scope,
            r.operation_id,
            r.action,
            r.state.value,
            r.venue_id or "-",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.updated_at)),
        )
    print_table(console, table)


@ops_app.command("show")
def ops_show(
    operation_id: str,
    store: StoreOpt = None,
    scope: str = "default",
    config: ConfigOpt = None,
    as_json: JsonOpt = True,
) -> None:
    """Show one operation with its intent snapshot and audit trail (JSON).

    ``outcome`` and ``message`` are what an agent is told; ``cause`` says why a ``submitted``
    row's outcome is unknown (from its audit trail).
    """
    from effectgate._doors._shared.models import describe
    from effectgate._execute.record import uncertain_cause

    ledger = open_ledger(store, config)
    try:
        row = ledger.get(scope, operation_id)
        if row is None:
            err.print(f"no operation {operation_id!r} in scope {scope!r}")
            raise typer.Exit(EXIT_FAILED)
        entries = ledger.audit_entries(scope=scope, operation_id=operation_id, limit=100_000)
        continuations = _continuation_view(ledger, scope, row)
    finally:
        ledger.close()
    if row.state is State.SUBMITTED:
        row = replace(row, cause=uncertain_cause(entries))
    outcome, message = describe(row)
    trail = [{"seq": e.seq, "at": e.at, "kind": e.kind, "detail": dict(e.detail)} for e in entries]
    # With --config: what effectgate may claim about this class's delivery (docs/adapters.md).
    delivery: dict[str, str] | None = None
    if config is not None:
        from effectgate._service._venues import config_claims

        delivery = config_claims(cli_service.load_service_config(config)).get(row.action)
    print(
        json.dumps(
            {
                **row.to_dict(),
                "dispatch_id": row.dispatch_id,
                "outcome": outcome.value,
                "cause": row.cause,
                "message": message,
                "intent": dict(row.intent),
                "effect": dict(row.effect),
                "audit": trail,
                **({"delivery": delivery} if delivery is not None else {}),
                **continuations,
            },
            indent=2,
        )
    )


def _continuation_view(ledger: Store, scope: str, row: object) -> dict[str, object]:
    """The continuation chain of an original (docs/continuations.md), or a continuation's
    link to its original."""
    from effectgate._execute.continuations import Chain
    from effectgate.store.base import Operation

    if not isinstance(row, Operation):
        return {}
    link = ledger.continuation_of(scope, row.operation_id)
    if link is not None:
        return {"continuation_of": link.to_dict() | {"original": link.original_id}}
    links = tuple(
        (lk, ledger.get(scope, lk.operation_id))
        for lk in ledger.continuations(scope, row.operation_id)
    )
    return {"continuations": Chain(row, links).to_dict()}


@venue_app.command("serve")
def venue_serve(
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1.")] = 8700,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key clients must present.")
    ] = "EFFECTGATE_VENUE_KEY",
    ignore_key: Annotated[
        bool, typer.Option("--ignore-key", help="Ignore Idempotency-Key (shows duplicate effects).")
    ] = False,
    read_lag: Annotated[float, typer.Option(help="Seconds before a record becomes visible.")] = 0.0,
    sandbox: Annotated[
        str | None, typer.Option(help="Serve dry runs: honest, naive or evicting keys.")
    ] = None,
    sandbox_lifetime: Annotated[
        float, typer.Option(help="Seconds a dry run's verdict lives.", min=0.001)
    ] = 60.0,
) -> None:
    """Run the paper venue as an HTTP server."""
    from effectgate.adapters._paper_sandbox import PaperSandbox, SandboxMode
    from effectgate.adapters._paper_server import serve_paper_venue
    from effectgate.adapters.paper import PaperVenue

    key = os.environ.get(api_key_env)
    if not key:
        err.print(f"set {api_key_env} to the API key clients must present")
        raise typer.Exit(EXIT_USAGE)
    if sandbox is not None and sandbox not in {m.value for m in SandboxMode}:
        err.print(f"--sandbox must be one of {', '.join(m.value for m in SandboxMode)}")
        raise typer.Exit(EXIT_USAGE)
    paper = PaperVenue(honour_key=not ignore_key, read_lag=read_lag)
    try:
        server = serve_paper_venue(
            paper,
            host=host,
            port=port,
            api_key=key,
            sandbox=(
                PaperSandbox(paper, mode=sandbox, lifetime=sandbox_lifetime) if sandbox else None
            ),
        )
    except OSError as exc:
        err.print(cli_service.port_problem(host, port, exc), highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    console.print(
        f"paper venue on {server.url} (honour key: {not ignore_key}, read lag: {read_lag:g}s)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


cli_service.register(app)
_place_in_panels()


def _ledger_and_venue(
    store: str | None,
    venue: str | None,
    venue_key_env: str,
    log_format: LogFormat | None,
    closers: list[Callable[[], None]],
) -> tuple[Store, HttpVenueAdapter]:
    """The ledger and the HTTP venue of ``--store URL --venue URL`` (closed by ``closers``)."""
    from effectgate._service import configure_logging
    from effectgate.adapters.http import HttpVenueAdapter

    if store is None or venue is None:
        err.print("give --config FILE, or --store URL and --venue URL")
        raise typer.Exit(EXIT_USAGE)
    configure_logging("warning", log_format.value if log_format else "text")
    ledger = open_ledger(store, None)
    adapter = HttpVenueAdapter(venue, credential_env=venue_key_env)
    closers += [adapter.close, ledger.close]
    return ledger, adapter


def main() -> None:
    try:
        app()
    except EffectgateError as exc:
        # escape(): "[code]" would otherwise be read as Rich markup and vanish.
        err.print(f"[red]error[/red] {escape(f'[{exc.code}]')} {escape(exc.message)}")
        # A configuration that cannot work (a ledger that is not there included) is a usage
        # error, 2, like every other config error; 3 stays the reconciler's alarm.
        raise SystemExit(EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED) from None


def _with_progress(rec: Reconciler) -> ReconcileReport:
    """One pass with a progress bar on stderr (the ledger's size is the total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    total = sum(rec.store.count_by_state().values())
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("sweeping ledger", total=total)
        rec.progress = lambda done: bar.update(task, completed=done)
        try:
            return rec.run_once()
        finally:
            rec.progress = None
