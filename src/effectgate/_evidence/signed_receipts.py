"""Issuing signed operation receipts from a ledger (docs/evidence.md, "Receipts").

Reads the row, its approvals and its audit trail, derives every revision of the statement
(:func:`effectgate._core.receipt_statement.statements`) and signs what is asked for: the current
receipt, or every revision oldest first, so a verifier can be shown which one superseded which.
Nothing is written: a receipt is the ledger's own record, restated and signed.
"""

from __future__ import annotations

from typing import Any

from effectgate._core.chain import ChainEntry
from effectgate._core.receipt_statement import statements, unsigned_receipt
from effectgate._evidence.receipt_signing import ReceiptSigner
from effectgate.errors import OperationNotFound, ReceiptUnavailable
from effectgate.store.roles import Store

__all__ = ["issue_receipts", "operation_trail"]

_PAGE = 1000


def operation_trail(store: Store, scope: str, operation_id: str) -> list[ChainEntry]:
    """Every audit entry of one operation, in seq order (paged: a long trail is read whole)."""
    trail: list[ChainEntry] = []
    after = 0
    while True:
        page = store.audit_entries(
            after_seq=after, scope=scope, operation_id=operation_id, limit=_PAGE
        )
        trail.extend(page)
        if len(page) < _PAGE:
            return trail
        after = page[-1].seq


def issue_receipts(
    store: Store,
    scope: str,
    operation_id: str,
    signer: ReceiptSigner | None,
    *,
    now: float,
    history: bool = False,
) -> list[dict[str, Any]]:
    """The signed current receipt (``history``: every revision, oldest first).

    Raises :class:`OperationNotFound`, or :class:`ReceiptUnavailable` when the row is not final,
    its final entry was pruned, or ``signer`` is None (no key configured).
    """
    row = store.get(scope, operation_id)
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    revisions = statements(
        row.to_dict(),
        store.list_approvals(scope, operation_id),
        operation_trail(store, scope, operation_id),
    )
    if signer is None:
        raise ReceiptUnavailable(
            "no receipt signing key is configured ([receipts] key_file or "
            "$EFFECTGATE_RECEIPT_KEY; `effectgate receipt keygen` makes one)",
            reason="no_signing_key",
        )
    chosen = revisions if history else revisions[-1:]
    lane = chosen[-1]["audit"]["lane"]
    # The lane's head now: it covers the entry each statement rests on (same lane, later seq).
    head_seq, head_hash = store.audit_heads()[lane]
    head = (lane, head_seq, head_hash)
    return [
        signer.sign(unsigned_receipt(s, issued_at=now, head=head, key_id=signer.key_id))
        for s in chosen
    ]
