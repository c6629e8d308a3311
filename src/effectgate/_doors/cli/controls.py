"""Operator commands: kill switches, breakers, approvals and staged authority.

Every command that changes a control or answers an approval acts as a principal: the token in
``--token-env`` (default ``EFFECTGATE_OPERATOR_TOKEN``), checked like the HTTP API checks it,
or, without one, the OS user as ``os:<user>`` with the store's credentials (see
:mod:`effectgate._doors.cli._actor`). Bad input (an unknown class, malformed JSON, a
malformed envelope value) is refused before the store is touched.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from effectgate._core.principals import Capability
from effectgate._doors.cli import evidence as cli_evidence
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt
from effectgate._doors.cli._common import (
    JsonOpt,
    ReasonOpt,
    ScopeOpt,
    StoreOpt,
    acting_operator,
    console,
    json_arg,
    operator_on,
    print_json,
    timestamp,
    when_arg,
)
from effectgate._doors.cli._tables import print_table
from effectgate._doors.cli.rehearsals import register_rehearsals
from effectgate._execute.operator import Operator

__all__ = ["register"]

EXIT_USAGE, EXIT_ALARM = 2, 3

kill_app = typer.Typer(
    help="Kill switches per action class (hold new dispatches).", no_args_is_help=True
)
breaker_app = typer.Typer(help="Anomaly circuit breakers.", no_args_is_help=True)
approvals_app = typer.Typer(help="Pending approvals: list, approve, refuse.", no_args_is_help=True)
authority_app = typer.Typer(
    help="Staged authority: envelopes and their recorded steps.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the operator command groups to the main CLI."""
    for sub, name in (
        (kill_app, "kill"),
        (breaker_app, "breaker"),
        (approvals_app, "approvals"),
        (authority_app, "authority"),
    ):
        app.add_typer(sub, name=name)
    register_rehearsals(kill_app)
    cli_evidence.register(app)


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


# --- kill switch -------------------------------------------------------------------------


@kill_app.command("on")
def kill_on(
    action: str, store: StoreOpt, reason: ReasonOpt = None, token_env: TokenEnvOpt = TOKEN_ENV
) -> None:
    """Halt new dispatches of ACTION in every process (held rows stay validated)."""
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        op.kill(action, operator=actor, reason=reason)
    console.print(f"[red]kill switch ON[/red] for {action}")


@kill_app.command("off")
def kill_off(
    action: str, store: StoreOpt, reason: ReasonOpt = None, token_env: TokenEnvOpt = TOKEN_ENV
) -> None:
    """Release the kill switch of ACTION (the standing dispatcher sends its held rows)."""
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
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
    with operator_on(store) as op:
        if blast_radius:
            if action is None:
                raise typer.BadParameter("--blast-radius needs an ACTION")
            radius = op.blast_radius(action)
            if as_json:
                print_json(radius.to_dict())
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
        print_json([c.to_dict() for c in rows])
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
            timestamp(c.updated_at),
        )
    print_table(console, table)


@kill_app.command("held")
def kill_held(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """List operations a control is holding (validated, not sent, not failed)."""
    with operator_on(store) as op:
        rows = op.held(action)
    if as_json:
        print_json([r.to_dict() for r in rows])
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
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        op.reset_breaker(action, operator=actor, reason=reason)
        released = _released(op, action, store)
    console.print(f"breaker for {action} closed; {released}")


@breaker_app.command("status")
def breaker_status(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Every class's breaker: open (with why) or closed."""
    with operator_on(store) as op:
        rows = op.status()
    if as_json:
        print_json({c.action: {"open": c.breaker_open, "reason": c.breaker_reason} for c in rows})
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
    with operator_on(store) as op:
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
        print_json(out)
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
            timestamp(o["expires_at"]),
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
    with acting_operator(store, token_env, Capability.APPROVE, scope) as (op, actor):
        out = op.approve(
            operation_id, fingerprint=fingerprint, approver=actor, scope=scope, reason=reason
        )
    line = (
        f"{operation_id}: {out.approvals}/{out.required} approvals; now {out.operation.state.value}"
    )
    if out.operation.operation_id != operation_id:
        line += f"; its operation id, minted now: {out.operation.operation_id}"
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
    with acting_operator(store, token_env, Capability.APPROVE, scope) as (op, actor):
        out = op.refuse(
            operation_id, fingerprint=fingerprint, approver=actor, scope=scope, reason=reason
        )
    console.print(f"{operation_id}: {out.operation.state.value}")


# --- staged authority --------------------------------------------------------------------------


@authority_app.command("show")
def authority_show(action: str, store: StoreOpt) -> None:
    """ACTION's current envelope, axis by axis (null: not constrained)."""
    with operator_on(store) as op:
        env = op.envelope(action)
    print_json({"action": action, "version": env.version, **env.to_json()})


@authority_app.command("history")
def authority_history(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every recorded step: axis, old -> new, evidence, reversal condition, operator."""
    with operator_on(store) as op:
        steps = op.history(action)
    if as_json:
        print_json([s.to_dict() for s in steps])
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
            timestamp(s.at),
        )
    print_table(console, table)


@authority_app.command("evidence")
def authority_evidence(
    action: str,
    axis: str,
    store: StoreOpt,
    since: Annotated[str, typer.Option(help="From: epoch seconds or ISO 8601 (UTC).")],
    until: Annotated[str, typer.Option(help="Before: epoch seconds or ISO 8601 (UTC).")],
    kind: Annotated[
        str, typer.Option(help="shadow_report, or operations (the class's rows).")
    ] = "shadow_report",
) -> None:
    """The evidence a step widening AXIS of ACTION may name: a closed window's figures and
    digest, recomputed when the step is taken (`authority step ... --evidence '<this>'`)."""
    start, end = when_arg(since, "--since"), when_arg(until, "--until")
    with operator_on(store) as op:
        out = op.step_evidence(action, axis, kind=kind, since=start or 0.0, until=end or 0.0)
    print_json(out)


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
    evidence: Annotated[
        str,
        typer.Option(
            help="JSON object. Widening: what `authority evidence` printed (checked again "
            "now); tightening: a note."
        ),
    ],
    reverse_on: Annotated[
        str | None,
        typer.Option(
            help="Widening: breaker_trip (default) or breaker_trip:<signal>; "
            "tightening: manual (default)."
        ),
    ] = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Move one envelope AXIS of ACTION to VALUE, as a recorded step."""
    new = json_arg(value, "VALUE")
    proof = json_arg(evidence, "--evidence")
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        step = op.step(action, axis, new, evidence=proof, operator=actor, reverse_on=reverse_on)
    console.print(
        f"step {step.id}: {action}.{axis} {json.dumps(step.old)} -> "
        f"{json.dumps(step.new)} (reverses on {step.reverse_on})"
    )
