"""Who a CLI command acts as: the principal of a token, or the OS user holding the store.

A command that changes a control, answers an approval or manages tokens reads a token from the
environment variable ``--token-env`` names (default ``EFFECTGATE_OPERATOR_TOKEN``), looks it up
in the ledger like the HTTP API does, checks its role and scope the same way, and records the
principal's name as the actor. Without a token it still works: whoever can open the ledger with
the store's credentials can change anything in it (that is full administrative power, token or
not), so the actor is recorded as ``os:<user>``, which is only what the OS says, and the audit
entry is marked ``credential: store``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated

import typer

from effectgate._core.principals import ALL_SCOPES, Capability
from effectgate._service import TokenBook, TokenConfig, os_actor
from effectgate.errors import PermissionDenied, Unauthenticated
from effectgate.store.roles import Principals

__all__ = ["TOKEN_ENV", "TokenEnvOpt", "acting"]

TOKEN_ENV = "EFFECTGATE_OPERATOR_TOKEN"  # noqa: S105 - the name of a variable

TokenEnvOpt = Annotated[
    str,
    typer.Option(
        "--token-env",
        help="Environment variable holding your token (an operator's; for approvals an "
        "approver's or an operator's): the principal recorded as the actor. Without one the "
        "command acts with the store's credentials and is recorded as os:<user>, marked "
        "credential=store: holding the store's credentials is full administrative power.",
    ),
]


def acting(
    store: Principals,
    token_env: str,
    capability: Capability,
    *,
    scope: str | None = None,
    config_tokens: Iterable[TokenConfig] = (),
) -> str:
    """The actor to record: the token's principal, after the checks the HTTP API makes, or
    ``os:<user>`` when the variable is unset or empty.

    ``scope``: the tenant the command acts on; None for a change to every tenant (a control
    of an action class, a token), which needs a principal of scope ``"*"``.
    """
    token = os.environ.get(token_env, "")
    if not token:
        return os_actor()
    try:
        who = TokenBook(config_tokens, store).from_token(token)
        who.require(capability)
        if scope is None and who.scope != ALL_SCOPES:
            raise PermissionDenied(
                f"this acts on every tenant: needs an operator of scope {ALL_SCOPES!r}, and "
                f"{who.name!r} is limited to {who.scope!r}"
            )
        if scope is not None and who.scope not in (ALL_SCOPES, scope):
            raise PermissionDenied(f"{who.name!r} is limited to scope {who.scope!r}")
    except (Unauthenticated, PermissionDenied) as exc:
        # Name the variable: the refusal is about what it holds.
        raise type(exc)(f"{token_env}: {exc.message}") from None
    return who.name
