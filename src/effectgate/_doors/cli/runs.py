"""``effectgate runs list|show|seal|snapshot|verify``: run-call journals from the CLI.

The same operations as ``/v1/admin/runs``, on ``--config FILE`` or ``--store URL``. ``seal``
and ``snapshot`` act as a principal (an operator, from ``--token-env``) or, without a token, as
``os:<user>`` with the store's credentials. ``verify FILE`` needs no ledger: it checks a
snapshot offline (canonical form, digest, order, bounds, bindings) and exits 1 when it fails.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effectgate._core import run_snapshot
from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli._tables import print_table
from effectgate._doors.cli.service import ConfigOpt
from effectgate._doors.cli.tokens import JsonOpt, StoreOpt, _ledger
from effectgate._execute.runs import RunSealer, SealRequest
from effectgate.errors import RunNotFound, RunSnapshotInvalid

__all__ = ["register"]

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
EXIT_FAILED = 1

runs_app = typer.Typer(
    help="Run-call journals: list runs, show one, seal it (for good), take and verify its "
    "recovery snapshot.",
    no_args_is_help=True,
)

ScopeOpt = Annotated[str, typer.Option(help="The run's tenant scope.")]


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


@runs_app.command("list")
def list_runs(
    scope: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    sealed: Annotated[
        bool | None, typer.Option("--sealed/--open", help="Only sealed, or only open runs.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs, newest first, with their calls, unfinished calls, effects and seal."""
    with _ledger(store, config) as (ledger, _):
        runs = ledger.list_runs(scope, sealed=sealed, limit=limit)
    if as_json:
        print(json.dumps([r.to_dict() for r in runs]))
        return
    table = Table(title=f"runs ({len(runs)})")
    for col in ("scope", "run", "created", "calls", "unfinished", "effects", "sealed"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            r.scope,
            r.run_id,
            _when(r.created_at),
            str(r.calls),
            str(r.open_calls),
            str(r.effects),
            "-" if r.seal is None else f"{_when(r.seal.sealed_at)} by {r.seal.actor}",
        )
    print_table(console, table)


@runs_app.command("show")
def show(
    run_id: str,
    scope: ScopeOpt = "default",
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One run: its seal, every call (digests and sizes only) and its kept snapshots."""
    with _ledger(store, config) as (ledger, _):
        run = ledger.get_run(scope, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in scope {scope!r}")
        calls, after = [], None
        while True:
            page = ledger.list_run_calls(scope, run_id, after=after, limit=1000)
            calls += page
            if len(page) < 1000:
                break
            after = page[-1].call.slot
        snapshots = ledger.list_run_snapshots(scope, run_id)
    if as_json:
        print(
            json.dumps(
                {
                    **run.to_dict(),
                    "calls": [c.to_dict() for c in calls],
                    "snapshots": [
                        {"digest": d, "entries": n, "size_bytes": b, "created_at": at, "by": by}
                        for d, n, b, at, by in snapshots
                    ],
                }
            )
        )
        return
    seal = run.seal
    state = "open" if seal is None else f"sealed {_when(seal.sealed_at)} by {seal.actor}"
    console.print(
        f"run {run_id} ({scope}): {run.calls} calls, {run.open_calls} unfinished, "
        f"{run.effects} effects; {state}" + ("" if seal is None else f": {seal.reason}"),
        highlight=False,
    )
    table = Table(title="calls")
    for col in ("slot", "call", "kind", "target", "request", "started", "returned", "effects"):
        table.add_column(col)
    for c in calls:
        target = c.call.tool or f"{c.call.provider}/{c.call.model}"
        table.add_row(
            c.call.slot,
            c.call.call_id,
            c.call.kind.value,
            target,
            f"{c.call.request_digest[:12]} ({c.call.request_bytes} B)",
            _when(c.started_at),
            "uncertain" if c.completed_at is None else _when(c.completed_at),
            str(c.effects),
        )
    print_table(console, table)
    for d, n, b, at, by in snapshots:
        console.print(f"snapshot {d} ({n} entries, {b} B) {_when(at)} by {by}", highlight=False)


@runs_app.command("seal")
def seal(
    run_id: str,
    reason: Annotated[str, typer.Option(help="Why (audited; required).")],
    scope: ScopeOpt = "default",
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Seal RUN_ID for good: nothing more is admitted or recorded in it (no reopen)."""
    with _ledger(store, config) as (ledger, tokens):

        def authorize(request: SealRequest) -> None:
            acting(ledger, token_env, Capability.OPERATE, scope=request.scope, config_tokens=tokens)

        actor = acting(ledger, token_env, Capability.OPERATE, scope=scope, config_tokens=tokens)
        done = RunSealer(ledger, authorize=authorize).seal(
            run_id, actor=actor, reason=reason, scope=scope
        )
    if as_json:
        print(json.dumps(done.to_dict()))
        return
    console.print(
        f"run {run_id} ({scope}) sealed {_when(done.sealed_at)} by {done.actor}: {done.reason}",
        highlight=False,
    )


@runs_app.command("snapshot")
def snapshot(
    run_id: str,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the document here (default stdout).")
    ] = None,
    scope: ScopeOpt = "default",
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Take the sealed run's recovery snapshot (kept in the ledger by its digest)."""
    with _ledger(store, config) as (ledger, tokens):
        actor = acting(ledger, token_env, Capability.OPERATE, scope=scope, config_tokens=tokens)
        document, digest, new = ledger.snapshot_run(scope, run_id, now=time.time(), actor=actor)
    if out is None:
        sys.stdout.buffer.write(document)
        sys.stdout.flush()
    else:
        out.write_bytes(document)
    err.print(
        f"snapshot {digest} ({len(document)} B){'' if new else ', kept already'}", highlight=False
    )


@runs_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="A snapshot file (from `runs snapshot`).")],
    as_json: JsonOpt = False,
) -> None:
    """Verify a snapshot offline; exit 1 with the reason when it does not verify."""
    size = file.stat().st_size
    if size > run_snapshot.MAX_BYTES:
        raise RunSnapshotInvalid(f"{file} is {size} bytes, over the snapshot bound")
    summary = run_snapshot.verify(file.read_bytes())
    if as_json:
        print(json.dumps({"ok": True, **summary}))
        return
    console.print(
        f"OK: run {summary['run_id']} ({summary['scope']}), digest {summary['digest']}: "
        f"{summary['calls']} calls ({summary['unfinished_calls']} unfinished), "
        f"{summary['provider_receipts']} provider receipts, {summary['effects']} effects",
        highlight=False,
    )
