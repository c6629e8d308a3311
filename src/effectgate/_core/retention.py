"""Legal holds and prune reports: the retention role's values (pure; store/_retention.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LegalHold", "PruneReport"]


@dataclass(frozen=True, slots=True)
class LegalHold:
    hold_id: str
    scope: str
    operation_id: str | None
    placed_by: str
    reason: str
    placed_at: float
    released_at: float | None = None
    released_by: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "hold_id": self.hold_id,
            "scope": self.scope,
            "operation_id": self.operation_id,
            "placed_by": self.placed_by,
            "reason": self.reason,
            "placed_at": self.placed_at,
            "released_at": self.released_at,
            "released_by": self.released_by,
        }


@dataclass
class PruneReport:
    """What one prune removed: per lane the new checkpoint, and the counts (``carried``: the
    entries still in force that its checkpoint restates)."""

    cuts: dict[int, tuple[int, str]] = field(default_factory=dict)
    entries: int = 0
    operations: int = 0
    carried: int = 0
    stopped: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "cuts": {str(k): {"seq": s, "hash": h} for k, (s, h) in sorted(self.cuts.items())},
            "entries": self.entries,
            "operations": self.operations,
            "carried": self.carried,
            "stopped": {str(k): v for k, v in sorted(self.stopped.items())},
        }
