"""Which kind of config file a path holds, read without the door that serves it.

The CLI asks this before it imports the gateway: the gateway's package needs the MCP SDK (the
``server`` extra), and a service config must load on the bare install.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

__all__ = ["is_gateway_config"]


def is_gateway_config(path: str | Path) -> bool:
    """Whether the TOML file at ``path`` is a gateway's (it has ``[upstreams]``)."""
    try:
        return "upstreams" in tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False  # the service config loader reports it
