"""A model change as a value: the shadow comparison window a class opens for a new provenance.

A class with ``model_window`` set (seconds) measures every new ``(model, harness_version)`` of
its proposals (the intent's ``proposed_by``) again: the first proposal under it opens a window,
puts the class in shadow mode (proposals are recorded and compared with the incumbent, never
sent) and raises the ``model-changed`` alert. The window bounds the measurement; authority
comes back only when an operator, having read the report for the window, turns shadow mode off.
Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from effectgate._core.controls import Alert

__all__ = ["ModelWindow"]


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """The comparison window of one provenance of ``action`` (``None``: the field was absent)."""

    action: str
    model: str | None
    harness_version: str | None
    opened_at: float
    closes_at: float

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "model": self.model,
            "harness_version": self.harness_version,
            "opened_at": self.opened_at,
            "closes_at": self.closes_at,
        }

    def alert(self) -> Alert:
        """``model-changed``, once per class and provenance."""
        return Alert(
            "model-changed",
            f"{self.action}:{self.model or '-'}:{self.harness_version or '-'}",
            self.action,
            f"{self.action}: new proposer model {self.model!r} / harness "
            f"{self.harness_version!r}; shadow mode is on and its disagreement rate is measured "
            f"again until {self.closes_at:.0f} (effectgate shadow report {self.action} "
            f"--since {self.opened_at!r})",
            self.to_dict(),
            self.opened_at,
        )
