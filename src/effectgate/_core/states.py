"""The operation state table (DESIGN.md) as data, and the one function that applies it.

Guards raise :class:`~effectgate.errors.InvalidTransition`; nothing here relies on ``assert``.
"""

from __future__ import annotations

from enum import StrEnum

from effectgate.errors import InvalidTransition

__all__ = [
    "NON_TERMINAL",
    "RELEASABLE",
    "TERMINAL",
    "TRANSITIONS",
    "State",
    "check_transition",
    "is_terminal",
]


class State(StrEnum):
    PROPOSED = "proposed"
    REJECTED = "rejected"
    AWAITING_APPROVAL = "awaiting_approval"
    VALIDATED = "validated"
    DENIED = "denied"
    SHADOWED = "shadowed"
    SUBMITTED = "submitted"
    ACKNOWLEDGED = "acknowledged"
    FAILED = "failed"
    QUARANTINED = "quarantined"
    #: A minted-id class's proposal whose approvals completed: the action continues as a new
    #: operation under the id minted then (``detail`` names it); this row never runs.
    SUPERSEDED = "superseded"


TERMINAL: frozenset[State] = frozenset(
    {
        State.REJECTED,
        State.DENIED,
        State.SHADOWED,
        State.ACKNOWLEDGED,
        State.FAILED,
        State.SUPERSEDED,
    }
)
NON_TERMINAL: frozenset[State] = frozenset(State) - TERMINAL

# from-state -> allowed to-states. `failed` is terminal for dispatch but stays under the sweep:
# the reconciler reports a late appearance as a divergence rather than moving the row.
# `validated -> rejected` is a refusal just before dispatch (a sandbox's DENY verdict, later a
# revoked grant or an exhausted budget) and `validated -> awaiting_approval` a new approval
# round: both are the pre-dispatch pipeline's only two ways back.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.PROPOSED: frozenset({State.REJECTED, State.AWAITING_APPROVAL, State.VALIDATED}),
    # -> superseded: only a minted-id class's proposal handle, as its approvals complete.
    State.AWAITING_APPROVAL: frozenset({State.VALIDATED, State.DENIED, State.SUPERSEDED}),
    State.VALIDATED: frozenset(
        {State.SHADOWED, State.SUBMITTED, State.REJECTED, State.AWAITING_APPROVAL}
    ),
    State.SUBMITTED: frozenset({State.ACKNOWLEDGED, State.FAILED}),
}
for _state in NON_TERMINAL - {State.QUARANTINED}:
    TRANSITIONS[_state] = TRANSITIONS.get(_state, frozenset()) | {State.QUARANTINED}
del _state
#: Where a quarantined row may go, and only by an operator's resolution
#: (:mod:`effectgate._core.resolution` decides which): applied, failed, or released back to a
#: state it can only have come from if it was never dispatched. Never ``submitted``: a row that
#: may have been dispatched is never dispatched again (invariant 10).
TRANSITIONS[State.QUARANTINED] = frozenset(
    {State.ACKNOWLEDGED, State.FAILED, State.PROPOSED, State.AWAITING_APPROVAL, State.VALIDATED}
)
#: The states a quarantined row may be released back to (never dispatched).
RELEASABLE: frozenset[State] = frozenset({State.PROPOSED, State.AWAITING_APPROVAL, State.VALIDATED})


def is_terminal(state: State | str) -> bool:
    return State(state) in TERMINAL


def check_transition(current: State | str | None, target: State | str) -> State:
    """Return ``target`` as a :class:`State` if the table allows ``current -> target``, else raise.

    ``current`` is ``None`` for a row that does not exist yet; only ``proposed`` may start one.
    """
    to = target if type(target) is State else State(target)
    if current is None:
        if to is not State.PROPOSED:
            raise InvalidTransition(f"a new operation starts in 'proposed', not {to.value!r}")
        return to
    frm = current if type(current) is State else State(current)
    if to not in TRANSITIONS.get(frm, frozenset()):
        raise InvalidTransition(f"transition {frm.value!r} -> {to.value!r} is not allowed")
    return to
