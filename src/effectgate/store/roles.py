"""The store's contract, one protocol per role; :class:`Store` is all of them.

Every method is its own transaction unless stated. A capability that holds state adds a role:
a protocol here, one implementation over the dialect hooks (:mod:`effectgate.store._ledger`
shows the pattern: SQL written once with ``?`` placeholders, run through ``_rows`` for reads
and ``_run`` for one write transaction), DDL in each dialect's migrations, and the same
contract tests on both stores. Only connections and transactions, DDL, the hot path's
statements, locks and leases, and error classification are written per dialect.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from effectgate._core.states import State
from effectgate.store.base import (
    AdmissionCheck,
    AuditEvent,
    Divergence,
    Journal,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
)

if TYPE_CHECKING:
    from effectgate._core.budgets import RunBudget, RunBudgetState
    from effectgate._core.chain import ChainEntry
    from effectgate._core.continuation import ContinuationLink
    from effectgate._core.controls import (
        Alert,
        ApprovalOutcome,
        ApprovalRecord,
        ApprovalRequest,
        AuthorityStep,
        ClassControls,
        DispatchGuard,
        ShadowPair,
    )
    from effectgate._core.governed_policy import ActivePolicy, PolicyProposal
    from effectgate._core.grants import Grant, GrantSpec
    from effectgate._core.principals import IssuedToken, Principal, PrincipalRecord
    from effectgate._core.reservations import (
        AccountSnapshot,
        PlanPolicy,
        Reservation,
        ReservationRequest,
        Settlement,
    )
    from effectgate._core.resolution import Resolution
    from effectgate._core.retention import LegalHold, PruneReport
    from effectgate._core.run_value import RunLink
    from effectgate._core.runs import (
        ProviderReceipt,
        RunCall,
        RunCallRecord,
        RunCallRef,
        RunCompletion,
        RunSeal,
        RunSummary,
    )
    from effectgate._core.speculation import SpeculationRecord

__all__ = [
    "Alerts",
    "Approvals",
    "AuditLog",
    "Budgets",
    "ChannelNonces",
    "Controls",
    "Grants",
    "LedgerReads",
    "LedgerWrites",
    "PolicyVersions",
    "Principals",
    "Quarantine",
    "Releases",
    "Retention",
    "RunSnapshots",
    "Runs",
    "Speculations",
    "Store",
    "Sweep",
]


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
        reverse_on: str,
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
    ) -> ApprovalOutcome:
        """One approver's answer to exactly this payload; releases or denies the row."""

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
class Principals(Protocol):
    """Who may call: principals (name, role, tenant scope) and their tokens, by digest only.

    Authentication reads the store on every request, so a revocation holds at once in every
    replica. Each change is audited in its own transaction.
    """

    def create_principal(
        self,
        name: str,
        role: str,
        scope: str,
        *,
        created_by: str,
        now: float,
        replace: bool = False,
    ) -> IssuedToken:
        """A new principal and its token (the plaintext is in the result, once, and nowhere
        else). A live principal of that name is refused unless ``replace`` (which revokes it
        in the same transaction)."""

    def revoke_principal(self, name: str, *, revoked_by: str, now: float) -> PrincipalRecord:
        """Revoke the live principal ``name``; raises PrincipalNotFound when there is none."""

    def list_principals(self, *, include_revoked: bool = False) -> list[PrincipalRecord]: ...

    def principal_for_token(self, token: str) -> Principal | None:
        """The live principal holding ``token``, or None."""


@runtime_checkable
class Grants(Protocol):
    """Delegated authority (docs/authority.md): grants, delegations contained in their parent
    on every axis, transitive revocation. Each change is audited in its own transaction."""

    def create_grant(
        self, holder: str, spec: GrantSpec, *, created_by: str, now: float
    ) -> Grant: ...

    def delegate_grant(
        self, parent_id: str, holder: str, spec: GrantSpec, *, by: str, now: float
    ) -> Grant:
        """Raises GrantWider naming the axis when ``spec`` is wider than the parent."""

    def revoke_grants(
        self,
        *,
        by: str,
        now: float,
        grant_id: str | None = None,
        holder: str | None = None,
        created_by: str | None = None,
        reason: str = "",
    ) -> list[Grant]:
        """Revoke by grant, holder or creator, and everything delegated beneath."""

    def get_grant(self, grant_id: str) -> Grant: ...

    def list_grants(
        self, *, holder: str | None = None, include_revoked: bool = False
    ) -> list[Grant]: ...

    def live_grants_for(self, holder: str, now: float) -> list[Grant]:
        """Grants that count now: the grant and every ancestor unrevoked and unexpired."""

    def dispatched_micros(self, holder: str, actions: frozenset[str], since: float) -> int:
        """Value dispatched since ``since`` of operations ``holder`` proposed in ``actions``."""


@runtime_checkable
class PolicyVersions(Protocol):
    """Governed policy (docs/authority.md): versions by hash, proposals approved by a principal
    other than their author, the one active version every replica follows."""

    def propose_policy(
        self, document: str, policy_hash: str, *, author: str, now: float, note: str = ""
    ) -> PolicyProposal: ...

    def load_policy(
        self, document: str, policy_hash: str, *, by: str, now: float, note: str = ""
    ) -> PolicyProposal:
        """Apply at once, recorded and audited (where approval is not required)."""

    def approve_policy(self, proposal_id: str, *, approver: str, now: float) -> PolicyProposal:
        """Apply an open proposal; never by its author; only over the base it was made on."""

    def active_policy(self) -> ActivePolicy | None: ...

    def reject_policy(
        self, proposal_id: str, *, by: str, now: float, reason: str = ""
    ) -> PolicyProposal: ...

    def get_policy_proposal(self, proposal_id: str) -> PolicyProposal: ...

    def list_policy_proposals(self, *, limit: int = 100) -> list[PolicyProposal]: ...


@runtime_checkable
class ChannelNonces(Protocol):
    """Replay protection for signed callbacks (docs/authority.md), shared by every replica."""

    def claim_nonce(self, channel: str, nonce: str, *, now: float, forget_before: float) -> bool:
        """True the first time ``(channel, nonce)`` is seen; False for a replay (audited)."""

    def claim_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        now: float,
        lease: float,
    ) -> bool:
        """Whether ``holder`` may announce this approval round on ``channel`` now."""

    def finish_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        delivered: bool,
        detail: Mapping[str, object],
        now: float,
    ) -> None:
        """Record an announcement's outcome, audited; delivered rounds are never sent again."""


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
    ) -> PruneReport:
        """Remove each lane's prunable prefix up to its anchored head (one transaction)."""


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

    def prune_dispatch_record(self, *, now: float, keep: float = 86400.0) -> int:
        """Delete record entries no reader holds any more (window, open run, live grant)."""


@runtime_checkable
class Store(
    LedgerWrites,
    LedgerReads,
    Sweep,
    Controls,
    Releases,
    Approvals,
    AuditLog,
    Alerts,
    Principals,
    Speculations,
    Quarantine,
    Runs,
    Continuations,
    RunSnapshots,
    Retention,
    Budgets,
    Grants,
    PolicyVersions,
    ChannelNonces,
    Protocol,
):
    """Every role: what :func:`effectgate.store.open_store` returns."""

    def migrate(self) -> None:
        """Apply pending schema migrations (idempotent, safe from several processes)."""

    def schema_version(self) -> int: ...

    def close(self) -> None: ...
