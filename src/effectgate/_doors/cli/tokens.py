"""``effectgate token create|list|revoke``: principals and their tokens, in the ledger.

The same operations as ``/v1/admin/tokens``, on ``--config FILE`` or ``--store URL``. Each
change acts as a principal (an operator of ``"*"``, from ``--token-env``) or, without a token,
as ``os:<user>`` with the store's credentials (see :mod:`effectgate._doors.cli._actor`).
``create`` prints the token alone on stdout (``TOKEN=$(effectgate token create ...)``), once:
only its SHA-256 is stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effectgate._core.principals import Capability, Role
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli._tables import print_table
from effectgate._doors.cli.service import ConfigOpt
from effectgate._service import TokenBook, TokenConfig
from effectgate.store.roles import Store

__all__ = ["register"]

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
EXIT_USAGE = 2

token_app = typer.Typer(
    help="Principals and their tokens, in the ledger: create, list, revoke. A revoked token "
    "is refused by every replica from its next request.",
    no_args_is_help=True,
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="EFFECTGATE_STORE",
        help="Ledger URL: sqlite:///PATH or postgresql://... (or give --config).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")


@contextmanager
def _ledger(
    store: str | None, config: str | None
) -> Iterator[tuple[Store, tuple[TokenConfig, ...]]]:
    """The ledger of ``--store`` or ``--config`` (exactly one), and the config's tokens."""
    from effectgate.store import open_store

    if (store is None) == (config is None):
        err.print("give exactly one of --store URL or --config FILE")
        raise typer.Exit(EXIT_USAGE)
    tokens: tuple[TokenConfig, ...] = ()
    if config is not None:
        from effectgate._doors.cli.service import load_service_config

        cfg = load_service_config(config)
        ledger = open_store(cfg.store.url, **dict(cfg.store.options))
        tokens = cfg.tokens
    else:
        ledger = open_store(store or "")
    try:
        yield ledger, tokens
    finally:
        ledger.close()


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


@token_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The caller's identity in the audit log.")],
    role: Annotated[Role, typer.Option(help="What it may do.")],
    scope: Annotated[
        str, typer.Option(help='Its tenant; "*" (every tenant) for an operator only.')
    ],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Revoke the live principal of this name in the same transaction."
        ),
    ] = False,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Create a principal; print its token once (only its SHA-256 is stored)."""
    with _ledger(store, config) as (ledger, tokens):
        actor = acting(ledger, token_env, Capability.OPERATE, config_tokens=tokens)
        TokenBook(tokens).refuse_config_name(name)
        issued = ledger.create_principal(
            name, role.value, scope, created_by=actor, now=time.time(), replace=replace
        )
    if as_json:
        print(json.dumps({**issued.record.to_dict(), "token": issued.token}))
        return
    err.print(
        f"created {name} ({role.value}, scope {scope}) as {actor}; its token follows, shown "
        "once (only its SHA-256 is stored):",
        highlight=False,
    )
    print(issued.token)


@token_app.command("list")
def list_tokens(
    include_revoked: Annotated[
        bool, typer.Option("--all", help="Also revoked tokens (kept for the record).")
    ] = False,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Principals and their token prefixes (never a token)."""
    with _ledger(store, config) as (ledger, tokens):
        rows = ledger.list_principals(include_revoked=include_revoked)
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
        return
    table = Table(title=f"principals ({len(rows)})")
    for col in ("name", "role", "scope", "token prefix", "created", "by", "revoked"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.name,
            r.role.value,
            r.scope,
            r.token_prefix + "...",
            _when(r.created_at),
            r.created_by,
            "-" if r.live else f"{_when(r.revoked_at)} by {r.revoked_by}",
        )
    print_table(console, table)
    if tokens:
        err.print(
            f"and {len(tokens)} token(s) in the config file's [tokens] (deprecated): "
            + ", ".join(t.name for t in tokens),
            highlight=False,
        )


@token_app.command("revoke")
def revoke(
    name: str,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Revoke NAME's token: every replica refuses it from its next request."""
    with _ledger(store, config) as (ledger, tokens):
        actor = acting(ledger, token_env, Capability.OPERATE, config_tokens=tokens)
        record = ledger.revoke_principal(name, revoked_by=actor, now=time.time())
    if as_json:
        print(json.dumps(record.to_dict()))
        return
    console.print(f"revoked {name} ({record.token_prefix}...) as {actor}", highlight=False)
