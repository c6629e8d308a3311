"""Continuation links, written once over :class:`StoreHooks` (part of roles.Continuations).

A continuation (docs/continuations.md) is linked to its original in one transaction that holds
the original's row: the sequence number must be the next one and the digest of the
predecessor's last observation must still match, so two operators racing to continue the same
original, or one acting on a stale view, cannot both be admitted. The original row itself is
never changed; the link's audit entry goes on the original's trail.
"""

from __future__ import annotations

import json

from effectgate._core.continuation import (
    ContinuationKind,
    ContinuationLink,
    ContinuationProof,
    Ground,
    Observed,
    observation_digest,
)
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate.errors import ContinuationRefused, OperationNotFound
from effectgate.store import _sql as sql
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, dumps

__all__ = ["ContinuationRoles", "observed"]

_COLUMNS = (
    "scope, original_id, seq, kind, operation_id, action, predecessor_digest, proof, "
    "authorised_by, created_at"
)


def observed(row: Operation) -> Observed:
    """A ledger row as the continuation rules and the fence read it."""
    return Observed(
        row.operation_id, row.action, row.state, row.venue_id, row.detail, row.updated_at
    )


class ContinuationRoles(StoreHooks):
    """Link continuations to their original; read the chain."""

    def link_continuation(self, link: ContinuationLink, *, now: float) -> ContinuationLink:
        """Keep ``link`` if its sequence is the next and its predecessor digest still matches.

        The same link again (a lost acknowledgement) returns the stored one and admits nothing
        new; any other link under a taken sequence is refused as stale."""

        def work(tx: SharedTx, original: Operation | None) -> ContinuationLink:
            if original is None:
                raise OperationNotFound(
                    f"no operation {link.original_id!r} in scope {link.scope!r}"
                )
            chain = [_link(r) for r in tx.rows(_SELECT_CHAIN, (link.scope, link.original_id))]
            for kept in chain:
                if kept.seq == link.seq:
                    if (kept.kind, kept.operation_id, kept.predecessor_digest) == (
                        link.kind,
                        link.operation_id,
                        link.predecessor_digest,
                    ):
                        return kept
                    raise ContinuationRefused(
                        f"sequence {link.seq} of {link.original_id!r} is taken",
                        reason="stale_sequence",
                    )
            if link.seq != len(chain) + 1:
                raise ContinuationRefused(
                    f"sequence {link.seq} is stale: the next is {len(chain) + 1}",
                    reason="stale_sequence",
                )
            predecessor = original
            if chain:
                found = tx.rows(
                    f"SELECT {sql.OP_COLUMNS} FROM operations WHERE scope = ? AND operation_id = ?",
                    (link.scope, chain[-1].operation_id),
                )
                if not found:
                    raise ContinuationRefused(
                        "the previous continuation is not journalled yet",
                        reason="predecessor_unsettled",
                    )
                predecessor = sql.operation_from_row(found[0])
            if observation_digest(observed(predecessor)) != link.predecessor_digest:
                raise ContinuationRefused(
                    "the predecessor changed since it was observed (stale digest)",
                    reason="stale_predecessor",
                )
            tx.write(
                f"INSERT INTO continuations ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    link.scope,
                    link.original_id,
                    link.seq,
                    link.kind.value,
                    link.operation_id,
                    link.action,
                    link.predecessor_digest,
                    dumps(link.proof.to_dict()),
                    link.authorised_by,
                    now,
                ),
            )
            tx.audit(
                "continuation_linked",
                {**link.to_dict(), "created_at": now},
                now,
                link.scope,
                link.original_id,
            )
            return link

        return self._run(
            work,
            f"continue {link.scope}:{link.original_id}",
            Hold(key=(link.scope, link.original_id), row=(link.scope, link.original_id)),
        )

    def continuations(self, scope: str, original_id: str) -> list[ContinuationLink]:
        """The chain of ``original_id``, in sequence order."""
        return [_link(r) for r in self._rows(_SELECT_CHAIN, (scope, original_id), "continuations")]

    def continuation_of(self, scope: str, operation_id: str) -> ContinuationLink | None:
        """The link whose continuation is ``operation_id`` (None: not a continuation)."""
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM continuations WHERE scope = ? AND operation_id = ?",
            (scope, operation_id),
            "continuation_of",
        )
        return _link(rows[0]) if rows else None


_SELECT_CHAIN = (
    f"SELECT {_COLUMNS} FROM continuations WHERE scope = ? AND original_id = ? ORDER BY seq"
)


def _link(r: object) -> ContinuationLink:
    row = list(r)  # type: ignore[call-overload]
    proof = json.loads(row[7])
    evidence = proof["evidence"]
    return ContinuationLink(
        scope=str(row[0]),
        original_id=str(row[1]),
        seq=int(row[2]),
        kind=ContinuationKind(row[3]),
        operation_id=str(row[4]),
        action=str(row[5]),
        predecessor_digest=str(row[6]),
        proof=ContinuationProof(
            Ground(proof["ground"]),
            Proof(
                EvidenceKind(evidence["kind"]),
                evidence.get("reference"),
                evidence.get("note"),
                evidence.get("detail") or {},
            ),
            float(proof["expires_at"]),
        ),
        authorised_by=str(row[8]),
        created_at=float(row[9]),
    )
