"""Dispatch ids and the binding a receipt is journalled with (pure, no I/O).

Each dispatch of a row gets a **dispatch id**: a digest of the row's scope, operation id and the
``submitted_at`` written by the very transaction that journals ``submitted``. It is therefore
journalled with the ``submitted`` row at no extra statement, survives any crash after that
commit (recovery recomputes it from the row), and names one dispatch: a row reaches
``submitted`` at most once, and a retry is a continuation, a new row with its own dispatch. It
is not seed 000's attempt number, which counts how many times a *proposal* arrived.

A receipt is journalled bound to three things (docs/adapters.md, "Receipts"): the digest of the
request the adapter was handed, the venue's version of the record (when the venue reports one)
and an evidence reference (the venue id, or the proof's reference for ``not_applied``). A
``not_applied`` receipt settles a row as ``failed`` only with a
:class:`~effectgate._core.resolution.Proof` that the request cannot apply later
(:func:`proves_not_applied`); anything less is journalled as an unknown outcome.
"""

from __future__ import annotations

import hashlib

from effectgate._core.resolution import EvidenceKind, Proof

__all__ = [
    "NOT_APPLIED_EVIDENCE",
    "dispatch_id",
    "proof_text",
    "proves_not_applied",
    "request_digest",
]

#: Evidence an adapter may give that a request cannot apply later: the venue's refusal or
#: record of non-execution, the provider's console record of it, or proof that the request never
#: left effectgate. Never an attestation (an
#: adapter attests nothing) nor a record of the effect.
NOT_APPLIED_EVIDENCE = frozenset(
    {EvidenceKind.VENUE_REFUSAL, EvidenceKind.PROVIDER_CONSOLE, EvidenceKind.NOT_SENT}
)


def dispatch_id(scope: str, operation_id: str, submitted_at: float) -> str:
    """The id of the dispatch journalled at ``submitted_at`` (``d-`` and 24 hex digits)."""
    global _last_dispatch_id
    last = _last_dispatch_id  # one immutable tuple: read whole, whatever other threads store
    # The journal entry and the receipt's binding ask for the same id, one after the other,
    # with the same float object: identity (never mere equality: 0.0 and -0.0 are equal floats
    # but different ids) answers it without rendering the instant again.
    if last[0] is submitted_at and last[1] == scope and last[2] == operation_id:
        return last[3]
    text = f"{scope}\x00{operation_id}\x00{float(submitted_at)!r}"
    found = "d-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
    _last_dispatch_id = (submitted_at, scope, operation_id, found)
    return found


#: The last id computed and its arguments: a pure function's one-entry memo (holding the
#: float it was asked about, so no other object can take its identity meanwhile).
_last_dispatch_id: tuple[object, str, str, str] = (None, "", "", "")


def request_digest(operation_key: str, action: str, effect_fingerprint: str) -> str:
    """SHA-256 of what the adapter was handed: the key, the action and the canonical effect
    (given by its fingerprint, which the row already holds: nothing is re-canonicalised)."""
    text = f"{operation_key}\x00{action}\x00{effect_fingerprint}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def proves_not_applied(proof: object) -> bool:
    """Whether ``proof`` shows a request cannot apply later (see module doc)."""
    return isinstance(proof, Proof) and proof.kind in NOT_APPLIED_EVIDENCE


def proof_text(proof: Proof) -> str:
    """One line for the row's ``detail``: the proof's note, else its reference, else its kind."""
    return proof.note or proof.reference or proof.kind.value
