"""A model change as a value: the shadow comparison window a class opens for a new provenance,
and how that window ends.

A class with ``model_window`` set (seconds) measures every new ``(model, harness_version)`` of
its proposals (the intent's ``proposed_by``) again: the first proposal under it opens a window,
puts the class in shadow mode (proposals are recorded and compared with the incumbent, never
sent) and raises the ``model-changed`` alert.

The window ends by time (at ``closes_at``) or, with :attr:`WindowEnd.cases`, by count (once that
many of the new provenance's cases were compared with the incumbent; ``closes_at`` is then its
deadline). At its end the disagreement rate of the new provenance's cases is judged against
:attr:`WindowEnd.max_disagreement`: at or under it the window *passes* and shadow mode is lifted
(the class keeps the authority it had before the change); over it the window *fails*
(``model-window-failed``) and, with ``on_fail = "demote"`` (the default), shadow mode stays on
until an operator lifts it, or with ``"alert"`` it is lifted and the alert pages. Without a
threshold the window ends *measured* (``model-window-ended``) and shadow mode stays for an
operator to judge. A window past its time with too few cases compared is *overdue*
(``model-window-overdue``): it stays open, in shadow mode, until the cases are there.
Pure, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from effectgate._core.controls import Alert
from effectgate.errors import RegistryError

__all__ = ["ON_FAIL", "ModelWindow", "WindowEnd", "WindowJudgement", "judge"]

#: What a failed window does: keep the class in shadow mode, or only page.
ON_FAIL: Final = ("demote", "alert")


@dataclass(frozen=True, slots=True)
class WindowEnd:
    """How a class's model windows end (``ActionClass.model_window_end``)."""

    #: Compared cases that end the window (by count); None: it ends by time.
    cases: int | None = None
    #: The highest disagreement rate (0..1) at which the window passes; None: not judged.
    max_disagreement: float | None = None
    #: ``"demote"``: a failed window keeps shadow mode on; ``"alert"``: it only pages.
    on_fail: str = "demote"

    def __post_init__(self) -> None:
        n = self.cases
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise RegistryError("model_window_cases must be an integer >= 1")
        rate = self.max_disagreement
        if rate is not None and (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not math.isfinite(rate)
            or not 0 <= rate <= 1
        ):
            raise RegistryError("model_window_max_disagreement must be a number from 0 to 1")
        if self.on_fail not in ON_FAIL:
            raise RegistryError(f"model_window_on_fail must be one of {list(ON_FAIL)}")


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """The comparison window of one provenance of ``action`` (``None``: the field was absent).

    ``closed_at`` and the rest are set once the window ended (:func:`judge`)."""

    action: str
    model: str | None
    harness_version: str | None
    opened_at: float
    closes_at: float
    closed_at: float | None = None
    #: ``passed``, ``failed`` (shadow lifted, paged), ``demoted`` (shadow kept), ``measured``.
    outcome: str | None = None
    compared: int | None = None
    disagreement_rate: float | None = None

    @property
    def subject(self) -> str:
        return f"{self.action}:{self.model or '-'}:{self.harness_version or '-'}"

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "model": self.model,
            "harness_version": self.harness_version,
            "opened_at": self.opened_at,
            "closes_at": self.closes_at,
            "closed_at": self.closed_at,
            "outcome": self.outcome,
            "compared": self.compared,
            "disagreement_rate": self.disagreement_rate,
        }

    def alert(self) -> Alert:
        """``model-changed``, once per class and provenance."""
        return Alert(
            "model-changed",
            self.subject,
            self.action,
            f"{self.action}: new proposer model {self.model!r} / harness "
            f"{self.harness_version!r}; shadow mode is on and its disagreement rate is measured "
            f"again until {self.closes_at:.0f} (effectgate shadow report {self.action} "
            f"--since {self.opened_at!r})",
            self.to_dict(),
            self.opened_at,
        )


@dataclass(frozen=True, slots=True)
class WindowJudgement:
    """What ending a window does: its ``outcome``, whether shadow mode may be lifted, and the
    alert it raises (None for a pass). ``outcome`` ``"overdue"``: the window stays open."""

    outcome: str
    lift_shadow: bool
    alert: Alert | None


def judge(
    window: ModelWindow, end: WindowEnd, compared: int, disagreed: int, now: float
) -> WindowJudgement | None:
    """The end of an open ``window`` at ``now`` after ``compared`` cases of its provenance
    (``disagreed`` of them disagreeing); None while it runs."""
    needed = end.cases or 1
    timed_out = now >= window.closes_at
    if compared < needed:
        if not timed_out:
            return None
        return WindowJudgement("overdue", False, _overdue(window, end, compared, now))
    if end.cases is None and not timed_out:
        return None
    rate = disagreed / compared
    figures = {**window.to_dict(), "compared": compared, "disagreement_rate": rate}
    what = f"{window.action}: model {window.model!r} / harness {window.harness_version!r}"
    limit = end.max_disagreement
    if limit is None:
        message = (
            f"{what}: its window ended with {rate:.1%} disagreement over {compared} cases; "
            f"shadow mode stays on until an operator judges it (effectgate shadow off "
            f"{window.action})"
        )
        return WindowJudgement(
            "measured", False, _alert("model-window-ended", window, message, figures, now)
        )
    if rate <= limit:
        return WindowJudgement("passed", True, None)
    demote = end.on_fail == "demote"
    message = (
        f"{what}: {rate:.1%} disagreement over {compared} cases, above the "
        f"{limit:.1%} the class allows; "
        + ("shadow mode stays on until an operator lifts it" if demote else "shadow mode is lifted")
    )
    alert = _alert("model-window-failed", window, message, {**figures, "limit": limit}, now)
    return WindowJudgement("demoted" if demote else "failed", not demote, alert)


def _overdue(window: ModelWindow, end: WindowEnd, compared: int, now: float) -> Alert:
    needed = end.cases or 1
    return _alert(
        "model-window-overdue",
        window,
        f"{window.action}: the window of model {window.model!r} / harness "
        f"{window.harness_version!r} closed at {window.closes_at:.0f} with {compared} of "
        f"{needed} cases compared; it stays open in shadow mode (feed the incumbent's outcomes)",
        {**window.to_dict(), "compared": compared, "needed": needed},
        now,
    )


def _alert(
    kind: str, window: ModelWindow, message: str, detail: dict[str, object], now: float
) -> Alert:
    # The subject names the window and its opening: each window pages once per kind.
    return Alert(
        kind, f"{window.subject}@{window.opened_at!r}", window.action, message, detail, now
    )
