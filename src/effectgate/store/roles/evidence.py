"""The evidence roles: the hash-chained audit log, alerts, and retention (legal holds, pruning).
Imports only ``store.base`` and the core.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from effectgate.store.base import AuditEvent

if TYPE_CHECKING:
    from effectgate._core.chain import ChainEntry
    from effectgate._core.controls import Alert
    from effectgate._core.retention import LegalHold, PruneReport

__all__ = ["Alerts", "AuditLog", "Retention"]


@runtime_checkable
class AuditLog(Protocol):
    """The append-only, hash-chained audit log."""

    def append_audit(
        self,
        kind: str,
        detail: Mapping[str, object],
        *,
        now: float,
        scope: str | None = None,
        operation_id: str | None = None,
    ) -> None: ...

    def iter_audit(self, after_seq: int = 0) -> Iterator[AuditEvent]: ...

    def audit_entries(
        self,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        lane: int | None = None,
        scope: str | None = None,
        operation_id: str | None = None,
        limit: int = 1000,
    ) -> list[ChainEntry]:
        """Audit entries with their chain fields, in seq order."""

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        """The last ``(seq, hash)`` of each audit lane."""

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Every other recorded ``(seq, hash)`` the log no longer carries: ``(seq, why)``.

        Beyond the heads, a store may record where its entries were (SQLite: each operations
        row names its latest journal or receipt entry). One whose entry is gone or different
        means entries were deleted or rewritten, even if later appends re-used their seqs.
        """


@runtime_checkable
class Alerts(Protocol):
    """Alerts, stored once per ``(kind, subject)``."""

    def record_alert(self, alert: Alert) -> bool:
        """Store an alert once per ``(kind, subject)``; True only the first time."""

    def list_alerts(self, limit: int = 1000) -> list[Alert]: ...

    def list_alerts_in(self, scope: str | None = None, *, limit: int = 1000) -> list[Alert]:
        """Alerts whose subject is one of the scope's operation keys (all when None)."""


@runtime_checkable
class Retention(Protocol):
    """Legal holds and pruning the audit chain from its start (store/_retention.py)."""

    def place_hold(
        self, scope: str, operation_id: str | None, *, by: str, reason: str, now: float
    ) -> LegalHold:
        """Hold a scope or one operation (audited): no prune crosses it."""

    def release_hold(self, hold_id: str, *, by: str, reason: str, now: float) -> LegalHold:
        """Release an active hold (audited)."""

    def list_holds(self, *, active_only: bool = True) -> list[LegalHold]:
        """Holds, oldest first."""

    def pruned_operation(self, scope: str, operation_id: str) -> tuple[str, str | None] | None:
        """``(final state, venue id)`` of an operation a prune removed, None if none did."""

    def audit_starts(self) -> dict[int, tuple[int, str]]:
        """Per pruned lane, the checkpoint ``(seq, hash)`` its first entry must follow."""

    def record_anchor(
        self, checkpoint: Mapping[str, Any], locations: Sequence[str], *, by: str, now: float
    ) -> None:
        """A chained ``audit_anchored`` entry: which heads were anchored where, by whom."""

    def prune_audit(
        self,
        *,
        before: float,
        now: float,
        by: str,
        anchored: Mapping[int, tuple[int, str]],
        min_age: Mapping[str, float],
        key: bytes | None = None,
    ) -> PruneReport:
        """Cut each lane up to its anchored head, carrying what is still in force into a
        chained checkpoint signed with ``key`` when given (one transaction)."""
