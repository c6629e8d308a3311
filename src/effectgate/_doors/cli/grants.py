"""``effectgate grants create|delegate|list|show|revoke``: delegated authority, in the ledger.

The same operations as ``/v1/admin/grants`` (docs/authority.md), on ``--config FILE`` or
``--store URL``. ``create`` and ``revoke`` act as an operator of ``"*"`` (``--token-env``) or as
``os:<user>`` with the store's credentials; ``delegate`` acts as the holder of the parent grant,
so it needs that principal's token in ``--token-env``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effectgate._core.grants import Grant, parse_spec
from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli._tables import print_table
from effectgate._doors.cli.service import ConfigOpt
from effectgate._doors.cli.tokens import JsonOpt, StoreOpt, _ledger, _when
from effectgate._service import TokenBook
from effectgate.errors import Unauthenticated

__all__ = ["register"]

console = Console(soft_wrap=True)
grants_app = typer.Typer(
    help="Delegated authority: what a principal may do (classes, targets, value, budget, "
    "environments, expiry), delegated beneath, never wider; revocation is transitive.",
    no_args_is_help=True,
)

ActionsOpt = Annotated[list[str], typer.Option("--action", help='Action class (repeat), or "*".')]
TargetsOpt = Annotated[list[str] | None, typer.Option("--target", help="Target (repeat).")]
EnvsOpt = Annotated[list[str] | None, typer.Option("--env", help="Environment (repeat).")]
ScopeOpt = Annotated[str, typer.Option("--scope", help='Tenant, or "*".')]
ExpiresOpt = Annotated[float, typer.Option("--expires-in", help="Seconds until it expires.")]
MaxValueOpt = Annotated[str | None, typer.Option("--max-value", help="Per-action ceiling.")]
BudgetOpt = Annotated[str | None, typer.Option("--budget", help="Aggregate value budget.")]
HopsOpt = Annotated[int, typer.Option("--hops", help="Further delegations allowed beneath.")]


def register(app: typer.Typer) -> None:
    app.add_typer(grants_app, name="grants")


def _raw(
    actions: list[str],
    targets: list[str] | None,
    envs: list[str] | None,
    scope: str,
    expires_in: float,
    max_value: str | None,
    budget: str | None,
    hops: int,
    break_glass: bool = False,
) -> dict[str, object]:
    return {
        "actions": actions,
        "targets": targets or "*",
        "environments": envs or "*",
        "scope": scope,
        "expires_in": expires_in,
        "max_value": max_value,
        "budget": budget,
        "hops": hops,
        "break_glass": break_glass,
    }


def _show(grants: list[Grant], as_json: bool) -> None:
    if as_json:
        print(json.dumps([g.to_dict() for g in grants]))
        return
    table = Table(title=f"grants ({len(grants)})")
    for col in ("id", "holder", "parent", "actions", "targets", "max", "budget", "expires",
                "by", "revoked"):  # fmt: skip
        table.add_column(col)
    for g in grants:
        s = g.spec
        table.add_row(
            g.grant_id + (" (break-glass)" if s.break_glass else ""),
            g.holder,
            g.parent_id or "-",
            ",".join(sorted(s.actions)),
            ",".join(sorted(s.targets)),
            str(s.max_value or "-"),
            str(s.budget or "-"),
            _when(s.expires_at),
            g.created_by,
            "-" if g.revoked_at is None else f"{_when(g.revoked_at)} by {g.revoked_by}",
        )
    print_table(console, table)


@grants_app.command("create")
def create(
    holder: Annotated[str, typer.Argument(help="The principal who holds it.")],
    actions: ActionsOpt,
    expires_in: ExpiresOpt,
    targets: TargetsOpt = None,
    envs: EnvsOpt = None,
    scope: ScopeOpt = "*",
    max_value: MaxValueOpt = None,
    budget: BudgetOpt = None,
    hops: HopsOpt = 0,
    break_glass: Annotated[
        bool, typer.Option("--break-glass", help="Loud (alert, audit), short, never delegable.")
    ] = False,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Create a root grant (an operator's act)."""
    with _ledger(store, config) as (ledger, tokens):
        actor = acting(ledger, token_env, Capability.OPERATE, config_tokens=tokens)
        now = time.time()
        spec = parse_spec(
            _raw(actions, targets, envs, scope, expires_in, max_value, budget, hops, break_glass),
            now=now,
        )
        grant = ledger.create_grant(holder, spec, created_by=actor, now=now)
    _show([grant], as_json)


@grants_app.command("delegate")
def delegate(
    parent: Annotated[str, typer.Argument(help="The grant to delegate beneath.")],
    holder: Annotated[str, typer.Argument(help="Who receives it.")],
    actions: ActionsOpt,
    expires_in: ExpiresOpt,
    targets: TargetsOpt = None,
    envs: EnvsOpt = None,
    scope: ScopeOpt = "*",
    max_value: MaxValueOpt = None,
    budget: BudgetOpt = None,
    hops: HopsOpt = 0,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Delegate beneath PARENT, as its holder (the token in --token-env); never wider."""
    with _ledger(store, config) as (ledger, tokens):
        token = os.environ.get(token_env, "")
        if not token:
            raise Unauthenticated(f"{token_env}: delegating needs the parent holder's token")
        who = TokenBook(tokens, ledger).from_token(token)
        now = time.time()
        spec = parse_spec(
            _raw(actions, targets, envs, scope, expires_in, max_value, budget, hops), now=now
        )
        grant = ledger.delegate_grant(parent, holder, spec, by=who.name, now=now)
    _show([grant], as_json)


@grants_app.command("list")
def list_grants(
    holder: Annotated[str | None, typer.Option("--holder")] = None,
    include_revoked: Annotated[bool, typer.Option("--all", help="Revoked ones too.")] = False,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Grants, oldest first."""
    with _ledger(store, config) as (ledger, _):
        rows = ledger.list_grants(holder=holder, include_revoked=include_revoked)
    _show(rows, as_json)


@grants_app.command("show")
def show(
    grant_id: str, store: StoreOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """One grant."""
    with _ledger(store, config) as (ledger, _):
        grant = ledger.get_grant(grant_id)
    _show([grant], as_json)


@grants_app.command("revoke")
def revoke(
    grant_id: Annotated[str | None, typer.Option("--grant")] = None,
    holder: Annotated[str | None, typer.Option("--holder")] = None,
    created_by: Annotated[str | None, typer.Option("--creator")] = None,
    reason: Annotated[str, typer.Option("--reason")] = "",
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Revoke by grant, holder or creator, and everything delegated beneath."""
    with _ledger(store, config) as (ledger, tokens):
        actor = acting(ledger, token_env, Capability.OPERATE, config_tokens=tokens)
        gone = ledger.revoke_grants(
            by=actor,
            now=time.time(),
            grant_id=grant_id,
            holder=holder,
            created_by=created_by,
            reason=reason,
        )
    _show(gone, as_json)
