"""What a signed operation receipt states, derived from the ledger's own record (pure, no I/O).

Not the venue's answer journalled on a row (:mod:`effectgate._core.receipts`): a *signed
operation receipt* is an offline-checkable statement about an operation that reached a final
state. Its **statement** is derived, never stored, from the row, its approvals and its audit
trail (one operation's entries stay in one audit lane):

* revision 0 rests on the audit entry that made the row final (``standing: final``);
* every ``divergence`` entry the reconciler chained for the operation *after* that (the venue
  contradicts the final state: ``ledger-says-failed``, ``duplicate-effect``,
  ``missing-at-venue``, ``resolution-contradicted``...) yields the next revision
  (``standing: contradicted``), listing every contradiction so far and naming the revision it
  supersedes by its receipt id.

A receipt id is the SHA-256 of the statement's RFC 8785 bytes, so the same ledger always yields
the same ids: a superseding receipt can name its predecessor without any new table. The signed
document adds when it was issued, the lane's audit head at that moment and the key id; the
signature (:mod:`effectgate._evidence.receipt_signing`) covers all of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from effectgate._core.canonical import canonical_json
from effectgate._core.chain import ChainEntry
from effectgate._core.controls import ApprovalRecord
from effectgate._core.states import TERMINAL, State
from effectgate.errors import ReceiptUnavailable

__all__ = [
    "FORMAT",
    "SIGNED_FIELDS",
    "receipt_id",
    "render_time",
    "signing_bytes",
    "statements",
    "unsigned_receipt",
]

#: The document's ``format``; a verifier refuses any other.
FORMAT: Final = "effectgate-receipt/1"
#: Every member of a receipt document but ``signature``: what the signature covers.
SIGNED_FIELDS: Final = frozenset(
    {"format", "receipt_id", "statement", "issued_at", "audit_head", "key_id"}
)


def render_time(at: float | None) -> str | None:
    """A ledger time as RFC 3339 UTC text with microseconds: no float enters a receipt (RFC 8785
    renders numbers as ECMAScript does; text is the same in every language)."""
    if at is None:
        return None
    moment = datetime.fromtimestamp(at, tz=UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def receipt_id(statement: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of the statement's RFC 8785 bytes."""
    return hashlib.sha256(canonical_json(statement)).hexdigest()


def signing_bytes(document: Mapping[str, Any]) -> bytes:
    """The bytes the Ed25519 signature is over: the document without ``signature``, RFC 8785."""
    return canonical_json({k: v for k, v in document.items() if k != "signature"})


def unsigned_receipt(
    statement: Mapping[str, Any], *, issued_at: float, head: tuple[int, int, str], key_id: str
) -> dict[str, Any]:
    """The document to sign: ``head`` is ``(lane, seq, hash)`` of the statement's lane now."""
    lane, seq, digest = head
    return {
        "format": FORMAT,
        "receipt_id": receipt_id(statement),
        "statement": dict(statement),
        "issued_at": render_time(issued_at),
        "audit_head": {"lane": lane, "seq": seq, "hash": digest},
        "key_id": key_id,
    }


def statements(
    op: Mapping[str, Any], approvals: Sequence[ApprovalRecord], trail: Sequence[ChainEntry]
) -> list[dict[str, Any]]:
    """Every revision of the operation's receipt statement, oldest first (the last is current).

    ``op``: the row as ``Operation.to_dict()`` gives it; ``trail``: its audit entries in seq
    order. Raises :class:`ReceiptUnavailable` when the row is not final (``not_final``) or the
    entry that made it final is no longer in the trail (``audit_pruned``).
    """
    state = State(op["state"])
    key = f"{op['scope']}:{op['operation_id']}"
    if state not in TERMINAL:
        raise ReceiptUnavailable(
            f"{key} is {state.value}, not final: a receipt is issued for "
            f"{', '.join(sorted(s.value for s in TERMINAL))} only",
            reason="not_final",
        )
    details = [_detail(e) for e in trail]
    final = next((i for i, d in enumerate(details) if d.get("state") == state.value), None)
    if final is None:
        raise ReceiptUnavailable(
            f"the audit entry that made {key} {state.value} is no longer in the log (pruned)",
            reason="audit_pruned",
        )
    journal = next((d for d in details if isinstance(d.get("decision"), dict)), {})
    decision = journal.get("decision", {})
    reasons = [r for r in (decision.get("reason"), op.get("reason")) if isinstance(r, str)]
    allowed = decision.get("allowed")
    settled = details[final]
    base: dict[str, Any] = {
        "operation": {
            "scope": op["scope"],
            "operation_id": op["operation_id"],
            "op_key": key,
            "action": op["action"],
        },
        "fingerprint": op["fingerprint"],
        "state": state.value,
        "venue_id": op.get("venue_id"),
        "decision": {
            "outcome": None if allowed is None else ("allowed" if allowed else "refused"),
            "tier": op.get("tier"),
            "reasons": list(dict.fromkeys(reasons)),
            "policy_version": op.get("policy_version"),
            "proposed_by": _text(journal.get("principal")),
        },
        "approvals": [
            {
                "principal": a.approver,
                "verdict": a.verdict,
                "fingerprint": a.fingerprint,
                "roles": sorted(a.roles),
                "reason": a.reason,
                "at": render_time(a.at),
            }
            for a in approvals
        ],
        "settled": {
            "by": _text(settled.get("by")),
            "note": _text(settled.get("note")),
            "evidence": _text(settled.get("evidence")),
        },
        "times": {
            "proposed_at": render_time(op.get("created_at")),
            "submitted_at": render_time(op.get("submitted_at")),
            "final_at": render_time(trail[final].at),
        },
    }
    out = [{**base, **_rests_on(trail[final]), "contradictions": [], "supersedes": None}]
    out[0] = {"revision": 0, "standing": "final", **out[0]}
    seen: list[dict[str, Any]] = []
    for entry, detail in zip(trail[final + 1 :], details[final + 1 :], strict=True):
        if entry.kind != "divergence":
            continue
        seen.append(
            {
                "kind": _text(detail.get("kind")),
                "venue_ids": [v for v in detail.get("venue_ids") or [] if isinstance(v, str)],
                "ledger_state": _text(detail.get("ledger_state")),
                "at": render_time(entry.at),
                "seq": entry.seq,
                "hash": entry.hash,
            }
        )
        out.append(
            {
                "revision": len(out),
                "standing": "contradicted",
                **base,
                **_rests_on(entry),
                "contradictions": list(seen),
                "supersedes": receipt_id(out[-1]),
            }
        )
    return out


def _rests_on(entry: ChainEntry) -> dict[str, Any]:
    # The entry's hash chains every earlier entry of its lane: the operation's whole trail.
    return {"audit": {"lane": entry.lane, "seq": entry.seq, "hash": entry.hash}}


def _detail(entry: ChainEntry) -> dict[str, Any]:
    try:
        value = json.loads(entry.detail_text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
