"""The roles that stand between a validated row and its dispatch: operators' controls, released
rows, approvals, speculation records and the quarantine. Imports only ``store.base`` and the core.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from effectgate._core.states import State
from effectgate.store.base import Operation

if TYPE_CHECKING:
    from effectgate._core.breaker_signals import WindowCounts
    from effectgate._core.controls import (
        Alert,
        ApprovalOutcome,
        ApprovalRecord,
        ApprovalRequest,
        AuthorityStep,
        ClassControls,
        ShadowPair,
    )
    from effectgate._core.model_window import ModelWindow
    from effectgate._core.rehearsal import Rehearsal
    from effectgate._core.resolution import Resolution
    from effectgate._core.speculation import SpeculationRecord

__all__ = [
    "Approvals",
    "Controls",
    "ModelWindows",
    "Quarantine",
    "Rehearsals",
    "Releases",
    "Speculations",
]


@runtime_checkable
class Controls(Protocol):
    """Operators' switches, breakers, envelopes and shadow mode (each call one audited
    transaction)."""

    def controls(self, action: str) -> ClassControls: ...

    def list_controls(self) -> list[ClassControls]: ...

    def set_kill(
        self, action: str, on: bool, *, operator: str, reason: str | None, now: float
    ) -> ClassControls: ...

    def reset_breaker(
        self, action: str, *, operator: str, reason: str | None, now: float
    ) -> ClassControls: ...

    def set_shadow(self, action: str, on: bool, *, operator: str, now: float) -> ClassControls: ...

    def trip_breaker(
        self,
        action: str,
        signals: Sequence[tuple[str, str]],
        *,
        now: float,
        trigger: str | None = None,
    ) -> bool:
        """Open the breaker for ``signals`` (``(name, why)``) as the system, not an operator;
        False when it was open already. Only an operator's reset closes it."""

    def apply_authority_step(
        self,
        action: str,
        axis: str,
        new: object,
        *,
        evidence: Mapping[str, object],
        reverse_on: str | None,
        operator: str,
        now: float,
    ) -> AuthorityStep: ...

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]: ...

    def record_incumbent(
        self,
        correlation_id: str,
        action: str,
        fingerprint: str | None,
        effect: Mapping[str, object] | None,
        *,
        source: str,
        now: float,
    ) -> None: ...

    def shadow_pairs(self, action: str | None = None) -> list[ShadowPair]: ...

    def count_dispatched(self, since: float) -> dict[str, int]:
        """``{action: n}`` of dispatches at or after ``since`` (the envelope's dispatch log,
        kept at least a day): the console's dispatch rates."""

    def breaker_window(self, action: str, since: float, repeat: str) -> WindowCounts:
        """The breaker's signal counts of ``action`` since ``since`` (``same_fingerprint``:
        operation ids under ``repeat``), read without a transaction (evaluate's forecast)."""

    def seen_targets(self, targets: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which ``(lane, value)`` pairs the new-target signal has seen; remembers nothing."""

    def dispatch_window(self, action: str, since: float) -> tuple[int, int]:
        """``(count, value_micros)`` of ``action``'s dispatches since ``since``: the envelope's
        rate and exposure windows, read without a transaction or a lock (evaluate)."""


@runtime_checkable
class Releases(Protocol):
    """``validated`` rows a control released, for the standing dispatcher, and aged holds."""

    def lease_released(
        self, owner: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[tuple[str, str]]:
        """Claim up to ``limit`` released rows no live lease holds: ``(scope, operation_id)``.

        Released: the approvals completed and the proposer submitted it to be sent, a hold
        that time lifts may have room, or it was held before its class's latest operator
        change that can lift a hold. Never a row journalled to be dispatched by its caller.
        Replicas share them; the dispatch's compare-and-set still decides who sends.
        """

    def aged_holds(
        self, action: str, *, before: float, limit: int = 1000
    ) -> list[tuple[Operation, float]]:
        """Rows of ``action`` held since before ``before``: ``(row, held_since)``."""


@runtime_checkable
class Approvals(Protocol):
    """Approval requests and answers."""

    def approval_request(self, scope: str, operation_id: str) -> ApprovalRequest | None: ...

    def list_approvals(self, scope: str, operation_id: str) -> list[ApprovalRecord]: ...

    def decide_approval(
        self,
        scope: str,
        operation_id: str,
        *,
        approver: str,
        fingerprint: str,
        approve: bool,
        reason: str | None,
        now: float,
        roles: Collection[str] = (),
        mint_as: str | None = None,
    ) -> ApprovalOutcome:
        """One approver's answer to exactly this payload; releases or denies the row. A
        proposal handle's completing approval hands it over to the operation ``mint_as`` (a
        ``minted:`` id; refused without one), which the outcome's row then is."""

    def bind_approval_precondition(
        self,
        scope: str,
        operation_id: str,
        *,
        approver: str,
        fingerprint: str | None,
        detail: Mapping[str, object],
        now: float,
    ) -> bool:
        """Record the precondition an approval was given against, on that approval."""

    def expire_approvals(self, *, now: float) -> list[Operation]: ...


@runtime_checkable
class Speculations(Protocol):
    """Dual-key speculation records, proposal arrivals, declared key mappings (seed 000)."""

    def note_arrival(self, scope: str, operation_id: str, *, now: float) -> int:
        """One more arrival of the proposal under this id; the new count (the attempt)."""

    def record_speculation(
        self, record: SpeculationRecord, *, now: float, reject: bool = False
    ) -> tuple[SpeculationRecord, Operation | None]:
        """Store a speculation (``seq`` assigned); ``reject``: the validated row to
        ``rejected`` (a DENY verdict) in the same transaction."""

    def mark_speculation_stalled(
        self, scope: str, operation_id: str, detail: str, *, now: float
    ) -> Operation | None:
        """That detail on the still ``validated`` row, audited (None: no longer validated)."""

    def speculations(self, scope: str, operation_id: str) -> list[SpeculationRecord]: ...

    def latest_speculation(self, scope: str, operation_id: str) -> SpeculationRecord | None: ...

    def speculation_state(self, scope: str, operation_id: str) -> tuple[int, str | None]:
        """``(arrivals, declared sandbox key mapping or None)``."""

    def declare_key_mapping(
        self, scope: str, operation_id: str, ledger_key: str, sandbox_key: str, *, now: float
    ) -> str:
        """Declare the mapping once; the mapping stored (an earlier one stands)."""


@runtime_checkable
class Quarantine(Protocol):
    """The operators' queue: entering it, leaving it by resolution; a new approval round."""

    def quarantine(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        *,
        kind: str,
        reason: str,
        record: Mapping[str, object],
        by: str,
        now: float,
    ) -> Operation:
        """``expected -> quarantined`` with the full record in its audit entry."""

    def resolve_quarantine(
        self,
        scope: str,
        operation_id: str,
        resolution: Resolution,
        *,
        now: float,
        approval_ttl: float | None = None,
    ) -> Operation:
        """Apply an operator's resolution (invariant 10); ResolutionRefused otherwise. A
        release to ``awaiting_approval`` opens a new round of ``approval_ttl`` when given."""

    def reopen_approval(
        self,
        scope: str,
        operation_id: str,
        *,
        reason: str,
        required: int,
        ttl: float,
        by: str,
        now: float,
    ) -> Operation:
        """``validated -> awaiting_approval``: a new approval round, earlier approvals void."""

    def list_quarantined(
        self, scope: str | None = None, *, limit: int = 1000
    ) -> list[Operation]: ...

    def quarantine_summary(self) -> tuple[int, float | None]:
        """``(rows in the queue, when the oldest entered it)``."""

    def quarantined_from(self, scope: str, operation_id: str) -> State | None: ...


@runtime_checkable
class Rehearsals(Protocol):
    """Kill switch rehearsals, dry runs and drills (each record one audited transaction)."""

    def record_rehearsal(
        self, action: str, kind: str, *, operator: str, detail: Mapping[str, object], now: float
    ) -> Rehearsal: ...

    def list_rehearsals(self, action: str | None = None, *, limit: int = 100) -> list[Rehearsal]:
        """Newest first."""

    def last_rehearsals(self) -> dict[str, float]:
        """When each class was last rehearsed, of either kind."""


@runtime_checkable
class ModelWindows(Protocol):
    """Shadow comparison windows opened for a class's new proposer model or harness version."""

    def open_model_window(
        self,
        action: str,
        model: str | None,
        harness_version: str | None,
        *,
        now: float,
        period: float,
    ) -> ModelWindow | None:
        """First sight of the provenance: the window, shadow mode on and the alert in one
        transaction; None when it was seen before."""

    def close_model_window(
        self,
        window: ModelWindow,
        *,
        outcome: str,
        compared: int,
        disagreement_rate: float,
        lift_shadow: bool,
        alert: Alert | None,
        now: float,
    ) -> ModelWindow | None:
        """End an open window with its outcome, figures and alert in one transaction, lifting
        shadow mode when allowed and still the model change's; None: closed already."""

    def model_windows(self, action: str | None = None) -> list[ModelWindow]: ...
