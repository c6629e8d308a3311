"""Recovery snapshots of a sealed run (pure, no I/O): one canonical document and its digest.

The document lists, in a fixed order, the seal, every journalled call with its local return,
every provider receipt and every effect binding with the effect's state when the snapshot was
taken. Its digest is SHA-256 over the canonical JSON of everything but the digest, so any
changed field changes it. Bounds are explicit (:data:`MAX_ENTRIES` entries, :data:`MAX_BYTES`
bytes encoded): a journal over either is refused, never truncated. :func:`verify` checks a
document offline: canonical encoding, digest, order, bounds and that every receipt and binding
names a call of the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from effectgate._core.runs import canonical_json, render_time, sha256_hex
from effectgate.errors import RunSnapshotInvalid, RunSnapshotTooLarge

__all__ = ["FORMAT", "MAX_BYTES", "MAX_ENTRIES", "build", "verify"]

FORMAT = "effectgate.run-snapshot/1"
#: Calls + provider receipts + effect bindings in one snapshot, at most.
MAX_ENTRIES = 4096
#: The encoded document, at most (16 MiB).
MAX_BYTES = 16 << 20


def _body(
    seal: Mapping[str, object],
    calls: Sequence[Mapping[str, object]],
    receipts: Sequence[Mapping[str, object]],
    effects: Sequence[Mapping[str, object]],
) -> dict[str, object]:
    return {
        "format": FORMAT,
        "seal": dict(seal),
        "calls": [dict(c) for c in calls],
        "provider_receipts": [dict(r) for r in receipts],
        "effects": [dict(e) for e in effects],
    }


def build(
    seal: Mapping[str, object],
    calls: Sequence[Mapping[str, object]],
    receipts: Sequence[Mapping[str, object]],
    effects: Sequence[Mapping[str, object]],
) -> tuple[bytes, str]:
    """The document's bytes and digest. Entries must come sorted (calls by slot, receipts by
    slot then digest, effects by operation id): the store reads them so. Raises
    :class:`RunSnapshotTooLarge` past a bound."""
    entries = len(calls) + len(receipts) + len(effects)
    if entries > MAX_ENTRIES:
        raise RunSnapshotTooLarge(
            f"the sealed journal has more than {MAX_ENTRIES} entries (calls, receipts and "
            "effects): a snapshot is never truncated"
        )
    body = _body(seal, calls, receipts, effects)
    digest = sha256_hex(canonical_json(body))
    document = canonical_json({**body, "digest": digest})
    if len(document) > MAX_BYTES:
        raise RunSnapshotTooLarge(
            f"the snapshot would be {len(document)} bytes, over the {MAX_BYTES}-byte bound: "
            "a snapshot is never truncated"
        )
    return document, digest


def effect_entry(
    operation_id: str,
    slot: str,
    call_id: str,
    admitted_at: float,
    action: str,
    fingerprint: str,
    state: str,
    venue_id: str | None,
) -> dict[str, object]:
    """One effect binding as the snapshot writes it."""
    return {
        "operation_id": operation_id,
        "slot": slot,
        "call_id": call_id,
        "admitted_at": render_time(admitted_at),
        "action": action,
        "fingerprint": fingerprint,
        "state": state,
        "venue_id": venue_id,
    }


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RunSnapshotInvalid(f"duplicate key {key!r}")
        out[key] = value
    return out


def _sorted(items: list[Any], key: Any, what: str) -> None:
    keys = [key(i) for i in items]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise RunSnapshotInvalid(f"{what} are not in strictly increasing order")


def verify(document: bytes) -> dict[str, object]:
    """Check a snapshot file; return its summary (run, digest, counts) or raise
    :class:`RunSnapshotInvalid` saying what is wrong."""
    if len(document) > MAX_BYTES:
        raise RunSnapshotInvalid(f"the file is over the {MAX_BYTES}-byte bound")
    try:
        doc = json.loads(document.decode("utf-8"), object_pairs_hook=_refuse_duplicates)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, RunSnapshotInvalid):
            raise
        raise RunSnapshotInvalid(f"not a JSON document: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {
        "format",
        "seal",
        "calls",
        "provider_receipts",
        "effects",
        "digest",
    }:
        raise RunSnapshotInvalid("not a run snapshot: its members are not the format's")
    if doc["format"] != FORMAT:
        raise RunSnapshotInvalid(f"unknown format {doc['format']!r}; this reads {FORMAT!r}")
    if canonical_json(doc) != document:
        raise RunSnapshotInvalid("the file is not in canonical form (it was re-encoded or edited)")
    body = {k: v for k, v in doc.items() if k != "digest"}
    if sha256_hex(canonical_json(body)) != doc["digest"]:
        raise RunSnapshotInvalid("the digest does not match the content: a field was changed")
    seal, calls, receipts, effects = (
        doc["seal"],
        doc["calls"],
        doc["provider_receipts"],
        doc["effects"],
    )
    if not all(isinstance(x, list) for x in (calls, receipts, effects)) or not isinstance(
        seal, dict
    ):
        raise RunSnapshotInvalid("seal must be an object; calls, receipts and effects lists")
    if len(calls) + len(receipts) + len(effects) > MAX_ENTRIES:
        raise RunSnapshotInvalid(f"more than {MAX_ENTRIES} entries")
    try:
        run_id = seal["run_id"]
        kinds = {c["call"]["slot"]: c["call"]["kind"] for c in calls}
        if any(c["call"]["run_id"] != run_id for c in calls):
            raise RunSnapshotInvalid("a call belongs to another run")
        _sorted(calls, lambda c: c["call"]["slot"], "calls")
        _sorted(receipts, lambda r: (r["slot"], r["receipt_digest"]), "provider receipts")
        _sorted(effects, lambda e: e["operation_id"], "effects")
        for r in receipts:
            if kinds.get(r["slot"]) != "model":
                raise RunSnapshotInvalid(f"receipt for slot {r['slot']!r}: no model call there")
        for e in effects:
            if kinds.get(e["slot"]) != "tool":
                raise RunSnapshotInvalid(
                    f"effect {e['operation_id']!r} is bound to slot {e['slot']!r}: "
                    "no tool call there"
                )
    except (KeyError, TypeError) as exc:
        raise RunSnapshotInvalid(f"a malformed entry: {exc!r}") from None
    return {
        "run_id": run_id,
        "scope": seal.get("scope"),
        "digest": doc["digest"],
        "calls": len(calls),
        "provider_receipts": len(receipts),
        "effects": len(effects),
        "unfinished_calls": sum(1 for c in calls if c.get("completion") is None),
    }
