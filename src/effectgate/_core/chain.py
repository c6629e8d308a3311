"""The audit hash chain's pure part: an entry's content digest, the link hash, lanes.

Every entry commits to the previous entry of its *lane*::

    digest = sha256(canonical JSON of [lane, at, scope, operation_id, kind, detail_text])
    hash   = sha256(prev_hash + digest)

The store writes these fields (:mod:`effectgate.store`) and :mod:`effectgate._evidence.audit`
verifies them and re-exports every name here. No I/O.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = [
    "GENESIS",
    "ChainEntry",
    "chain_hash",
    "content_digest",
    "lane_for",
    "link_entries",
    "rechain",
]

GENESIS: Final = "0" * 64


# json.dumps with options builds a new encoder per call; this one is reused (same output).
_DIGEST_ENCODER: Final = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def content_digest(
    lane: int, at: float, scope: str | None, operation_id: str | None, kind: str, detail_text: str
) -> str:
    """sha256 over the entry's content, as stored (``detail_text`` is the stored JSON text).

    The hashed bytes are ``[lane, at, scope, operation_id, kind, detail_text]`` as compact
    ASCII-only JSON. Text that is printable-ASCII-safe (no DEL, nothing past U+007F) is quoted
    by orjson, which escapes exactly as the standard encoder does there; anything else takes
    the standard encoder. Both give the same bytes (tests/test_encoding.py checks it).
    """
    if (
        type(lane) is int
        and type(at) is float
        and at - at == 0.0
        and _plain(kind)
        and _plain(detail_text)
        and (scope is None or _plain(scope))
        and (operation_id is None or _plain(operation_id))
    ):
        # One orjson call quotes the four texts ('["s","o","k","d"]'); its list is compact, and
        # hashed as it comes, after the two numbers (no copy of the detail into a new text).
        digest = hashlib.sha256(f"[{lane},{float.__repr__(at)},".encode("ascii"))
        digest.update(memoryview(orjson.dumps([scope, operation_id, kind, detail_text]))[1:])
        return digest.hexdigest()
    body = _DIGEST_ENCODER.encode([lane, at, scope, operation_id, kind, detail_text])
    return hashlib.sha256(body.encode("ascii")).hexdigest()


def _plain(text: str) -> bool:
    # ASCII without DEL: the standard encoder (ensure_ascii) escapes DEL, orjson does not.
    return text.isascii() and "\x7f" not in text


def chain_hash(prev_hash: str, digest: str) -> str:
    return hashlib.sha256((prev_hash + digest).encode("ascii")).hexdigest()


def rechain(
    rows: Iterable[tuple[int, float, str | None, str | None, str, str]],
) -> Iterator[tuple[int, str, str]]:
    """``(seq, prev_hash, hash)`` for lane-0 entries ``(seq, at, scope, operation_id, kind,
    detail_text)`` written before the log was hash-chained, in seq order (migrations)."""
    prev = GENESIS
    for seq, at, scope, operation_id, kind, text in rows:
        entry_hash = chain_hash(prev, content_digest(0, float(at), scope, operation_id, kind, text))
        yield seq, prev, entry_hash
        prev = entry_hash


def link_entries(
    lane: int,
    prev: str,
    entries: Iterable[tuple[float, str | None, str | None, str, str]],
    seqs: Iterable[int],
) -> list[tuple[int, float, str | None, str | None, str, str, int, str, str]]:
    """Entries ``(at, scope, operation_id, kind, detail_text)`` appended to ``lane`` after the
    head hash ``prev``, with the seqs ``seqs``, as stored: ``(seq, at, scope, operation_id,
    kind, detail_text, lane, prev_hash, hash)``, each linked to the one before."""
    rows = []
    for (at, scope, op, kind, text), seq in zip(entries, seqs, strict=False):
        entry_hash = chain_hash(prev, content_digest(lane, at, scope, op, kind, text))
        rows.append((seq, at, scope, op, kind, text, lane, prev, entry_hash))
        prev = entry_hash
    return rows


def lane_for(scope: str | None, operation_id: str | None, lanes: int) -> int:
    """The lane of an entry: by operation key, so one operation's trail stays in one lane."""
    if lanes <= 1 or scope is None or operation_id is None:
        return 0
    return zlib.crc32(f"{scope}:{operation_id}".encode()) % lanes


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One audit entry with its chain fields, exactly as stored."""

    seq: int
    lane: int
    at: float
    scope: str | None
    operation_id: str | None
    kind: str
    detail_text: str
    prev_hash: str
    hash: str

    @property
    def digest(self) -> str:
        return content_digest(
            self.lane, self.at, self.scope, self.operation_id, self.kind, self.detail_text
        )

    @property
    def detail(self) -> Any:
        return json.loads(self.detail_text)

    def to_dict(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "lane": self.lane,
            "at": self.at,
            "scope": self.scope,
            "operation_id": self.operation_id,
            "kind": self.kind,
            "detail_text": self.detail_text,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChainEntry:
        return cls(
            int(data["seq"]),
            int(data["lane"]),
            float(data["at"]),
            data["scope"],
            data["operation_id"],
            str(data["kind"]),
            str(data["detail_text"]),
            str(data["prev_hash"]),
            str(data["hash"]),
        )
