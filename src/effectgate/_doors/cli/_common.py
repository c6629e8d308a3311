"""What every operator command shares: the consoles, the common options, and opening an
:class:`~effectgate.Operator` on a store URL or a config file as the acting principal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console

from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import acting
from effectgate._execute.operator import Operator

__all__ = [
    "JsonOpt",
    "ReasonOpt",
    "ScopeOpt",
    "StoreOpt",
    "acting_operator",
    "console",
    "err",
    "json_arg",
    "operator_on",
    "print_json",
    "timestamp",
    "when_arg",
]

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


@contextmanager
def operator_on(store: str) -> Iterator[Operator]:
    """An Operator on a store URL (the example classes) or on a config file (its classes)."""
    with acting_operator(store, None, Capability.OPERATE) as (op, _):
        yield op


@contextmanager
def acting_operator(
    store: str, token_env: str | None, capability: Capability, scope: str | None = None
) -> Iterator[tuple[Operator, str]]:
    """:func:`operator_on` and who acts (see :func:`effectgate._doors.cli._actor.acting`);
    ``token_env`` None: a read, nobody acts."""
    from effectgate._core.intent import Registry
    from effectgate._service import TokenConfig
    from effectgate.store import open_store

    registry: Registry
    tokens: tuple[TokenConfig, ...] = ()
    if store.endswith(".toml"):
        from effectgate._doors.cli.service import load_service_config

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


def json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc.msg} at {exc.pos}") from None


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, default=str))


def timestamp(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def when_arg(text: str | None, what: str) -> float | None:
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
