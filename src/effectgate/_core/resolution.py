"""An operator's resolution of a quarantined row, and the one proof type it carries (pure).

A quarantined row leaves the queue only by a resolution (invariant 10):

* ``applied``: the effect happened, with evidence: the venue's record (its id), or where the
  venue has no read view a recipient's confirmation, the provider's console record, or an
  operator's attestation with its reason;
* ``failed``: the effect cannot apply, with proof (the venue's refusal or record of
  non-execution, the provider's console, or an attestation with its reason);
* ``released``: only for a row that was never dispatched, back to the state it was quarantined
  from (to ``awaiting_approval`` if its approvals were incomplete), so policy and approvals are
  never skipped.

:func:`plan_resolution` decides the target state; the store applies it in one transaction with
its audit entry. Later work (operators settling uncertain rows, venues with no read view) builds
the same :class:`Resolution` and calls the same service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from effectgate._core.states import RELEASABLE, State
from effectgate.errors import ResolutionRefused

__all__ = ["EvidenceKind", "Proof", "Resolution", "ResolutionOutcome", "plan_resolution"]

_MAX_TEXT = 2000


class ResolutionOutcome(StrEnum):
    APPLIED = "applied"
    FAILED = "failed"
    RELEASED = "released"


class EvidenceKind(StrEnum):
    #: The venue's own record of the effect (``reference``: its venue id).
    VENUE_RECORD = "venue_record"
    #: The venue's explicit refusal or record of non-execution (``reference``: where it is).
    VENUE_REFUSAL = "venue_refusal"
    #: The recipient confirmed receipt (a venue with no read view: an email's reply).
    RECIPIENT_CONFIRMATION = "recipient_confirmation"
    #: The provider's console or support record (``reference``: its id or URL).
    PROVIDER_CONSOLE = "provider_console"
    #: An operator's own attestation; ``note`` must say why it is true.
    OPERATOR_ATTESTATION = "operator_attestation"
    #: The ledger shows the row never reached ``submitted`` (a release needs nothing more).
    NEVER_DISPATCHED = "never_dispatched"
    #: The request provably never left effectgate: the transport's record that no request byte
    #: was written, or the gateway's own refusal before sending (``note``: which).
    NOT_SENT = "not_sent"


_FOR: dict[ResolutionOutcome, frozenset[EvidenceKind]] = {
    ResolutionOutcome.APPLIED: frozenset(
        {
            EvidenceKind.VENUE_RECORD,
            EvidenceKind.RECIPIENT_CONFIRMATION,
            EvidenceKind.PROVIDER_CONSOLE,
            EvidenceKind.OPERATOR_ATTESTATION,
        }
    ),
    ResolutionOutcome.FAILED: frozenset(
        {
            EvidenceKind.VENUE_REFUSAL,
            EvidenceKind.PROVIDER_CONSOLE,
            EvidenceKind.OPERATOR_ATTESTATION,
            EvidenceKind.NOT_SENT,
        }
    ),
    ResolutionOutcome.RELEASED: frozenset(
        {EvidenceKind.NEVER_DISPATCHED, EvidenceKind.OPERATOR_ATTESTATION}
    ),
}


def _text(name: str, value: object, *, required: bool) -> str | None:
    if value is None or value == "":
        if required:
            raise ResolutionRefused(f"{name} is required")
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT or not value.strip():
        raise ResolutionRefused(f"{name} must be non-blank text of at most {_MAX_TEXT} characters")
    return value


@dataclass(frozen=True, slots=True)
class Proof:
    """Evidence for a resolution: what kind, where it is (``reference``), and why (``note``)."""

    kind: EvidenceKind
    reference: str | None = None
    note: str | None = None
    detail: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", EvidenceKind(self.kind))
        except ValueError:
            kinds = ", ".join(k.value for k in EvidenceKind)
            raise ResolutionRefused(f"evidence kind {self.kind!r} is not one of {kinds}") from None
        _text("evidence reference", self.reference, required=False)
        _text("evidence note", self.note, required=False)
        if self.kind in (EvidenceKind.VENUE_RECORD, EvidenceKind.PROVIDER_CONSOLE):
            _text(f"{self.kind.value} evidence's reference", self.reference, required=True)
        if self.kind is EvidenceKind.NOT_SENT:
            _text("not_sent evidence's note (how it is known)", self.note, required=True)
        if self.kind is EvidenceKind.OPERATOR_ATTESTATION:
            _text("an operator's attestation's note (its reason)", self.note, required=True)
        if self.kind is EvidenceKind.RECIPIENT_CONFIRMATION and not (self.reference or self.note):
            raise ResolutionRefused("a recipient's confirmation needs a reference or a note")

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "reference": self.reference,
            "note": self.note,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True, slots=True)
class Resolution:
    """What an operator decided for a quarantined row, by whom, with what proof.

    ``venue_id``: the venue's id of the effect, for ``applied`` (required with
    ``venue_record`` evidence, where it is the evidence's reference by default).
    """

    outcome: ResolutionOutcome
    by: str
    proof: Proof
    reason: str
    venue_id: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "outcome", ResolutionOutcome(self.outcome))
        except ValueError:
            raise ResolutionRefused(
                f"outcome {self.outcome!r} is not applied, failed or released"
            ) from None
        if not isinstance(self.proof, Proof):
            raise ResolutionRefused("a resolution needs a Proof")
        _text("reason", self.reason, required=True)
        if self.proof.kind not in _FOR[self.outcome]:
            allowed = ", ".join(sorted(k.value for k in _FOR[self.outcome]))
            raise ResolutionRefused(
                f"{self.proof.kind.value} evidence cannot prove {self.outcome.value} "
                f"(accepted: {allowed})"
            )
        if self.outcome is ResolutionOutcome.APPLIED:
            if self.venue_id is None and self.proof.kind is EvidenceKind.VENUE_RECORD:
                object.__setattr__(self, "venue_id", self.proof.reference)
        elif self.venue_id is not None:
            raise ResolutionRefused(f"a venue id only goes with applied, not {self.outcome.value}")
        _text("venue id", self.venue_id, required=False)

    def to_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome.value,
            "by": self.by,
            "reason": self.reason,
            "venue_id": self.venue_id,
            "proof": self.proof.to_dict(),
        }


def plan_resolution(
    state: State, *, quarantined_from: State | None, dispatched: bool, resolution: Resolution
) -> State:
    """The state a resolution moves a row to; :class:`ResolutionRefused` if it may not.

    ``quarantined_from``: the state the row entered the queue from (None: not known, so a
    release is refused); ``dispatched``: whether the row ever reached ``submitted``.
    """
    if state is not State.QUARANTINED:
        raise ResolutionRefused(f"the row is {state.value!r}, not quarantined")
    if resolution.outcome is ResolutionOutcome.APPLIED:
        return State.ACKNOWLEDGED
    if resolution.outcome is ResolutionOutcome.FAILED:
        return State.FAILED
    if dispatched:
        raise ResolutionRefused(
            "a row that may have been dispatched is never released for dispatch again "
            "(invariant 10): resolve it applied or failed with evidence"
        )
    if quarantined_from is None or quarantined_from not in RELEASABLE:
        raise ResolutionRefused(
            "the state the row was quarantined from is not known to be one it can go back "
            f"to ({quarantined_from.value if quarantined_from else 'unknown'})"
        )
    return quarantined_from
