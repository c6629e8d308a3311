"""``effectgate plans list|show`` and ``effectgate runs budget``: budgets from the CLI.

The same reads as ``/v1/admin/plans``, on ``--config FILE`` or ``--store URL``. ``plans show``
draws a plan's account as a tree with used (what each reservation holds), allocated and
remaining per dimension; ``--json`` gives the same document as the HTTP route.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.tree import Tree

from effectgate._core.budgets import DIMENSIONS, Resources
from effectgate._core.reservations import AccountNode, AccountSnapshot
from effectgate._doors.cli.service import ConfigOpt
from effectgate._doors.cli.tokens import JsonOpt, StoreOpt, _ledger
from effectgate.errors import ReservationNotFound

__all__ = ["register"]

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

plans_app = typer.Typer(
    help="Plan accounts: list them, show one as a tree of reservations.", no_args_is_help=True
)
ScopeOpt = Annotated[str, typer.Option(help="The plan's tenant scope.")]
_SHORT = {"steps": "steps", "tokens": "tok", "tool_calls": "tools", "fan_out": "fan",
          "replans": "replans", "money_micros": "µ$", "value_micros": "value"}  # fmt: skip


def register(app: typer.Typer) -> None:
    app.add_typer(plans_app, name="plans")


def _amounts(r: Resources) -> str:
    return " ".join(f"{_SHORT[d]}={getattr(r, d)}" for d in DIMENSIONS if getattr(r, d))


def _node(tree: Tree, n: AccountNode) -> None:
    req = n.reservation.request
    state = "settled" if n.reservation.settled else "open"
    branch = tree.add(
        f"[bold]{req.reservation_id}[/] {req.kind.value}, {state}, task {req.task_id}\n"
        f"holds {_amounts(n.holds) or '-'}\nof    {_amounts(req.allocation) or '-'}"
    )
    for c in n.children:
        _node(branch, c)


def draw(snap: AccountSnapshot) -> Tree:
    """The account as a rich tree: a line per dimension, then each reservation."""
    p = snap.policy
    remaining = snap.remaining()
    settled, reserved = snap.split()
    lines = [
        f"{d}: used {getattr(snap.used, d)} (settled {getattr(settled, d)}, reserved "
        f"{getattr(reserved, d)}), "
        + (
            "unbounded"
            if remaining[d] is None
            else f"limit {getattr(p.limits, d)}, {remaining[d]} left"
        )
        for d in DIMENSIONS
    ]
    tree = Tree(
        f"[bold]plan {p.plan_id}[/] ({snap.reservations} reservations"
        f"{', OVERFLOW' if snap.overflow else ''})\n" + "\n".join(lines)
    )
    for n in snap.roots:
        _node(tree, n)
    return tree


@plans_app.command("list")
def list_plans(
    scope: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan accounts, newest first."""
    with _ledger(store, config) as (ledger, _):
        found = ledger.list_plan_accounts(scope, limit=limit)
    if as_json:
        print(json.dumps([{"scope": s, "plan_id": p} for s, p in found]))
        return
    for s, p in found:
        console.print(f"{s}\t{p}")


@plans_app.command("show")
def show_plan(
    plan_id: Annotated[str, typer.Argument(help="The plan's id.")],
    scope: ScopeOpt = "default",
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A plan's account as a tree: used, allocated and remaining per dimension."""
    with _ledger(store, config) as (ledger, _):
        try:
            snap = ledger.plan_account(scope, plan_id)
        except ReservationNotFound as exc:
            err.print(exc.message)
            raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(snap.to_dict()))
        return
    console.print(draw(snap))
