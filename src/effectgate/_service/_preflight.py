"""What ``serve`` needs from the machine, checked before it starts (and by ``effectgate check``).

:func:`load_config` validates the file itself. A valid file can still fail to start: the
environment variable an adapter reads its credential from is not set, the credential file is
missing, the SQLite ledger's folder does not exist, the PostgreSQL server does not answer.
:func:`preflight` finds those, every one of them at once, each located at the key that names
the missing thing. ``check`` and ``serve`` both call it, so a config that ``check`` calls valid
gets past the same checks when ``serve`` starts.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from effectgate._service._config import AdapterConfig, ServiceConfig, shown_url
from effectgate._service._runtime import build_adapter
from effectgate._service._toml import locate
from effectgate._service._venues import listing_problems
from effectgate.errors import EffectgateError
from effectgate.store.base import parse_store_url

__all__ = ["EXTRAS", "Preflight", "missing_modules", "preflight"]

#: What the doors and the PostgreSQL store import beyond the library, by extra.
EXTRAS = {
    "server": ("fastapi", "uvicorn", "mcp", "jinja2"),
    "postgres": ("psycopg", "psycopg_pool"),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` this environment cannot import."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class Preflight:
    """The outcome: ``problems`` (located messages; empty means it will start) and ``notes``
    (what was checked, or deliberately not, e.g. a PostgreSQL server without ``--connect``)."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def preflight(cfg: ServiceConfig, *, connect: bool = False) -> Preflight:
    """Check the store and every adapter's credential; with ``connect``, reach PostgreSQL."""
    source = _source(cfg.path)
    problems: list[str] = []
    notes: list[str] = []

    def where(*path: str) -> str:
        line = locate(source, path) if source else None
        return f"{cfg.path}:{line}: {'.'.join(path)}" if line else f"{cfg.path}: {'.'.join(path)}"

    missing = missing_modules("postgres")
    if missing and parse_store_url(cfg.store.url)[0] == "postgresql":
        problems.append(
            f"{cfg.path}: {', '.join(missing)} not installed: pip install 'effectgate[postgres]'"
        )
    missing = missing_modules("server")
    if missing:
        # Only the doors need it (serve and mcp refuse without it, naming it); reconcile, the
        # operator commands and check itself run on the bare install.
        notes.append(
            f"serve and mcp need the server extra ({', '.join(missing)} not installed): "
            "pip install 'effectgate[server]'"
        )
    store_problem, store_note = _store(cfg, connect)
    if store_problem:
        problems.append(f"{where('store', 'url')}: {store_problem}")
    notes.append(store_note)
    for name, adapter in cfg.adapters.items():
        key, message = _adapter(adapter)
        if message:
            problems.append(f"{where('adapters', name, *([key] if key else []))}: {message}")
    for action, message in listing_problems(cfg, build_adapter):
        problems.append(f"{where('classes', action, 'venue', 'listing')}: {message}")
    return Preflight(tuple(problems), tuple(notes))


def _source(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def _store(cfg: ServiceConfig, connect: bool) -> tuple[str | None, str]:
    url = cfg.store.url
    dialect, rest = parse_store_url(url)
    if dialect == "sqlite":
        if rest == ":memory:":
            return None, "store: in-memory SQLite (nothing survives a restart)"
        file = Path(rest)
        folder = file.parent if str(file.parent) else Path(".")
        # Relative paths are opened from the working directory, as the store opens them.
        shown = (
            f"{str(folder)!r} (from {os.getcwd()!r})"
            if not file.is_absolute()
            else repr(str(folder))
        )
        if not folder.is_dir():
            return f"the folder of the SQLite ledger, {shown}, does not exist", ""
        if file.exists() and not file.is_file():
            return f"{rest!r} exists and is not a file", ""
        if not os.access(file if file.exists() else folder, os.W_OK):
            return f"{str(file if file.exists() else folder)!r} is not writable", ""
        return None, f"store: SQLite ledger {rest!r}, folder exists"
    if not connect:
        return None, (
            f"store: PostgreSQL {shown_url(url)!r} not contacted (check --connect reaches it)"
        )
    return _reach_postgres(url, float(cfg.store.options.get("connect_timeout", 5.0)))


def _reach_postgres(url: str, timeout: float) -> tuple[str | None, str]:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        # The first line says what failed (refused, unknown host, authentication); the rest
        # can repeat the connection parameters.
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"cannot connect to {shown_url(url)!r}: {reason}", ""
    return None, f"store: PostgreSQL {shown_url(url)!r} answers"


def _adapter(cfg: AdapterConfig) -> tuple[str | None, str | None]:
    """(key, problem) for one adapter: its credential, then building it as ``serve`` does."""
    if cfg.kind == "http":
        if cfg.credential_env is not None and not os.environ.get(cfg.credential_env):
            return "credential_env", (
                f"environment variable {cfg.credential_env} is not set "
                "or empty (it must hold the venue's API key)"
            )
        if cfg.credential_file is not None:
            try:
                secret = Path(cfg.credential_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                return "credential_file", (
                    f"{cfg.credential_file!r} cannot be read: {exc.strerror}"
                )
            if not secret:
                return "credential_file", f"{cfg.credential_file!r} is empty"
    try:
        build_adapter(cfg).close()
    except EffectgateError as exc:
        first = exc.message.split(maxsplit=1)[0] if exc.message else ""
        key = first if first in ("endpoint", "factory", "timeout") else None
        return key, exc.message.removeprefix(f"adapters.{cfg.name}: ")
    except Exception as exc:  # a user's factory may raise anything; serve would stop on it
        return "factory", f"{cfg.factory} raised {type(exc).__name__}: {exc}"
    return None, None
