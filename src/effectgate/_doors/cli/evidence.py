"""Operator commands for evidence: shadow mode and its report, the audit log, alerts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt
from effectgate._doors.cli._common import (
    JsonOpt,
    ScopeOpt,
    StoreOpt,
    acting_operator,
    console,
    err,
    json_arg,
    operator_on,
    print_json,
    timestamp,
    when_arg,
)
from effectgate._doors.cli._tables import print_table

__all__ = ["register"]

EXIT_ALARM = 3

shadow_app = typer.Typer(
    help="Shadow mode: record instead of send; compare with the incumbent.", no_args_is_help=True
)
audit_app = typer.Typer(help="The hash-chained audit log.", no_args_is_help=True)
alerts_app = typer.Typer(
    help="Alerts from breakers and the maintenance rules.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the evidence command groups to the main CLI."""
    for sub, name in ((shadow_app, "shadow"), (audit_app, "audit"), (alerts_app, "alerts")):
        app.add_typer(sub, name=name)
    from effectgate._doors.cli import anchor as cli_anchor

    cli_anchor.register(audit_app)
    cli_anchor.register_retention(audit_app)
    app.command("verify")(cli_anchor.verify_command)


# --- shadow ------------------------------------------------------------------------------------


@shadow_app.command("on")
def shadow_on(action: str, store: StoreOpt, token_env: TokenEnvOpt = TOKEN_ENV) -> None:
    """Put ACTION in shadow mode: the pipeline runs, nothing is sent, rows end shadowed."""
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        op.set_shadow(action, True, operator=actor)
    console.print(f"shadow mode ON for {action}")


@shadow_app.command("off")
def shadow_off(action: str, store: StoreOpt, token_env: TokenEnvOpt = TOKEN_ENV) -> None:
    """Take ACTION out of shadow mode (its shadow history is kept)."""
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        op.set_shadow(action, False, operator=actor)
    console.print(f"shadow mode off for {action}")


@shadow_app.command("feed")
def shadow_feed(
    correlation_id: str,
    store: StoreOpt,
    action: Annotated[str, typer.Option(help="Action class of the outcome.")],
    source: Annotated[str, typer.Option(help="Who the incumbent is (audited).")],
    intent: Annotated[
        str | None,
        typer.Option(
            help="What the incumbent did, as an intent JSON object; omit for 'did nothing'."
        ),
    ] = None,
) -> None:
    """Record what the incumbent actually did for CORRELATION_ID."""
    body = json_arg(intent, "--intent") if intent is not None else None
    if body is not None and not isinstance(body, dict):
        raise typer.BadParameter("--intent must be a JSON object")
    with operator_on(store) as op:
        fp = op.feed_incumbent(correlation_id, action, body, source=source)
    console.print(f"{correlation_id}: incumbent {'did nothing' if fp is None else fp[:12]}")


@shadow_app.command("windows")
def shadow_windows(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """The comparison windows a new proposer model or harness version opened, each with the
    disagreement rate measured in it so far."""
    with operator_on(store) as op:
        pairs = op.model_windows(action)
    if as_json:
        print_json([{**w.to_dict(), "report": r.to_dict()} for w, r in pairs])
        return
    for w, r in pairs:
        console.print(
            f"{w.action}: model {w.model} harness {w.harness_version} from "
            f"{timestamp(w.opened_at)} to {timestamp(w.closes_at)}: compared {r.compared}, "
            f"disagreement rate {r.disagreement_rate}"
            + ("" if w.outcome is None else f"; ended {w.outcome} at {timestamp(w.closed_at)}")
        )


@shadow_app.command("report")
def shadow_report(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    window: Annotated[
        float | None, typer.Option(help="Also split by time windows of this many seconds.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only cases from then on (epoch seconds or ISO 8601).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only cases before then (epoch seconds or ISO 8601).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The disagreement rate between the agent's proposals and the incumbent, per model,
    harness version (and window), and the disagreeing cases."""
    with operator_on(store) as op:
        report = op.shadow_report(
            action,
            window=window,
            since=when_arg(since, "--since"),
            until=when_arg(until, "--until"),
        )
    data = report.to_dict()
    if as_json:
        print_json(data)
        return
    rate = report.disagreement_rate
    console.print(
        f"compared {report.compared}: agreed {len(report.agreed)} (neither acted: "
        f"{report.agreed_inaction}), disagreed {len(report.disagreed)}, disagreement rate "
        f"{'-' if rate is None else f'{rate:.1%}'}; awaiting the incumbent "
        f"{len(report.awaiting_incumbent)}"
    )
    table = Table(title="by model and harness version" + (" and window" if window else ""))
    for col in ("model", "harness", "window", "compared", "disagreed", "rate", "awaiting"):
        table.add_column(col)
    for g in report.groups():
        table.add_row(
            g.model or "-",
            g.harness_version or "-",
            "-" if g.window_start is None else f"{timestamp(g.window_start)} +{window:g}s",
            str(g.compared),
            str(g.disagreed),
            "-" if g.disagreement_rate is None else f"{g.disagreement_rate:.1%}",
            str(g.awaiting_incumbent),
        )
    print_table(console, table)
    for case in data["cases"]:  # type: ignore[attr-defined]
        console.print(
            f"  {case['correlation_id']}: agent {case['agent']} "
            f"shadow={json.dumps(case['shadow'])} incumbent={json.dumps(case['incumbent'])}"
        )


# --- audit ---------------------------------------------------------------------------------


@audit_app.command("verify")
def audit_verify(
    store: StoreOpt,
    expect_head: Annotated[
        list[str] | None,
        typer.Option(
            help="An anchored head LANE:SEQ:HASH that must still be in the log (repeatable)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify the whole hash chain; exit 3 and say where if anything was tampered with."""
    heads: dict[int, tuple[int, str]] = {}
    for item in expect_head or []:
        parts = item.split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            raise typer.BadParameter(f"--expect-head {item!r} is not LANE:SEQ:HASH")
        heads[int(parts[0])] = (int(parts[1]), parts[2])
    with operator_on(store) as op:
        result = op.verify_audit(expect_heads=heads)
    if as_json:
        print_json(result.to_dict())
    else:
        for f in result.findings:
            err.print(f"[red]TAMPERED[/red] {f.problem}: {f.message}")
        console.print(
            f"checked {result.checked} entries: {'intact' if result.ok else 'NOT intact'}"
        )
        for lane, seq, by in result.covered:
            console.print(f"  anchored head {lane}:{seq} was pruned: covered by checkpoint {by}")
        for lane, (seq, h) in sorted(result.heads.items()):
            console.print(f"  head {lane}:{seq}:{h}  (anchor this)")
    if not result.ok:
        raise typer.Exit(EXIT_ALARM)


@audit_app.command("export")
def audit_export(
    operation_id: str,
    store: StoreOpt,
    out: Annotated[Path, typer.Option(help="Where to write the bundle (JSON).")],
    scope: ScopeOpt = "default",
) -> None:
    """Write OPERATION_ID's evidence bundle; it verifies offline (`audit verify-bundle`)."""
    with operator_on(store) as op:
        bundle = op.export_evidence(operation_id, scope=scope)
    out.write_text(json.dumps(bundle, indent=1, sort_keys=True))
    console.print(f"wrote {len(bundle['entries'])} entries of {scope}:{operation_id} to {out}")


@audit_app.command("verify-bundle")
def audit_verify_bundle(path: Path, as_json: JsonOpt = False) -> None:
    """Verify an evidence bundle offline (no store needed); exit 3 if it was tampered with."""
    from effectgate._evidence.audit import verify_bundle

    try:
        bundle = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from None
    result = verify_bundle(bundle)
    if as_json:
        print_json(result.to_dict())
    else:
        for f in result.findings:
            err.print(f"[red]TAMPERED[/red] {f.problem}: {f.message}")
        console.print(f"{result.checked} entries: {'intact' if result.ok else 'NOT intact'}")
    if not result.ok:
        raise typer.Exit(EXIT_ALARM)


# --- alerts --------------------------------------------------------------------------------


@alerts_app.command("check")
def alerts_check(
    store: StoreOpt,
    webhook: Annotated[str | None, typer.Option(help="Also POST new alerts to this URL.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the maintenance rules now; new alerts are logged (and posted); exit 3 if any."""
    from effectgate._execute.alerts import AlertSink, MultiSink, WebhookAlertSink
    from effectgate._execute.maintenance import check_maintenance
    from effectgate._service import configure_logging

    configure_logging("warning")
    # Every alert is logged at ERROR by deliver(); a LogAlertSink here logged each one twice.
    sinks: list[AlertSink] = [WebhookAlertSink(webhook)] if webhook else []
    with operator_on(store) as op:
        raised = check_maintenance(op.store, op.registry, MultiSink(sinks), now=time.time())
    if as_json:
        print_json([a.to_dict() for a in raised])
    else:
        console.print(f"{len(raised)} new alert(s)")
    if raised:
        raise typer.Exit(EXIT_ALARM)


@alerts_app.command("list")
def alerts_list(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Every alert raised so far (each once)."""
    with operator_on(store) as op:
        rows = op.store.list_alerts()
    if as_json:
        print_json([a.to_dict() for a in rows])
        return
    for a in rows:
        console.print(f"{timestamp(a.at)}  {a.kind}  {a.message}")
