"""Duplicate JSON keys at the MCP door, which the SDK's parser would silently resolve.

The SDK parses JSON-RPC messages itself (the last duplicate wins), so by the time a tool call
reaches effectgate a duplicated ``quantity`` is already one value. Each raw message is screened
first: a tool call whose text repeats a key is marked in ``params._meta`` and refused by the tool
handler with the key named, exactly as the HTTP door refuses the same body.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["REFUSED_META", "ScreenedLines", "duplicate_key", "screen"]

#: ``params._meta`` key carrying the refusal into the tool handler.
REFUSED_META = "io.effectgate/refused"


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in items:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def duplicate_key(raw: str | bytes) -> str | None:
    """The first key a JSON text repeats within one object, or None (also for invalid JSON)."""
    try:
        json.loads(raw, object_pairs_hook=_pairs)
    except _Duplicate as dup:
        return dup.key
    except (ValueError, RecursionError):
        return None  # not ours to judge: the SDK answers malformed messages itself
    return None


def screen(raw: str | bytes) -> str | bytes:
    """``raw`` unchanged, or a tool call re-encoded with the refusal marked in ``_meta``."""
    key = duplicate_key(raw)
    if key is None:
        return raw
    message = json.loads(raw)
    calls = message if isinstance(message, list) else [message]
    for call in calls:
        if isinstance(call, dict) and call.get("method") == "tools/call":
            params = call.get("params")
            if not isinstance(params, dict):
                continue
            meta = params.get("_meta")
            meta = meta if isinstance(meta, dict) else {}
            meta[REFUSED_META] = key
            params["_meta"] = meta
    text = json.dumps(message)
    return text.encode() if isinstance(raw, bytes) else text + "\n"


class ScreenedLines:
    """Wraps the stdio transport's line source, screening each JSON-RPC line."""

    def __init__(self, inner: Any) -> None:
        self._inner: AsyncIterator[str] = inner.__aiter__()
        self._file = inner

    def __aiter__(self) -> ScreenedLines:
        return self

    async def __anext__(self) -> str:
        line = await self._inner.__anext__()
        screened = screen(line)
        return screened.decode() if isinstance(screened, bytes) else screened
