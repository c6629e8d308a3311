"""The ledger's roles: journalling, dispatching and settling operations, reading them, and the
reconciler's sweep. Imports only the store's records (``store.base``) and the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from effectgate._core.states import State
from effectgate.store.base import (
    AdmissionCheck,
    Divergence,
    Journal,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
)

if TYPE_CHECKING:
    from effectgate._core.controls import DispatchGuard

__all__ = ["LedgerReads", "LedgerWrites", "RequestKeys", "Sweep"]


@runtime_checkable
class LedgerWrites(Protocol):
    """Journalling, dispatching and settling operations: the hot path."""

    def journal(
        self,
        new: NewOperation,
        path: Sequence[State],
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> Journal:
        """Journal a new row that walked ``path`` in one transaction, or return the existing one.

        An existing row with another fingerprint raises :class:`IdempotencyConflict`. A path
        ending in ``submitted`` is durable when this returns. In the same transaction the
        class's controls apply (:mod:`effectgate.store._guard`): the row may end ``rejected``
        (envelope), ``shadowed``, or stay ``validated`` held; the returned verdict says which.
        """

    def insert_operation(
        self,
        new: NewOperation,
        path: Sequence[State],
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> tuple[Operation, bool]:
        """:meth:`journal` as ``(row, created)``."""

    def dispatch(
        self,
        scope: str,
        operation_id: str,
        *,
        now: float,
        guard: DispatchGuard | None = None,
        audit: Mapping[str, object] | None = None,
        checks: Sequence[AdmissionCheck] = (),
    ) -> Journal:
        """``validated -> submitted`` with the controls checked in the same transaction.

        ``checks``: the pre-dispatch pipeline's in-transaction admission checks, run after the
        controls' verdict; one that answers anything but None raises DispatchRefused (carrying
        the answer) and the transaction rolls back.

        The verdict may instead shadow the row (``shadowed``) or hold it (still ``validated``,
        ``detail`` says why). Raises StaleState/OperationNotFound when the row is not
        ``validated``.
        """

    def transition(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        target: State,
        *,
        now: float,
        venue_id: str | None = None,
        detail: str | None = None,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
        current: Operation | None = None,
    ) -> Operation:
        """Compare-and-set ``expected -> target``; raise StaleState/OperationNotFound otherwise.

        A move to ``submitted`` is :meth:`dispatch`. ``current``: the caller's copy of the row
        (as it was at ``expected``); when given, the returned row is built from it plus the
        columns the update changed instead of reading it back (the receipt path).
        """

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        """Apply each move as its own compare-and-set, all in ONE transaction.

        Returns, per move, whether it applied; a stale move is skipped, not an error. Each
        applied move writes the same row update and chained audit entry as :meth:`transition`.
        An invalid move (state table, or a move to ``submitted``) raises before any write.
        """


@runtime_checkable
class LedgerReads(Protocol):
    """Reads of the operations ledger (one statement each)."""

    def get(self, scope: str, operation_id: str) -> Operation | None: ...

    def list_operations(
        self,
        *,
        state: State | None = None,
        action: str | None = None,
        scope: str | None = None,
        older_than: float | None = None,
        limit: int = 100,
    ) -> list[Operation]: ...

    def operations_window(
        self, action: str, since: float, until: float, *, limit: int = 100_000
    ) -> list[Operation]:
        """The rows of ``action`` journalled at ``since <= created_at < until``, oldest first."""

    def count_by_state(self) -> dict[tuple[str, str], int]:
        """``{(action, state): n}`` for metrics and the demo."""

    def oldest_submitted_at(self) -> float | None:
        """When the oldest ``submitted`` (uncertain) row was journalled; None when there is none."""

    def count_held(self) -> dict[str, int]:
        """``{action: n}`` of ``validated`` rows a control is holding (``detail`` ``held:...``)."""

    def list_held(
        self, *, action: str | None = None, scope: str | None = None, limit: int = 1000
    ) -> list[Operation]:
        """Held ``validated`` rows, most recently updated first, filtered before LIMIT."""


@runtime_checkable
class Sweep(Protocol):
    """What the reconciler pages, leases, locks and records."""

    def page_entries(
        self, after: str | None, limit: int, actions: Sequence[str] | None = None
    ) -> list[LedgerEntry]:
        """Ledger entries with ``op_key > after`` in key order (the sweep's side of the merge)."""

    def lease_uncertain(
        self, owner: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[LedgerEntry]:
        """Claim up to ``limit`` ``submitted`` rows no other live lease holds (replicas share)."""

    def sweep_lock(self, holder: str, *, now: float, ttl: float) -> AbstractContextManager[bool]:
        """Hold the single-sweeper lock for the block; yields False when another holds it."""

    def record_divergence(
        self,
        kind: str,
        op_key: str,
        venue_ids: Sequence[str],
        ledger_state: str | None,
        *,
        now: float,
    ) -> bool:
        """Store a divergence once; True only the first time it is seen (alarm once)."""

    def list_divergences(self, limit: int = 1000) -> list[Divergence]: ...

    def list_divergences_in(
        self, scope: str | None = None, *, limit: int = 1000
    ) -> list[Divergence]:
        """Divergences of one scope's operation keys (all when None), filtered before LIMIT."""

    def count_divergences(self) -> dict[str, int]:
        """``{kind: n}`` over every divergence recorded."""


@runtime_checkable
class RequestKeys(Protocol):
    """A minted-id class's request keys, each bound once to the operation minted for it
    (docs/service.md, "Operation ids: caller or minted")."""

    def bind_request_key(
        self,
        scope: str,
        action: str,
        request_key: str,
        *,
        fingerprint: str,
        operation_id: str,
        now: float,
    ) -> tuple[str, str]:
        """Bind ``request_key`` to ``operation_id`` (just minted) unless it is bound already, in
        one audited transaction: ``(the bound operation id, its fingerprint)``. A binding with
        another fingerprint than ``fingerprint`` is audited as ``request_key_conflict``."""
