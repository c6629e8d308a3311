"""Kill switch rehearsals as values, and when a class is overdue for one. Pure, no I/O.

A rehearsal is either the blast-radius dry run (what the switch would hold now; nothing flips)
or a drill (the switch is flipped on, seen held, and flipped back). Each is recorded; a class
whose ``rehearsal_period`` has passed since its last rehearsal of either kind alerts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from effectgate._core.controls import Alert

__all__ = [
    "REHEARSAL_KINDS",
    "Rehearsal",
    "RehearsalStatus",
    "rehearsal_overdue",
    "rehearsal_status",
]

#: ``blast_radius``: a dry run; ``drill``: the switch really flipped on and back off.
REHEARSAL_KINDS: Final = ("blast_radius", "drill")


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """One recorded rehearsal of ``action``'s kill switch, by ``operator``."""

    id: int
    action: str
    kind: str
    operator: str
    at: float
    detail: Mapping[str, object]

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "action": self.action,
            "kind": self.kind,
            "operator": self.operator,
            "at": self.at,
            "detail": dict(self.detail),
        }


def rehearsal_overdue(action: str, period: float, last: float | None, now: float) -> Alert | None:
    """The ``rehearsal-overdue`` alert when ``action`` was last rehearsed (``last``; None:
    never) more than ``period`` seconds ago. Its subject names the last rehearsal, so a lapse
    pages once and the next lapse, after a new rehearsal, pages again."""
    if last is not None and now - last <= period:
        return None
    since = "never rehearsed" if last is None else f"last rehearsed {now - last:.0f}s ago"
    return Alert(
        "rehearsal-overdue",
        f"{action}@{'never' if last is None else repr(last)}",
        action,
        f"{action}: kill switch {since}, past its {period:g}s rehearsal period "
        f"(effectgate kill rehearse {action})",
        {"last_rehearsal": last, "period": period},
        now,
    )


@dataclass(frozen=True, slots=True)
class RehearsalStatus:
    """Where one class stands on its rehearsal schedule at ``now``."""

    action: str
    #: Seconds between rehearsals (None: the class has no schedule).
    period: float | None
    #: The newest rehearsal of either kind (None: never rehearsed).
    last: Rehearsal | None
    #: When the next one is due (None: no schedule; the past: overdue).
    due_at: float | None
    #: A schedule whose period has passed since the last rehearsal (or with none at all).
    overdue: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "period": self.period,
            "last": None if self.last is None else self.last.to_dict(),
            "due_at": self.due_at,
            "overdue": self.overdue,
        }


def rehearsal_status(
    action: str, period: float | None, last: Rehearsal | None, now: float
) -> RehearsalStatus:
    """``action``'s status; overdue exactly when :func:`rehearsal_overdue` would alert."""
    if period is None:
        return RehearsalStatus(action, None, last, None, False)
    at = None if last is None else last.at
    overdue = rehearsal_overdue(action, period, at, now) is not None
    return RehearsalStatus(action, period, last, now if at is None else at + period, overdue)
