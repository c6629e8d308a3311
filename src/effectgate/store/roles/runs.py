"""The roles of agent runs: run-call journals and seals, recovery snapshots, continuations, and run
budgets with plan reservations. Imports only ``store.base`` and the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from effectgate._core.states import State
from effectgate.store.base import Journal, NewOperation

if TYPE_CHECKING:
    from effectgate._core.budgets import RunBudget, RunBudgetState
    from effectgate._core.continuation import ContinuationLink
    from effectgate._core.controls import DispatchGuard
    from effectgate._core.reservations import (
        AccountSnapshot,
        PlanPolicy,
        Reservation,
        ReservationRequest,
        Settlement,
    )
    from effectgate._core.run_value import LeafValue, RunLink
    from effectgate._core.runs import (
        ProviderReceipt,
        RunCall,
        RunCallRecord,
        RunCallRef,
        RunCompletion,
        RunSeal,
        RunSummary,
    )

__all__ = ["Budgets", "Continuations", "RunSnapshots", "Runs"]


class Runs(Protocol):
    """Run-call journals, seals and effects bound to run calls (docs/runs.md).

    The journal keeps digests and sizes, never prompts, arguments or results. A run's row
    orders every admission, recorded call, return, receipt and snapshot with its seal: none is
    admitted or recorded after a seal commits (invariant 13). A refusal writes only an audit
    line.
    """

    def record_run_call(
        self, scope: str, call: RunCall, *, now: float, actor: str
    ) -> tuple[RunCallRecord, bool]:
        """Journal an invocation before it is made: ``(record, True)`` the first time, the
        stored record and False for an identical replay; :class:`RunCallConflict` for another
        call in the slot; :class:`RunSealed` once the run is sealed, replays included."""

    def complete_run_call(
        self, scope: str, ref: RunCallRef, completion: RunCompletion, *, now: float, actor: str
    ) -> tuple[RunCallRecord, bool]:
        """Record the call's local return, once: the identical return again is False, another
        one :class:`RunCallConflict`. Allowed after a seal (late returns)."""

    def get_run_call(self, scope: str, run_id: str, slot: str) -> RunCallRecord | None: ...

    def list_run_calls(
        self, scope: str, run_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[RunCallRecord]:
        """Calls with ``slot > after`` in slot order, at most ``limit`` (1 to 1000)."""

    def seal_run(
        self, scope: str, run_id: str, *, actor: str, reason: str, now: float
    ) -> tuple[RunSeal, bool]:
        """Seal the run for good (an empty or unknown run too): ``(seal, True)`` the first
        time, the stored seal and False after."""

    def get_run(self, scope: str, run_id: str) -> RunSummary | None: ...

    def list_runs(
        self, scope: str | None = None, *, sealed: bool | None = None, limit: int = 100
    ) -> list[RunSummary]: ...

    def count_open_runs(self) -> int: ...

    def count_unresolved_provider_calls(self) -> int:
        """Model calls with neither a local return nor a provider receipt."""

    def journal_bound(
        self,
        new: NewOperation,
        path: Sequence[State],
        ref: RunCallRef,
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> Journal:
        """:meth:`LedgerWrites.journal`, admitted against the exact unfinished tool call
        ``ref`` in the same transaction (see :mod:`effectgate.store._runs`)."""

    def run_binding(self, scope: str, operation_id: str) -> RunCallRef | None: ...

    def put_provider_receipt(
        self,
        scope: str,
        run_id: str,
        slot: str,
        receipt: ProviderReceipt,
        *,
        now: float,
        actor: str,
    ) -> bool:
        """Keep an authenticated provider receipt (True: new); disagreeing ones side by side."""

    def provider_receipts(
        self, scope: str, run_id: str, slot: str | None = None
    ) -> list[tuple[str, ProviderReceipt]]: ...


@runtime_checkable
class RunSnapshots(Protocol):
    """Recovery snapshots of sealed runs, kept by digest (disagreeing ones side by side)."""

    def snapshot_run(
        self, scope: str, run_id: str, *, now: float, actor: str
    ) -> tuple[bytes, str, bool]:
        """``(document, digest, stored_now)``; refused when unsealed or over a bound."""

    def list_run_snapshots(
        self, scope: str, run_id: str
    ) -> list[tuple[str, int, int, float, str]]: ...

    def get_run_snapshot(self, scope: str, run_id: str, digest: str) -> bytes | None: ...


@runtime_checkable
class Continuations(Protocol):
    """Continuation links: retries and compensations of an original (docs/continuations.md)."""

    def link_continuation(self, link: ContinuationLink, *, now: float) -> ContinuationLink:
        """Keep ``link`` if its sequence is next and its predecessor digest still matches, in
        one transaction holding the original; the same link again returns the stored one.
        Raises ContinuationRefused (stale) or OperationNotFound."""

    def continuations(self, scope: str, original_id: str) -> list[ContinuationLink]: ...

    def continuation_of(self, scope: str, operation_id: str) -> ContinuationLink | None: ...


@runtime_checkable
class Budgets(Protocol):
    """Run budgets and plan accounts with hierarchical reservations (docs/budgets.md). Every
    change is one transaction with a chained audit entry; a refusal writes an audit line only."""

    def set_run_budget(
        self, scope: str, run_id: str, budget: RunBudget, *, now: float, actor: str
    ) -> tuple[RunBudgetState, bool]:
        """Fix a run's limits (once; the same again is a replay, another a conflict)."""

    def run_budget(self, scope: str, run_id: str) -> RunBudgetState | None: ...

    def begin_run_step(
        self, scope: str, run_id: str, *, now: float, configured_output: int = 0
    ) -> tuple[RunBudgetState, int]:
        """Charge one model step, or refuse (``budget_exceeded``); the narrowed output cap."""

    def record_run_tokens(
        self, scope: str, run_id: str, reported: object, *, now: float
    ) -> RunBudgetState:
        """Charge reported tokens; missing or invalid usage pessimistically."""

    def open_plan_account(
        self, scope: str, policy: PlanPolicy, *, now: float, actor: str
    ) -> tuple[PlanPolicy, bool]: ...

    def reserve(
        self, scope: str, request: ReservationRequest, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Admit against the root and the immediate parent; same id and request: a replay."""

    def check_reservation(
        self, scope: str, plan_id: str, reservation_id: str, *, now: float
    ) -> None: ...

    def settle(
        self, scope: str, plan_id: str, settlement: Settlement, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """A leaf from its usage, a branch from its settled children's charges."""

    def plan_account(self, scope: str, plan_id: str) -> AccountSnapshot: ...

    def list_plan_accounts(
        self, scope: str | None = None, *, limit: int = 100
    ) -> list[tuple[str, str]]:
        """``(scope, plan_id)``, newest first."""

    def admit_run(
        self, scope: str, run_id: str, plan_id: str, reservation_id: str, *, now: float, actor: str
    ) -> tuple[RunLink, bool]:
        """Admit a run under an open leaf: its budget is the leaf's allocation (one run per
        leaf; the same again is a replay)."""

    def run_link(self, scope: str, run_id: str) -> RunLink | None: ...

    def settle_run(
        self, scope: str, run_id: str, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Settle the run's leaf from its stored usage and dispatched value."""

    def run_dispatched_value(self, scope: str, run_id: str) -> int:
        """The summed declared value of the run's effects in the record, in micros."""

    def leaf_value(self, scope: str, run_id: str) -> LeafValue | None:
        """The value allocation of the leaf ``run_id`` was admitted under and what the run
        dispatched (None: admitted under no reservation); a read (evaluate's quote)."""

    def prune_dispatch_record(self, *, now: float, keep: float = 86400.0) -> int:
        """Delete record entries no reader holds any more (window, open run, live grant)."""
