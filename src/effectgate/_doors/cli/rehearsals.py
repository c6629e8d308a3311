"""Operator commands: recorded kill switch rehearsals (``kill rehearse``, ``kill rehearsals``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt
from effectgate._doors.cli._common import (
    JsonOpt,
    ReasonOpt,
    StoreOpt,
    acting_operator,
    console,
    operator_on,
    print_json,
    timestamp,
)
from effectgate._doors.cli._tables import print_table

__all__ = ["register_rehearsals"]


def register_rehearsals(kill_app: typer.Typer) -> None:
    """Add the rehearsal commands to the ``kill`` group."""
    kill_app.command("rehearse")(kill_rehearse)
    kill_app.command("rehearsals")(kill_rehearsals)


def kill_rehearse(
    action: str,
    store: StoreOpt,
    drill: Annotated[
        bool,
        typer.Option(
            "--drill",
            help="Flip the switch on for real, see it held, flip it off (refused while on).",
        ),
    ] = False,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Rehearse ACTION's kill switch and record it: the blast-radius dry run, or a drill."""
    with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
        out = op.rehearse(action, operator=actor, drill=drill, reason=reason)
    if as_json:
        print_json(out.to_dict())
        return
    d = out.detail
    console.print(
        f"rehearsal {out.id} ({out.kind}) of {action}: the switch would hold {d['would_hold']} "
        f"validated operation(s); {d['awaiting_approval']} awaiting approval, "
        f"{d['in_flight']} in flight"
        + (f"; held seen: {d['held_seen']}" if out.kind == "drill" else "")
    )


def kill_rehearsals(
    store: StoreOpt,
    action: Annotated[str | None, typer.Argument()] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recorded rehearsals, newest first."""
    with operator_on(store) as op:
        rows = op.rehearsals(action)
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    table = Table(title="kill switch rehearsals")
    for col in ("#", "action", "kind", "by", "at", "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            str(r.id), r.action, r.kind, r.operator, timestamp(r.at), json.dumps(dict(r.detail))
        )
    print_table(console, table)
