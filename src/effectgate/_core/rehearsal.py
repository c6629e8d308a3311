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

__all__ = ["REHEARSAL_KINDS", "Rehearsal", "rehearsal_overdue"]

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
