"""Continuations: a retry or a compensation as a new, separately authorised action (pure).

Invariant 9 says nothing retries a mutation automatically. A continuation is the one way an
operator sends the same effect again (``retry``) or undoes it (``compensate``): a new operation
in the reserved id namespace, linked to the original, fenced by a sequence number and the digest
of its predecessor's last observation, and admitted only with proof that has not expired:

* ``permanent_absence``: the venue proves the predecessor can no longer apply (its refusal or
  record of non-execution). A write-off as absent past the visibility horizon is such proof only
  when the class declares its venue's read view authoritative (``[classes.NAME.venue]
  read_view = "authoritative"``);
* ``provider_idempotency``: the venue honours the idempotency key (declared ``honours_key =
  true``) and a probe at admission confirms it holds no record under the predecessor's key;
* ``applied_compensation``: the latest compensation in the chain was applied (acknowledged);
* ``applied_effect`` (compensations only): the effect to undo was applied, with the venue's
  record of it.

A digest or a model's assertion is never proof. :func:`check_admission` decides; the store
applies the fence in the transaction that links the continuation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum

from effectgate._core.effects import CONTINUATION_PREFIX, MAX_COMPENSATIONS, MAX_RETRIES
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._core.states import State
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate.errors import ContinuationRefused

__all__ = [
    "ContinuationKind",
    "ContinuationLink",
    "ContinuationProof",
    "Ground",
    "Observed",
    "check_admission",
    "continuation_id",
    "observation_digest",
]

#: The detail the reconciler writes when it writes a row off as absent past the horizon.
WRITE_OFF_MARK = "absent at the venue"


class ContinuationKind(StrEnum):
    RETRY = "retry"
    COMPENSATE = "compensate"


class Ground(StrEnum):
    PERMANENT_ABSENCE = "permanent_absence"
    PROVIDER_IDEMPOTENCY = "provider_idempotency"
    APPLIED_COMPENSATION = "applied_compensation"
    APPLIED_EFFECT = "applied_effect"


_GROUNDS: dict[ContinuationKind, frozenset[Ground]] = {
    ContinuationKind.RETRY: frozenset(
        {Ground.PERMANENT_ABSENCE, Ground.PROVIDER_IDEMPOTENCY, Ground.APPLIED_COMPENSATION}
    ),
    ContinuationKind.COMPENSATE: frozenset({Ground.APPLIED_EFFECT}),
}
#: Evidence a ground accepts: the venue's own word, never a digest or an assertion.
_EVIDENCE: dict[Ground, frozenset[EvidenceKind]] = {
    Ground.PERMANENT_ABSENCE: frozenset({EvidenceKind.VENUE_REFUSAL}),
    Ground.PROVIDER_IDEMPOTENCY: frozenset({EvidenceKind.VENUE_RECORD, EvidenceKind.VENUE_REFUSAL}),
    Ground.APPLIED_COMPENSATION: frozenset({EvidenceKind.VENUE_RECORD}),
    Ground.APPLIED_EFFECT: frozenset({EvidenceKind.VENUE_RECORD}),
}


@dataclass(frozen=True, slots=True)
class ContinuationProof:
    """Why a continuation may run: its ground, the evidence, and until when it holds."""

    ground: Ground
    evidence: Proof
    expires_at: float

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "ground", Ground(self.ground))
        except ValueError:
            kinds = ", ".join(g.value for g in Ground)
            raise ContinuationRefused(
                f"proof ground {self.ground!r} is not one of {kinds}", reason="bad_proof"
            ) from None
        if not isinstance(self.evidence, Proof):
            raise ContinuationRefused("a proof needs evidence (a Proof)", reason="bad_proof")
        if self.evidence.kind not in _EVIDENCE[self.ground]:
            allowed = ", ".join(sorted(k.value for k in _EVIDENCE[self.ground]))
            raise ContinuationRefused(
                f"{self.ground.value} needs evidence of kind {allowed}, not "
                f"{self.evidence.kind.value} (a digest or an assertion is not proof)",
                reason="bad_proof",
            )
        if isinstance(self.expires_at, bool) or not isinstance(self.expires_at, int | float):
            raise ContinuationRefused("a proof needs expires_at (seconds)", reason="bad_proof")

    def to_dict(self) -> dict[str, object]:
        return {
            "ground": self.ground.value,
            "evidence": self.evidence.to_dict(),
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True, slots=True)
class Observed:
    """A row of the chain as last observed: what the fence digests and the rules read."""

    operation_id: str
    action: str
    state: State
    venue_id: str | None
    detail: str | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class ContinuationLink:
    """One continuation of an original, as the store keeps it."""

    scope: str
    original_id: str
    seq: int
    kind: ContinuationKind
    operation_id: str
    action: str
    predecessor_digest: str
    proof: ContinuationProof
    authorised_by: str
    created_at: float

    def to_dict(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "kind": self.kind.value,
            "operation_id": self.operation_id,
            "action": self.action,
            "predecessor_digest": self.predecessor_digest,
            "proof": self.proof.to_dict(),
            "authorised_by": self.authorised_by,
            "created_at": self.created_at,
        }


def continuation_id(original_id: str, seq: int) -> str:
    return f"{CONTINUATION_PREFIX}{original_id}:{seq}"


def observation_digest(row: Observed) -> str:
    """The digest a continuation names its predecessor by: any change to it makes it stale."""
    text = json.dumps(
        {
            "operation_id": row.operation_id,
            "state": row.state.value,
            "venue_id": row.venue_id,
            "detail": row.detail,
            "updated_at": repr(float(row.updated_at)),
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def check_admission(
    kind: ContinuationKind,
    *,
    original: Observed,
    chain: list[tuple[ContinuationLink, Observed | None]],
    venue: VenueContract,
    retries_declared: int,
    compensation: str | None,
    proof: ContinuationProof,
    seq: int,
    predecessor_digest: str,
    now: float,
) -> Observed:
    """Refuse (:class:`ContinuationRefused`) a continuation the rules do not admit; return its
    predecessor. ``chain``: the links so far, each with its row as observed (None: not yet
    journalled, a lost acknowledgement)."""
    kind = ContinuationKind(kind)
    if proof.ground not in _GROUNDS[kind]:
        allowed = ", ".join(sorted(g.value for g in _GROUNDS[kind]))
        raise ContinuationRefused(
            f"a {kind.value} needs a proof of {allowed}, not {proof.ground.value}",
            reason="bad_proof",
        )
    if not now < proof.expires_at:
        raise ContinuationRefused("the proof has expired", reason="proof_expired")
    if seq != len(chain) + 1:
        raise ContinuationRefused(
            f"sequence {seq} is stale: the chain has {len(chain)} continuation(s), so the next is "
            f"{len(chain) + 1}",
            reason="stale_sequence",
        )
    for link, row in chain:
        if row is None or row.state not in _SETTLED:
            raise ContinuationRefused(
                f"continuation {link.seq} ({link.operation_id}) is not settled yet: observe it "
                "first (a lost acknowledgement is recovered by observation, never a new admission)",
                reason="predecessor_unsettled",
            )
    predecessor = chain[-1][1] if chain else original
    if predecessor is None:  # unreachable: checked above
        raise ContinuationRefused("the predecessor is not journalled", reason="stale_predecessor")
    if observation_digest(predecessor) != predecessor_digest:
        raise ContinuationRefused(
            "the predecessor changed since it was observed (stale digest): observe it again",
            reason="stale_predecessor",
        )
    if original.state not in _SETTLED:
        raise ContinuationRefused(
            f"the original is {original.state.value}: only a settled original is continued",
            reason="original_unsettled",
        )
    done = [link.kind for link, _ in chain]
    if kind is ContinuationKind.RETRY:
        limit = min(retries_declared, MAX_RETRIES)
        if done.count(ContinuationKind.RETRY) >= limit:
            raise ContinuationRefused(
                f"{original.action} allows {limit} retr{'y' if limit == 1 else 'ies'} per original "
                f"(declared {retries_declared}, at most {MAX_RETRIES}); none left",
                reason="retries_exhausted",
            )
        _check_retry(predecessor, chain, venue, proof)
    else:
        if compensation is None:
            raise ContinuationRefused(
                f"{original.action} declares no compensation (compensation = ...)",
                reason="no_compensation",
            )
        if done.count(ContinuationKind.COMPENSATE) >= MAX_COMPENSATIONS:
            raise ContinuationRefused(
                f"at most {MAX_COMPENSATIONS} compensations per original; none left",
                reason="compensations_exhausted",
            )
        applied = _last_applied(original, chain)
        if applied is None:
            raise ContinuationRefused(
                "nothing in the chain was applied (acknowledged): there is nothing to compensate",
                reason="nothing_applied",
            )
        if proof.evidence.reference != applied.venue_id:
            raise ContinuationRefused(
                f"the evidence must reference the applied effect's venue record "
                f"{applied.venue_id!r}, not {proof.evidence.reference!r}",
                reason="bad_proof",
            )
    return predecessor


_SETTLED = frozenset({State.ACKNOWLEDGED, State.FAILED, State.REJECTED, State.DENIED})


def _last_applied(
    original: Observed, chain: list[tuple[ContinuationLink, Observed | None]]
) -> Observed | None:
    applied = original if original.state is State.ACKNOWLEDGED else None
    for link, row in chain:
        if row is not None and row.state is State.ACKNOWLEDGED:
            if link.kind is ContinuationKind.RETRY:
                applied = row
            elif link.kind is ContinuationKind.COMPENSATE:
                applied = None  # undone
    return applied


def _check_retry(
    predecessor: Observed,
    chain: list[tuple[ContinuationLink, Observed | None]],
    venue: VenueContract,
    proof: ContinuationProof,
) -> None:
    ground = proof.ground
    if ground is Ground.APPLIED_COMPENSATION:
        last = chain[-1] if chain else None
        if (
            last is None
            or last[0].kind is not ContinuationKind.COMPENSATE
            or last[1] is None
            or last[1].state is not State.ACKNOWLEDGED
        ):
            raise ContinuationRefused(
                "applied_compensation needs the latest continuation to be an applied compensation",
                reason="bad_proof",
            )
        return
    if predecessor.state is State.ACKNOWLEDGED:
        raise ContinuationRefused(
            "the predecessor was applied: compensate it first, a retry would apply it twice",
            reason="predecessor_applied",
        )
    if ground is Ground.PERMANENT_ABSENCE:
        written_off = WRITE_OFF_MARK in (predecessor.detail or "")
        if written_off and venue.read_view is not ReadView.AUTHORITATIVE:
            raise ContinuationRefused(
                "a write-off as absent past the visibility horizon is not proof of permanent "
                "absence unless the class declares its venue's read view authoritative",
                reason="absence_unproven",
            )
        if written_off and venue.revision("reconcile") is None:
            raise ContinuationRefused(
                "a write-off is proof of permanent absence only under a pinned reconcile "
                "contract: the class declares its read view authoritative but pins no "
                "reconcile_revision",
                reason="revision_unpinned",
            )
        if predecessor.state is not State.FAILED:
            raise ContinuationRefused(
                f"permanent absence needs a failed predecessor, not {predecessor.state.value}",
                reason="absence_unproven",
            )
        return
    if venue.honours_key is not KeyHonour.HONOURED:
        raise ContinuationRefused(
            "provider_idempotency needs a class whose venue is declared to honour the key",
            reason="key_not_honoured",
        )
    if venue.revision("idempotency") is None:
        raise ContinuationRefused(
            "provider_idempotency needs the class to pin the venue's key contract "
            "(idempotency_revision): an unpinned promise may have changed since it was checked",
            reason="revision_unpinned",
        )
