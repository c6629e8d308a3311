"""Operator commands: kill switches, breakers, approvals, staged authority, shadow, audit, alerts.

Every command that changes a control or answers an approval acts as a principal: the token in
``--token-env`` (default ``EFFECTGATE_OPERATOR_TOKEN``), checked like the HTTP API checks it,
or, without one, the OS user as ``os:<user>`` with the store's credentials (see
:mod:`effectgate._frontends._cli_actor`). Bad input (an unknown class, malformed JSON, a
malformed envelope value) is refused before the store is touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from effectgate._core.principals import Capability
from effectgate._execute.operator import Operator
from effectgate._frontends._cli_actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._frontends._tables import print_table

__all__ = ["register"]

# soft_wrap: a message is one line however narrow the terminal or pipe (tables still fit).
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        "--config",
        envvar="EFFECTGATE_STORE",
        help="Ledger URL (sqlite:///PATH, postgresql://...) or the service's config file "
        "(--config effectgate.toml: its store and its action classes).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
ScopeOpt = Annotated[str, typer.Option(help="Tenant scope of the operation.")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why (audited).")]

EXIT_USAGE, EXIT_ALARM = 2, 3

kill_app = typer.Typer(
    help="Kill switches per action class (hold new dispatches).", no_args_is_help=True
)
breaker_app = typer.Typer(help="Anomaly circuit breakers.", no_args_is_help=True)
approvals_app = typer.Typer(help="Pending approvals: list, approve, refuse.", no_args_is_help=True)
authority_app = typer.Typer(
    help="Staged authority: envelopes and their recorded steps.", no_args_is_help=True
)
shadow_app = typer.Typer(
    help="Shadow mode: record instead of send; compare with the incumbent.", no_args_is_help=True
)
audit_app = typer.Typer(help="The hash-chained audit log.", no_args_is_help=True)
alerts_app = typer.Typer(
    help="Alerts from breakers and the maintenance rules.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the operator command groups to the main CLI."""
    for sub, name in (
        (kill_app, "kill"),
        (breaker_app, "breaker"),
        (approvals_app, "approvals"),
        (authority_app, "authority"),
        (shadow_app, "shadow"),
        (audit_app, "audit"),
        (alerts_app, "alerts"),
    ):
        app.add_typer(sub, name=name)


@contextmanager
def _operator(store: str) -> Iterator[Operator]:
    """An Operator on a store URL (the example classes) or on a config file (its classes)."""
    with _acting(store, None, Capability.OPERATE) as (op, _):
        yield op


@contextmanager
def _acting(
    store: str, token_env: str | None, capability: Capability, scope: str | None = None
) -> Iterator[tuple[Operator, str]]:
    """:func:`_operator` and who acts (see :func:`effectgate._frontends._cli_actor.acting`);
    ``token_env`` None: a read, nobody acts."""
    from effectgate._core.intent import Registry
    from effectgate._service import TokenConfig
    from effectgate.store import open_store

    registry: Registry
    tokens: tuple[TokenConfig, ...] = ()
    if store.endswith(".toml"):
        from effectgate._frontends.cli_service import load_service_config

        cfg = load_service_config(store)
        ledger = open_store(cfg.store.url, **dict(cfg.store.options))
        registry, tokens = cfg.registry, cfg.tokens
    else:
        from effectgate.examples import default_registry

        ledger = open_store(store)
        registry = default_registry()
    try:
        actor = (
            ""
            if token_env is None
            else acting(ledger, token_env, capability, scope=scope, config_tokens=tokens)
        )
        yield Operator(store=ledger, registry=registry), actor
    finally:
        ledger.close()


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc.msg} at {exc.pos}") from None


def _print(data: object) -> None:
    print(json.dumps(data, indent=2, default=str))


def _dispatch_hint(store: str, what: str) -> str:
    """Who sends rows a control released: the service's standing dispatcher, else one pass."""
    how = f"--config {store}" if store.endswith(".toml") else "--config FILE"
    return (
        f"a running `effectgate serve` dispatches {what} within its dispatch_interval; "
        f"with no service running: effectgate dispatch {how}"
    )


def _released(op: Operator, action: str, store: str) -> str:
    """What lifting a control of ``action`` released, and who will send it."""
    held = len(op.held(action))
    if not held:
        return "no operation was held"
    return (
        f"{held} held operation(s) released, each checked against every control again when "
        f"sent; {_dispatch_hint(store, 'them')}"
    )


def _ts(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


# --- kill switch -------------------------------------------------------------------------


@kill_app.command("on")
def kill_on(
    action: str, store: StoreOpt, reason: ReasonOpt = None, token_env: TokenEnvOpt = TOKEN_ENV
) -> None:
    """Halt new dispatches of ACTION in every process (held rows stay validated)."""
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
        op.kill(action, operator=actor, reason=reason)
    console.print(f"[red]kill switch ON[/red] for {action}")


@kill_app.command("off")
def kill_off(
    action: str, store: StoreOpt, reason: ReasonOpt = None, token_env: TokenEnvOpt = TOKEN_ENV
) -> None:
    """Release the kill switch of ACTION (the standing dispatcher sends its held rows)."""
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
        op.release(action, operator=actor, reason=reason)
        released = _released(op, action, store)
    console.print(f"kill switch off for {action}; {released}")


@kill_app.command("status")
def kill_status(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    blast_radius: Annotated[
        bool,
        typer.Option(
            "--blast-radius",
            help="Show what the switch would hold now (rehearsal: nothing is flipped).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show the switches (and, with --blast-radius, what flipping ACTION's would halt)."""
    with _operator(store) as op:
        if blast_radius:
            if action is None:
                raise typer.BadParameter("--blast-radius needs an ACTION")
            radius = op.blast_radius(action)
            if as_json:
                _print(radius.to_dict())
                return
            console.print(
                f"{action}: switch {'ON' if radius.killed else 'off'}; flipping it "
                f"now would hold {len(radius.dispatchable)} validated operation(s) "
                f"and every new dispatch ({radius.dispatched_last_hour} in the last "
                f"hour); {radius.awaiting_approval} awaiting approval would be held "
                f"once approved; {radius.in_flight} in flight are not affected"
            )
            for row in radius.dispatchable:
                console.print(f"  would hold {row.op_key}")
            return
        rows = op.status(action)
    if as_json:
        _print([c.to_dict() for c in rows])
        return
    table = Table(title="controls")
    for col in ("action", "kill switch", "breaker", "shadow", "envelope v", "by", "at"):
        table.add_column(col)
    for c in rows:
        table.add_row(
            c.action,
            f"ON ({c.kill_reason or '-'})" if c.killed else "off",
            f"OPEN ({c.breaker_reason})" if c.breaker_open else "closed",
            "on" if c.shadow else "off",
            str(c.envelope.version),
            c.updated_by or "-",
            _ts(c.updated_at),
        )
    print_table(console, table)


@kill_app.command("held")
def kill_held(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """List operations a control is holding (validated, not sent, not failed)."""
    with _operator(store) as op:
        rows = op.held(action)
    if as_json:
        _print([r.to_dict() for r in rows])
        return
    for r in rows:
        console.print(f"{r.op_key}  {r.action}  {r.detail}")
    console.print(f"{len(rows)} held")


# --- breaker ---------------------------------------------------------------------------------


@breaker_app.command("reset")
def breaker_reset(
    action: str, store: StoreOpt, reason: ReasonOpt = None, token_env: TokenEnvOpt = TOKEN_ENV
) -> None:
    """Close ACTION's breaker (only an operator can; it never closes by itself)."""
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
        op.reset_breaker(action, operator=actor, reason=reason)
        released = _released(op, action, store)
    console.print(f"breaker for {action} closed; {released}")


@breaker_app.command("status")
def breaker_status(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Every class's breaker: open (with why) or closed."""
    with _operator(store) as op:
        rows = op.status()
    if as_json:
        _print({c.action: {"open": c.breaker_open, "reason": c.breaker_reason} for c in rows})
        return
    for c in rows:
        console.print(
            f"{c.action}: "
            + (f"[red]OPEN[/red] {c.breaker_reason}" if c.breaker_open else "closed")
        )


# --- approvals -------------------------------------------------------------------------------


@approvals_app.command("list")
def approvals_list(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Operations awaiting approval, with the fingerprint an approval must name."""
    with _operator(store) as op:
        rows = op.pending()
        out = []
        for r in rows:
            req = op.store.approval_request(r.scope, r.operation_id)
            got = op.store.list_approvals(r.scope, r.operation_id)
            out.append(
                {
                    **r.to_dict(),
                    "effect": dict(r.effect),
                    "required": req.required if req else 1,
                    "expires_at": req.expires_at if req else None,
                    "approvers": [a.approver for a in got if a.verdict == "approve"],
                }
            )
    if as_json:
        _print(out)
        return
    table = Table(title=f"awaiting approval ({len(out)})")
    for col in ("operation", "action", "tier", "approvals", "expires", "fingerprint", "effect"):
        table.add_column(col, overflow="fold")
    for o in out:
        table.add_row(
            f"{o['scope']}:{o['operation_id']}",
            str(o["action"]),
            str(o["tier"]),
            f"{len(o['approvers'])}/{o['required']}",
            _ts(o["expires_at"]),
            str(o["fingerprint"]),
            json.dumps(o["effect"]),
        )
    print_table(console, table)


@approvals_app.command("approve")
def approvals_approve(
    operation_id: str,
    store: StoreOpt,
    fingerprint: Annotated[
        str, typer.Option(help="The payload you approve (from `approvals list`).")
    ],
    scope: ScopeOpt = "default",
    reason: ReasonOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Approve exactly one payload of OPERATION_ID."""
    with _acting(store, token_env, Capability.APPROVE, scope) as (op, actor):
        out = op.approve(
            operation_id, fingerprint=fingerprint, approver=actor, scope=scope, reason=reason
        )
    line = (
        f"{operation_id}: {out.approvals}/{out.required} approvals; now {out.operation.state.value}"
    )
    if out.released:
        line += f"; released for dispatch: {_dispatch_hint(store, 'it')}"
    elif out.complete:
        line += "; it was proposed without dispatch (Gate.propose): its caller dispatches it"
    console.print(line)


@approvals_app.command("refuse")
def approvals_refuse(
    operation_id: str,
    store: StoreOpt,
    fingerprint: Annotated[str, typer.Option(help="The payload you refuse.")],
    scope: ScopeOpt = "default",
    reason: ReasonOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Refuse OPERATION_ID; it ends denied."""
    with _acting(store, token_env, Capability.APPROVE, scope) as (op, actor):
        out = op.refuse(
            operation_id, fingerprint=fingerprint, approver=actor, scope=scope, reason=reason
        )
    console.print(f"{operation_id}: {out.operation.state.value}")


# --- staged authority --------------------------------------------------------------------------


@authority_app.command("show")
def authority_show(action: str, store: StoreOpt) -> None:
    """ACTION's current envelope, axis by axis (null: not constrained)."""
    with _operator(store) as op:
        env = op.envelope(action)
    _print({"action": action, "version": env.version, **env.to_json()})


@authority_app.command("history")
def authority_history(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every recorded step: axis, old -> new, evidence, reversal condition, operator."""
    with _operator(store) as op:
        steps = op.history(action)
    if as_json:
        _print([s.to_dict() for s in steps])
        return
    table = Table(title="authority steps")
    for col in ("#", "action", "axis", "old", "new", "evidence", "reverse on", "by", "at"):
        table.add_column(col, overflow="fold")
    for s in steps:
        table.add_row(
            str(s.id) + (f" (reversal of {s.reverses})" if s.reverses else ""),
            s.action,
            s.axis,
            json.dumps(s.old),
            json.dumps(s.new),
            json.dumps(dict(s.evidence)),
            s.reverse_on,
            s.operator,
            _ts(s.at),
        )
    print_table(console, table)


@authority_app.command("step")
def authority_step(
    action: str,
    axis: str,
    value: Annotated[
        str,
        typer.Argument(
            help="New value as JSON, e.g. '\"2000\"',"
            ' \'{"limit": "5000", "window": '
            "3600}', '[\"XYZ-PERP\"]' or null."
        ),
    ],
    store: StoreOpt,
    evidence: Annotated[str, typer.Option(help="JSON object: what justified it.")],
    reverse_on: Annotated[
        str, typer.Option(help="manual, breaker_trip or breaker_trip:<signal>.")
    ] = "breaker_trip",
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Move one envelope AXIS of ACTION to VALUE, as a recorded step."""
    new = _json_arg(value, "VALUE")
    proof = _json_arg(evidence, "--evidence")
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
        step = op.step(action, axis, new, evidence=proof, operator=actor, reverse_on=reverse_on)
    console.print(
        f"step {step.id}: {action}.{axis} {json.dumps(step.old)} -> "
        f"{json.dumps(step.new)} (reverses on {step.reverse_on})"
    )


# --- shadow ------------------------------------------------------------------------------------


@shadow_app.command("on")
def shadow_on(action: str, store: StoreOpt, token_env: TokenEnvOpt = TOKEN_ENV) -> None:
    """Put ACTION in shadow mode: the pipeline runs, nothing is sent, rows end shadowed."""
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
        op.set_shadow(action, True, operator=actor)
    console.print(f"shadow mode ON for {action}")


@shadow_app.command("off")
def shadow_off(action: str, store: StoreOpt, token_env: TokenEnvOpt = TOKEN_ENV) -> None:
    """Take ACTION out of shadow mode (its shadow history is kept)."""
    with _acting(store, token_env, Capability.OPERATE) as (op, actor):
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
    body = _json_arg(intent, "--intent") if intent is not None else None
    if body is not None and not isinstance(body, dict):
        raise typer.BadParameter("--intent must be a JSON object")
    with _operator(store) as op:
        fp = op.feed_incumbent(correlation_id, action, body, source=source)
    console.print(f"{correlation_id}: incumbent {'did nothing' if fp is None else fp[:12]}")


def _when(text: str | None, what: str) -> float | None:
    """Epoch seconds, or an ISO 8601 date-time (UTC unless it says otherwise)."""
    if text is None:
        return None
    from datetime import UTC, datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{what} {text!r} is neither epoch seconds nor an ISO 8601 date-time"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


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
    with _operator(store) as op:
        report = op.shadow_report(
            action, window=window, since=_when(since, "--since"), until=_when(until, "--until")
        )
    data = report.to_dict()
    if as_json:
        _print(data)
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
            "-" if g.window_start is None else f"{_ts(g.window_start)} +{window:g}s",
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
    with _operator(store) as op:
        result = op.verify_audit(expect_heads=heads)
    if as_json:
        _print(result.to_dict())
    else:
        for f in result.findings:
            err.print(f"[red]TAMPERED[/red] {f.problem}: {f.message}")
        console.print(
            f"checked {result.checked} entries: {'intact' if result.ok else 'NOT intact'}"
        )
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
    with _operator(store) as op:
        bundle = op.export_evidence(operation_id, scope=scope)
    out.write_text(json.dumps(bundle, indent=1, sort_keys=True))
    console.print(f"wrote {len(bundle['entries'])} entries of {scope}:{operation_id} to {out}")


@audit_app.command("verify-bundle")
def audit_verify_bundle(path: Path, as_json: JsonOpt = False) -> None:
    """Verify an evidence bundle offline (no store needed); exit 3 if it was tampered with."""
    from effectgate._audit import verify_bundle

    try:
        bundle = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from None
    result = verify_bundle(bundle)
    if as_json:
        _print(result.to_dict())
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
    with _operator(store) as op:
        raised = check_maintenance(op.store, op.registry, MultiSink(sinks), now=time.time())
    if as_json:
        _print([a.to_dict() for a in raised])
    else:
        console.print(f"{len(raised)} new alert(s)")
    if raised:
        raise typer.Exit(EXIT_ALARM)


@alerts_app.command("list")
def alerts_list(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Every alert raised so far (each once)."""
    with _operator(store) as op:
        rows = op.store.list_alerts()
    if as_json:
        _print([a.to_dict() for a in rows])
        return
    for a in rows:
        console.print(f"{_ts(a.at)}  {a.kind}  {a.message}")
