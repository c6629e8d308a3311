"""``effectgate init``: a working starter configuration and example action classes.

The starter runs with no other process: its ``paper`` adapter is an in-process paper venue
(effects live in memory, so restart it and the venue forgets; point the adapter at
``effectgate venue serve`` or a real venue with ``kind = "http"`` when you rehearse recovery).
init creates the ledger and, in it, an agent and an operator principal: their tokens are
printed once and only their SHA-256 is stored (in the ledger, not the config file).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from effectgate._service._starter_venues import VENUE_STARTERS
from effectgate.errors import ConfigError, PrincipalExists

__all__ = ["CLASSES_FILE", "CONFIG_FILE", "IGNORED", "Starter", "write_starter"]

CONFIG_FILE = "effectgate.toml"
CLASSES_FILE = "effectgate_classes.py"
LEDGER_FILE = "effectgate.db"
#: What init and serve write that is state, not source: kept out of git by the starter's
#: .gitignore (the config and the classes are the user's to commit).
IGNORED = (LEDGER_FILE, f"{LEDGER_FILE}-wal", f"{LEDGER_FILE}-shm", "__pycache__/")

_CLASSES = '''"""Example action classes for the paper venue (from `effectgate init`; edit freely).

A class's schema is a strict pydantic model: effect fields only (the audit fields such as
`rationale` come from IntentBase). Reference it from effectgate.toml as "module:Name".
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Literal

from effectgate import AsciiPattern, IntentBase, PositiveDecimal

Instrument = Annotated[str, AsciiPattern(r"^[A-Z0-9][A-Z0-9._-]{0,31}$", max_length=32)]


class SubmitOrder(IntentBase):
    """A limit order at the paper venue."""

    action: Literal["submit_order"]
    instrument: Instrument
    side: Literal["buy", "sell"]
    quantity: PositiveDecimal
    limit_price: PositiveDecimal


def notional(effect: Mapping[str, str | int | bool]) -> Decimal:
    """The value measure the limit policy compares with max_value."""
    return Decimal(str(effect["quantity"])) * Decimal(str(effect["limit_price"]))
'''

_CONFIG = """# effectgate service configuration (written by `effectgate init`).
# Reference: docs/service.md. Secrets never go in this file: adapters name the environment
# variable or file holding their credential. Tokens live in the ledger, as SHA-256 digests:
# `effectgate token create|list|revoke --config effectgate.toml` (init made "agent" and
# "operator").

[service]
host = "127.0.0.1"          # loopback only unless public = true (put TLS in front)
port = 8787
max_body_bytes = 65536      # refused before the body is read
max_depth = 16
dispatch_timeout = 10.0     # seconds an outbound call may take
reconcile_interval = 5.0    # standing reconciler in `serve`; 0 turns it off
mcp_http = true             # MCP over streamable HTTP at /mcp
log_format = "text"         # or "json": one object per line (serve --log-format overrides)

[service.rate_limit]        # per token, per process
per_second = 20
burst = 40

[store]
url = "sqlite:///@LEDGER@"
# PostgreSQL for many processes: url = "postgresql://user@host/db", pool_max_size = 10

@ADAPTER@
[classes.submit_order]
schema = "effectgate_classes:SubmitOrder"
value = "effectgate_classes:notional"
adapter = "paper"
effect_class = "non_idempotent_mutation"
tier_floor = "validate"
compensation = "cancel_order"  # the class that undoes it (docs/continuations.md)
# Facts about the venue, required, never defaulted: take both from the venue's documentation.
# (These values are the paper venue's: it shows a record at once and never forgets a key.)
visibility_horizon = 60     # seconds the venue's reads may lag its writes
key_retention = 86400       # seconds the venue remembers an idempotency key
target_field = "instrument"
effect_fields = ["instrument", "side", "quantity", "limit_price"]
decimal_fields = ["quantity", "limit_price"]

# A simple class declared with JSON Schema instead of a Python model.
[classes.cancel_order]
adapter = "paper"
effect_class = "idempotent_mutation"
visibility_horizon = 60     # from the venue's documentation, as above
key_retention = 86400       # from the venue's documentation, as above
target_field = "instrument"

[classes.cancel_order.json_schema]
type = "object"
required = ["instrument", "order_ref"]

[classes.cancel_order.json_schema.properties.instrument]
type = "string"
pattern = "^[A-Z0-9][A-Z0-9._-]{0,31}$"
maxLength = 32

[classes.cancel_order.json_schema.properties.order_ref]
type = "string"
pattern = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
maxLength = 128

# A class without a policy is refused (deny by default).
[policies.submit_order]
kind = "limit"
max_value = "10000"
approve_above = "5000"
allowed_targets = ["XYZ-PERP", "ABC-PERP"]

[policies.cancel_order]
kind = "limit"
"""


_IN_PROCESS = """# The in-process paper venue: nothing else to start. To use the HTTP paper venue
# (`EFFECTGATE_VENUE_KEY=... effectgate venue serve --port 8700`, then `effectgate init
# --venue http://127.0.0.1:8700`) or a real venue:
#   kind = "http"
#   endpoint = "http://127.0.0.1:8700"
#   credential_env = "EFFECTGATE_VENUE_KEY"   # the NAME of the variable, never the key
[adapters.paper]
kind = "paper"
"""

_OVER_HTTP = """# The paper venue over HTTP (`effectgate venue serve`), or a venue speaking its
# protocol (docs/paper-venue.md). Its API key is read from the environment variable named here.
[adapters.paper]
kind = "http"
endpoint = @ENDPOINT@
credential_env = @KEY_ENV@   # the NAME of the variable, never the key
"""


@dataclass(frozen=True)
class Starter:
    config: Path
    classes: Path
    agent_token: str
    operator_token: str


def write_starter(
    directory: Path,
    *,
    force: bool = False,
    venue: str | None = None,
    venue_key_env: str = "EFFECTGATE_VENUE_KEY",
) -> Starter:
    """Write ``effectgate.toml`` and ``effectgate_classes.py`` into ``directory``.

    The adapter is the in-process paper venue, or, with ``venue`` (a base URL), an ``http``
    adapter reading its key from the environment variable ``venue_key_env``.
    """
    config, classes = directory / CONFIG_FILE, directory / CLASSES_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)  # like mkdir -p
    except OSError as exc:
        raise ConfigError(f"cannot create {directory}: {exc.strerror or exc}") from None
    existing = [p.name for p in (config, classes) if p.exists()]
    if existing and not force:
        raise ConfigError(
            f"{', '.join(existing)} already exist in {directory}; use --force to overwrite"
        )
    adapter = _IN_PROCESS
    extra = ""
    if venue in VENUE_STARTERS:  # a named venue: the paper starter plus that venue's class
        extra, venue = VENUE_STARTERS[venue], None
    if venue is not None:
        parts = urlsplit(venue)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--venue {venue!r} is not an http(s) URL")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", venue_key_env):
            raise ConfigError(f"--venue-key-env {venue_key_env!r} is not a variable name")
        # json.dumps gives a valid TOML basic string for any URL (quotes, backslashes).
        adapter = _OVER_HTTP.replace("@ENDPOINT@", json.dumps(venue)).replace(
            "@KEY_ENV@", json.dumps(venue_key_env)
        )
    text = _CONFIG.replace("@LEDGER@", LEDGER_FILE).replace("@ADAPTER@", adapter) + extra
    agent, operator = _principals(directory / LEDGER_FILE, replace=force)
    classes.write_text(_CLASSES, encoding="utf-8")
    config.write_text(text, encoding="utf-8")
    _ignore_state(directory / ".gitignore")
    return Starter(config, classes, agent, operator)


def _ignore_state(gitignore: Path) -> None:
    """Add the ledger's files to ``.gitignore``: created if missing, else only the lines it
    lacks are appended (as ``cargo init`` does), so a checkout that ignores them is untouched."""
    text = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
    have = {line.strip() for line in text.splitlines()}
    missing = [entry for entry in IGNORED if entry not in have]
    if not missing:
        return
    lead = "" if not text or text.endswith("\n") else "\n"
    block = "# effectgate's ledger and its WAL files (effectgate init)\n" + "\n".join(missing)
    gitignore.write_text(f"{text}{lead}{block}\n", encoding="utf-8")


def _principals(ledger: Path, *, replace: bool) -> tuple[str, str]:
    """Create the ledger (init creates it: the commands that use it never do) and its agent
    and operator principals; their tokens. With ``replace``, earlier ones are revoked."""
    from effectgate._service._auth import os_actor
    from effectgate.store import open_store

    store = open_store(f"sqlite:///{ledger.resolve()}", create=True)
    try:
        by, now = os_actor(), time.time()
        try:
            agent = store.create_principal(
                "agent", "agent", "default", created_by=by, now=now, replace=replace
            )
            operator = store.create_principal(
                "operator", "operator", "*", created_by=by, now=now, replace=replace
            )
        except PrincipalExists as exc:
            raise ConfigError(
                f"{ledger} already holds live principals from an earlier init ({exc.message}); "
                "use --force to issue new tokens (the earlier ones are revoked)"
            ) from None
    finally:
        store.close()
    return agent.token, operator.token
