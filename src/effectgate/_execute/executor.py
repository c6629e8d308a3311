"""The gate: strict parse, policy, journal, dispatch once, journal the receipt.

The order of durable steps is the contract: the row reaches ``submitted`` in a committed
transaction *before* the adapter is called (invariant 3), the store's compare-and-set decides who
dispatches (invariant 1), and nothing retries a mutation (invariant 9). An exception, timeout or
crash after the journal leaves the row ``submitted``: uncertain, for the reconciler to settle.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from effectgate._core.controls import Alert, ApprovalRules, BreakerConfig, DispatchGuard, Verdict
from effectgate._core.effects import CONTINUATION_PREFIX, check_compensations, is_continuation_id
from effectgate._core.intent import ActionClass, Intent, Registry, Tier
from effectgate._core.policy import Decision, PolicySet
from effectgate._core.receipts import proof_text, proves_not_applied, request_digest
from effectgate._core.states import State
from effectgate._execute import tracing as _tracing
from effectgate._execute.adapter import Adapter, OutboundRequest, Outcome, Receipt
from effectgate._execute.alerts import AlertSink, deliver
from effectgate._execute.continuation_budget import continuation_budget_check
from effectgate._execute.continuations import continuation_may_dispatch
from effectgate._execute.crashpoints import crashpoint
from effectgate._execute.predispatch import (
    ADAPTER_CALL_CEILING,
    ADMITTING,
    DispatchContext,
    InTxCheck,
    Pipeline,
    Refusal,
    Stage,
    apply_refusal,
    at_least,
    run_in_tx,
)
from effectgate._execute.runs import current_run_call, journal_for
from effectgate._execute.speculation import (
    active_speculation,
    before_dispatch,
    check_speculation,
    speculate,
)
from effectgate.errors import (
    CommitOutcomeUnknown,
    ConfigError,
    DispatchRefused,
    EffectgateError,
    IntentError,
    OperationNotFound,
    OutcomeUnknown,
    StaleState,
    StoreError,
    UnknownActionClass,
)
from effectgate.store.base import (
    IDENTITY_PATTERN,
    SYSTEM_PREFIX,
    Journal,
    NewOperation,
    Operation,
    validate_identity,
)
from effectgate.store.roles import Store

if TYPE_CHECKING:
    from effectgate._core.runs import RunCallRef
    from effectgate._evidence.audit import ChainEntry

__all__ = ["Gate", "uncertain_cause"]

log = logging.getLogger("effectgate.executor")

RawIntent = bytes | str | Mapping[str, object]


class Gate:
    """What a harness embeds: one object per process, safe to share between threads."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        adapters: Mapping[str, Adapter],
        policy: PolicySet,
        clock: Callable[[], float] = time.time,
        dispatch_timeout: float = 10.0,
        breakers: Mapping[str, BreakerConfig] | None = None,
        approvals: ApprovalRules | None = None,
        alerts: AlertSink | None = None,
        in_flight_grace: float = 2.0,
        authorise: Stage | None = None,
        preconditions: Iterable[Stage] = (),
        admission_checks: Iterable[InTxCheck] = (),
        process_id: str | None = None,
    ) -> None:
        missing = sorted({registry.get(n).adapter for n in registry.names()} - set(adapters))
        if missing:
            raise ConfigError(f"action classes name adapters that are not configured: {missing}")
        if dispatch_timeout <= 0:
            raise ConfigError("dispatch_timeout must be positive")
        if dispatch_timeout > ADAPTER_CALL_CEILING:
            raise ConfigError(
                f"dispatch_timeout {dispatch_timeout}s is above the {ADAPTER_CALL_CEILING:g}s "
                "ceiling on any one adapter call"
            )
        check_compensations(
            {
                n: (registry.get(n).effect_class.value, registry.get(n).compensation)
                for n in registry.names()
            }
        )
        #: This process, as the audit names a dispatcher: a continuation excludes it.
        self.process_id = process_id or f"process:{socket.gethostname()}:{os.getpid()}"
        self.store = store
        self.registry = registry
        self.adapters = dict(adapters)
        self.policy = policy
        self.clock = clock
        self.dispatch_timeout = dispatch_timeout
        # Operator configuration: the agent reaches none of it, and nothing here flips a
        # control (that is effectgate.Operator's job, on the operator's credential).
        self.breakers = dict(breakers or {})
        for name in self.breakers:
            registry.get(name)
        self.approvals = approvals or ApprovalRules()
        self.alerts = alerts
        # Speculation (seed 000): the retry horizon is the dispatch timeout plus this grace.
        self.in_flight_grace = in_flight_grace
        check_speculation(
            {n: registry.get(n) for n in registry.names()}, self.adapters, self.horizon
        )
        # The pre-dispatch pipeline (docs/continuations.md); empty: the path is unchanged.
        self.pipeline = Pipeline(
            authorise=authorise,
            preconditions=tuple(preconditions),
            in_tx=tuple(admission_checks),
            reapprove_ttl=self.approvals.ttl,
        )

    @property
    def horizon(self) -> float:
        """The retry horizon: from the last speculation to the end of a dispatch."""
        return self.dispatch_timeout + self.in_flight_grace

    # --- the front door -------------------------------------------------------------------

    def submit(
        self,
        action: str,
        operation_id: str,
        intent: RawIntent,
        *,
        scope: str = "default",
        dispatch: bool = True,
        principal: str | None = None,
        correlation_id: str | None = None,
        run_call: RunCallRef | None = None,
    ) -> Operation:
        """Propose an action under ``operation_id`` and, if policy allows it automatically, run it.

        The same id with the same effect payload is a retry: the existing row comes back
        (``replayed=True``) and nothing is sent again. The same id with another payload raises
        :class:`~effectgate.errors.IdempotencyConflict`. Refused input raises
        :class:`~effectgate.errors.IntentError` and writes only an audit line.

        ``principal``: who submits (mapped from the agent credential); it may never approve the
        action. ``correlation_id``: keys a shadowed row to the incumbent's outcome (default:
        the operation id). A row a control holds comes back ``validated`` with ``detail``
        saying why; one in shadow mode comes back ``shadowed``. A ``submitted`` row comes
        back with ``cause`` saying why its outcome is unknown.

        ``run_call`` (default: the harness's :func:`~effectgate.run_call_context`, if any): the
        run call proposing it. The row is then admitted only against that exact, unfinished
        tool call of an unsealed run, in the journal's transaction (docs/runs.md); a replay
        after the seal raises :class:`~effectgate.errors.RunSealed` carrying the row.
        """
        journal = journal_for(self.store, run_call or current_run_call())
        admission = ADMITTING.get()
        if admission is not None and admission.operation_id != operation_id:
            admission = None
        if is_continuation_id(operation_id) and admission is None:
            # Every agent-facing door (HTTP, MCP, gateway, the Python API) submits through here.
            raise IntentError(
                f"operation ids starting with {CONTINUATION_PREFIX!r} are reserved for "
                "continuations (docs/continuations.md)",
                field="operation_id",
                reason="reserved_operation_id",
            )
        # Tracing off (the default) is a plain branch: no span, no attribute dict (_tracing).
        traced = _tracing._tracer is not None
        where = (
            {"effectgate.operation_key": f"{scope}:{operation_id}", "effectgate.action": action}
            if traced
            else {}
        )
        if traced:
            with _tracing.span("effectgate.parse", where):
                parsed = self._parse(action, operation_id, intent, scope)
        else:
            parsed = self._parse(action, operation_id, intent, scope)
        if principal is not None and (
            not IDENTITY_PATTERN.fullmatch(principal) or principal.startswith(SYSTEM_PREFIX)
        ):
            raise IntentError(
                f"principal {principal!r} must match {IDENTITY_PATTERN.pattern} "
                f"and not start with {SYSTEM_PREFIX!r}",
                field="principal",
                reason="invalid_principal",
            )
        action_class = self.registry.get(action)
        if traced:
            with _tracing.span("effectgate.policy", where):
                decision = self.policy.decide(action_class, parsed)
        else:
            decision = self.policy.decide(action_class, parsed)
        if admission is not None:
            decision = at_least(decision, Tier(admission.min_tier))
        spec = active_speculation(self, action_class) if action_class.speculation else None
        # A speculating class stops at validated: the dry run comes before any dispatch.
        # With a pipeline configured the row stops at validated and _dispatch sends it, so its
        # stages run on the first submit too.
        staged = self.pipeline.active or admission is not None
        path = _path_for(decision, dispatch and spec is None and not staged)
        new = NewOperation(
            scope=scope,
            operation_id=operation_id,
            action=action,
            fingerprint=parsed.fingerprint,
            intent=parsed.snapshot,
            effect=parsed.effect,
            tier=decision.tier.value,
            reason=decision.reason,
            policy_version=decision.policy_version,
        )
        provenance = _provenance(parsed, decision, principal)
        if path[-1] is State.SUBMITTED:
            # Who dispatched: a continuation excludes the original's dispatcher.
            provenance["dispatcher"] = self.process_id
        for attempt in (1, 2):
            guard = self._guard(action_class, parsed.effect, correlation_id, dispatch)
            # Only the authenticated submitter is excluded from approving: proposed_by is an
            # audit field the agent writes, and audit fields never influence a decision.
            guard.proposers = (principal,) if principal else ()
            if admission is not None:
                guard.proposers = tuple(dict.fromkeys((*guard.proposers, *admission.excluded)))
            now = self.clock()
            try:
                if traced:
                    with _tracing.span("effectgate.journal", where):
                        done = journal(new, path, now=now, guard=guard, audit=provenance)
                else:
                    done = journal(new, path, now=now, guard=guard, audit=provenance)
                break
            except CommitOutcomeUnknown:
                # Journal again only when no row is visible: the unique index decides. If the
                # lost commit did land (even later), this insert conflicts and replays, and
                # nothing is sent; if it did not, this one is the journal (invariant 1).
                if attempt == 2 or self.store.get(scope, operation_id) is not None:
                    return self._after_lost_commit(scope, operation_id)
                log.warning(
                    "journal commit for %s:%s was indeterminate and left no row; journalling again",
                    scope,
                    operation_id,
                )
        row = done.row
        if spec is not None:
            return self._speculative(done, guard.action, now, dispatch, correlation_id)
        if not done.created:
            if self._replay_redispatches(row):
                return self._call(row)
            if row.state is State.VALIDATED and dispatch:
                return _replayed(
                    self.dispatch(operation_id, scope=scope, correlation_id=correlation_id)
                )
            return _replayed(self._explain(row))
        self._after_guard(guard.action, done, now)
        if row.state is State.SUBMITTED:
            return self._call(row)
        if row.state is State.VALIDATED and dispatch and staged:
            return self._dispatch(scope, operation_id, correlation_id)[0]
        return row

    def propose(
        self, action: str, operation_id: str, intent: RawIntent, *, scope: str = "default"
    ) -> Operation:
        """Journal and decide without dispatching (the row ends ``validated`` at most)."""
        return self.submit(action, operation_id, intent, scope=scope, dispatch=False)

    def dispatch(
        self,
        operation_id: str,
        *,
        scope: str = "default",
        correlation_id: str | None = None,
        dispatcher: str | None = None,
    ) -> Operation:
        """Send a ``validated`` operation. Any other state is returned untouched.

        The controls are checked in the transaction that writes ``submitted``: a held row
        comes back ``validated`` (``detail`` says why), a shadowed class's row ``shadowed``.
        """
        return self._dispatch(scope, operation_id, correlation_id, dispatcher)[0]

    def _dispatch(
        self,
        scope: str,
        operation_id: str,
        correlation_id: str | None,
        dispatcher: str | None = None,
    ) -> tuple[Operation, Verdict | None]:
        """:meth:`dispatch`, and the verdict of the dispatching transaction this call ran
        (None: it ran none to its end: the row was not validated, or another process moved
        it first). The standing dispatcher counts by it.

        Every dispatching path comes through here, so the pre-dispatch pipeline runs on each:
        authorisation, preconditions, the speculation verdict, then the dispatch transaction
        with the in-transaction checks (docs/continuations.md)."""
        row = self._row(scope, operation_id)
        if row.state is not State.VALIDATED:
            return self._explain(row), None
        action_class = self.registry.get(row.action)
        if is_continuation_id(operation_id) and not continuation_may_dispatch(
            self, row, dispatcher or self.process_id
        ):
            return self._explain(row), None
        if self.pipeline.checks_before_tx:
            ctx = DispatchContext(row, action_class, self.store, self.clock(), dispatcher)
            refusal = self.pipeline.before_tx(ctx)
            if refusal is not None:
                denied = apply_refusal(
                    self.store,
                    row,
                    refusal,
                    now=self.clock(),
                    stage="before",
                    pipeline=self.pipeline,
                )
                return self._explain(denied), None
        commit: dict[str, object] | None = None
        if action_class.speculation is not None:
            spec = active_speculation(self, action_class)
            if spec is not None:
                # The commit check; the dispatch's audit entry then carries both keys.
                stopped, commit = before_dispatch(self, row, spec)
                if stopped is not None:
                    return self._explain(stopped), None
        guard = self._guard(action_class, row.effect, correlation_id)
        # Who dispatched: a continuation excludes the original's dispatcher.
        commit = {**(commit or {}), "dispatcher": dispatcher or self.process_id}
        now = self.clock()
        checks = self.pipeline.in_tx
        if is_continuation_id(operation_id):
            # Charged separately, to its original's run, in this transaction.
            checks = (*checks, continuation_budget_check)
        try:
            if checks:
                done = self.store.dispatch(
                    scope,
                    operation_id,
                    now=now,
                    guard=guard,
                    audit=commit,
                    checks=(lambda tx, r, at: run_in_tx(checks, tx, r, at),),
                )
            else:
                done = self.store.dispatch(scope, operation_id, now=now, guard=guard, audit=commit)
        except DispatchRefused as exc:
            # An admission check refused inside the transaction, which rolled back: apply its
            # move instead (docs/continuations.md).
            answer = exc.refusal
            if not isinstance(answer, Refusal):
                raise
            refused = apply_refusal(
                self.store, row, answer, now=self.clock(), stage="admission", pipeline=self.pipeline
            )
            return self._explain(refused), None
        except StaleState:
            # Another process won the compare-and-set; it alone dispatches (invariant 1).
            return self.get(operation_id, scope=scope), None
        except CommitOutcomeUnknown:
            return self._after_lost_commit(scope, operation_id), None
        self._after_guard(guard.action, done, now)
        row = done.row
        if row.state is not State.SUBMITTED:
            return row, done.verdict
        for hook in self.pipeline.after_commit:
            try:
                hook(row)
            except Exception as exc:  # a notification must not stop a committed dispatch
                log.error("after-commit hook for %s raised %s", row.op_key, type(exc).__name__)
        return self._call(row), done.verdict

    def _speculative(
        self, done: Journal, action: str, now: float, dispatch: bool, correlation_id: str | None
    ) -> Operation:
        """After journalling a speculating class's row: count the arrival (the attempt), dry-run
        a new row at proposal, and dispatch it (the commit check runs in :meth:`_dispatch`)."""
        row = done.row
        attempt = self.store.note_arrival(row.scope, row.operation_id, now=now)
        if not done.created:
            if row.state is State.VALIDATED and dispatch:
                return _replayed(
                    self.dispatch(row.operation_id, scope=row.scope, correlation_id=correlation_id)
                )
            return _replayed(self._explain(row))
        self._after_guard(action, done, now)
        if row.state in (State.VALIDATED, State.AWAITING_APPROVAL):
            row = speculate(self, row, attempt)[1]
        if row.state is State.VALIDATED and dispatch:
            return self.dispatch(row.operation_id, scope=row.scope, correlation_id=correlation_id)
        return row

    def get(self, operation_id: str, *, scope: str = "default") -> Operation:
        """The row as stored; a ``submitted`` one with ``cause`` read from its audit trail."""
        return self._explain(self._row(scope, operation_id))

    def _row(self, scope: str, operation_id: str) -> Operation:
        row = self.store.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        return row

    def _replay_redispatches(self, row: Operation) -> bool:
        """Whether a replay of an existing row sends it again: never (invariants 1, 9).

        An uncertain (``submitted``) row is settled by the reconciler, not by a second call.
        """
        return False

    def _explain(self, row: Operation) -> Operation:
        """Attach why a ``submitted`` row is uncertain: one indexed read of its audit trail."""
        if row.state is not State.SUBMITTED or row.cause is not None:
            return row
        try:
            trail = self.store.audit_entries(
                scope=row.scope, operation_id=row.operation_id, limit=_TRAIL_LIMIT
            )
        except (StoreError, OutcomeUnknown) as exc:
            # The row was read; only its explanation is missing. Say so, never fail for it.
            return replace(row, cause=f"not known: the audit trail could not be read ({exc.code})")
        return replace(row, cause=uncertain_cause(trail))

    # --- internals ------------------------------------------------------------------------

    def _guard(
        self,
        ac: ActionClass,
        effect: Mapping[str, str | int | bool],
        correlation_id: str | None,
        dispatch: bool = True,
    ) -> DispatchGuard:
        """What the store checks in the dispatching transaction, from the class and config.

        ``dispatch``: the caller wants the row sent, so completing its approvals releases it
        to the standing dispatcher (``propose()`` leaves it to its caller)."""
        target = effect.get(ac.target_field) if ac.target_field else None
        return DispatchGuard(
            action=ac.name,
            value=ac.value_of(effect) if ac.value_of else None,
            target=str(target) if target is not None else None,
            breaker=self.breakers.get(ac.name),
            correlation_id=correlation_id,
            approvals_required=self.approvals.multi_approvers,
            approval_ttl=self.approvals.ttl,
            dispatch_on_approval=dispatch,
        )

    def _after_guard(self, action: str, done: Journal, now: float) -> None:
        """Page on a trip (after the commit that recorded it) and say why a row was held."""
        if done.tripped:
            reason = "; ".join(done.tripped)
            deliver(
                self.alerts,
                Alert(
                    "breaker-tripped",
                    f"{action}@{now!r}",
                    action,
                    f"breaker for {action} tripped: {reason}",
                    {"signals": list(done.tripped)},
                    now,
                ),
            )
        if done.verdict is not None and done.verdict.held:
            log.warning("%s dispatch held: %s", action, done.verdict.reason)

    def _parse(self, action: str, operation_id: str, intent: RawIntent, scope: str) -> Intent:
        try:
            validate_identity(scope, operation_id)
            return self.registry.parse(action, intent)
        except (IntentError, UnknownActionClass) as exc:
            # A refusal changes nothing but the audit log.
            raw = intent if isinstance(intent, bytes) else str(intent).encode("utf-8", "replace")
            self.store.append_audit(
                "intent_refused",
                {
                    "action": action if isinstance(action, str) else repr(action),
                    "error": exc.to_dict(),
                    "body_sha256": hashlib.sha256(raw).hexdigest(),
                    "body_bytes": len(raw),
                },
                now=self.clock(),
                scope=scope if isinstance(scope, str) else None,
                operation_id=operation_id if isinstance(operation_id, str) else None,
            )
            raise

    def _after_lost_commit(self, scope: str, operation_id: str) -> Operation:
        """The journal's COMMIT may or may not have landed: never dispatch on a guess.

        If the row is there it is returned as stored; a ``submitted`` row nobody called for
        stays uncertain and the reconciler writes it off past the horizon (invariant 3). If it
        is not there, nothing was journalled and the error goes to the caller, who may retry
        with the same operation id.
        """
        row = self.store.get(scope, operation_id)
        if row is None:
            raise CommitOutcomeUnknown(
                f"journal commit for {operation_id!r} was lost and no "
                "row is visible; retry with the same operation id"
            )
        log.error(
            "journal commit for %s was indeterminate; not dispatching (state %s)",
            row.op_key,
            row.state.value,
        )
        if row.state is State.SUBMITTED:
            return replace(
                row,
                cause="the ledger lost the reply to the commit that journalled "
                "it, so this call did not send it (a guess could send it "
                "twice)",
            )
        return row

    def _call(self, row: Operation) -> Operation:
        """The one outbound call for a row this process moved to ``submitted``."""
        crashpoint("after_journal")
        adapter = self.adapters[self.registry.get(row.action).adapter]
        request = OutboundRequest(operation_key=row.op_key, action=row.action, effect=row.effect)
        traced = _tracing._tracer is not None
        where = (
            {"effectgate.operation_key": row.op_key, "effectgate.action": row.action}
            if traced
            else {}
        )
        try:
            if traced:
                with _tracing.span("effectgate.dispatch", where):
                    receipt = adapter.execute(request, timeout=self.dispatch_timeout)
            else:
                receipt = adapter.execute(request, timeout=self.dispatch_timeout)
        except Exception as exc:
            log.warning(
                "dispatch of %s ended without a receipt (%s); left uncertain",
                row.op_key,
                type(exc).__name__,
            )
            receipt = Receipt(Outcome.UNKNOWN, detail={"error": _describe(exc)})
        crashpoint("after_venue_call")
        try:
            if traced:
                with _tracing.span(
                    "effectgate.receipt", {**where, "effectgate.outcome": receipt.outcome.value}
                ):
                    row = self._journal_receipt(row, receipt, request)
            else:
                row = self._journal_receipt(row, receipt, request)
        except StaleState:
            # The reconciler settled the row while the venue call was in flight. Its state
            # stands (compare-and-set); the receipt is recorded beside it, and the caller gets
            # the row as it is now, not the stale pre-call copy.
            return self._late_receipt(row, receipt, request)
        except (StoreError, OutcomeUnknown) as exc:
            # Nothing written, or the receipt may or may not be durable: the row is uncertain
            # either way and the reconciler settles it against the venue. Never dispatch again.
            log.error(
                "receipt for %s not journalled (%s); reconciler will settle it", row.op_key, exc
            )
            return replace(row, cause=_unrecorded(receipt, exc))
        crashpoint("after_receipt")
        return row

    def _late_receipt(
        self, row: Operation, receipt: Receipt, request: OutboundRequest
    ) -> Operation:
        """A receipt that arrived after the row left ``submitted``: audit it, return the row."""
        try:
            self.store.append_audit(
                "late_receipt",
                {
                    "outcome": receipt.outcome.value,
                    "venue_id": receipt.venue_id,
                    "proof": receipt.proof.to_dict() if receipt.proof else None,
                    "detail": dict(receipt.detail),
                    **_binding(row, receipt, request),
                },
                now=self.clock(),
                scope=row.scope,
                operation_id=row.operation_id,
            )
            current = self.store.get(row.scope, row.operation_id)
        except (StoreError, OutcomeUnknown) as exc:
            # The row is already settled; a late receipt lost with its audit line changes
            # nothing the caller must act on.
            log.error("late receipt for %s not recorded (%s)", row.op_key, exc)
            return row
        log.warning(
            "receipt for %s (%s) arrived after the row was settled as %s",
            row.op_key,
            receipt.outcome.value,
            current.state.value if current else "absent",
        )
        return current if current is not None else row

    def _journal_receipt(
        self, row: Operation, receipt: Receipt, request: OutboundRequest
    ) -> Operation:
        """The receipt in the row's second write, bound to the dispatch id, the request digest,
        the venue's version and an evidence reference (docs/adapters.md, "Receipts"): no
        statement beyond the transition and its audit entry."""
        now = self.clock()
        binding = _binding(row, receipt, request)
        if receipt.outcome is Outcome.APPLIED:
            return self.store.transition(
                row.scope,
                row.operation_id,
                State.SUBMITTED,
                State.ACKNOWLEDGED,
                now=now,
                venue_id=receipt.venue_id,
                audit=binding,
                current=row,
            )
        proof = receipt.proof
        if receipt.outcome is Outcome.NOT_APPLIED and proof is not None:
            if proves_not_applied(proof):
                return self.store.transition(
                    row.scope,
                    row.operation_id,
                    State.SUBMITTED,
                    State.FAILED,
                    now=now,
                    detail=proof_text(proof),
                    audit={**binding, "proof": proof.to_dict()},
                    current=row,
                )
            # Not proof that it cannot apply later: the outcome is unknown (invariant 3).
            receipt = Receipt(
                Outcome.UNKNOWN,
                detail={
                    **receipt.detail,
                    "error": f"not_applied with {proof.kind.value} evidence, which does not "
                    "prove it cannot apply later",
                },
            )
        self.store.append_audit(
            OUTCOME_UNKNOWN_ENTRY,
            {**receipt.detail, **binding},
            now=now,
            scope=row.scope,
            operation_id=row.operation_id,
        )
        # In memory only: the audit entry just written is where a later read finds it.
        return replace(row, cause=_unknown_cause(receipt.detail))


def _binding(row: Operation, receipt: Receipt, request: OutboundRequest) -> dict[str, object]:
    """What a journalled receipt is bound to (docs/adapters.md, "Receipts")."""
    evidence = receipt.venue_id
    if evidence is None and receipt.proof is not None:
        evidence = receipt.proof.reference
    return {
        "dispatch_id": row.dispatch_id,
        # The request is built from the row (key, action, effect), whose fingerprint is the
        # canonical effect's digest.
        "request_sha256": request_digest(request.operation_key, request.action, row.fingerprint),
        "venue_version": receipt.venue_version,
        "evidence": evidence,
    }


def _path_for(decision: Decision, dispatch: bool) -> list[State]:
    if not decision.allowed:
        return [State.PROPOSED, State.REJECTED]
    if decision.tier is not Tier.VALIDATE:
        return [State.PROPOSED, State.AWAITING_APPROVAL]
    if dispatch:
        # proposed -> validated -> submitted in ONE durable transaction: the floor of two
        # commits per action (this one, then the receipt).
        return [State.PROPOSED, State.VALIDATED, State.SUBMITTED]
    return [State.PROPOSED, State.VALIDATED]


def _provenance(parsed: Intent, decision: Decision, principal: str | None) -> dict[str, object]:
    """The audit facts of a proposal beyond the snapshot: who, from what, and what was decided."""
    by = parsed.audit.get("proposed_by")
    # A parsed intent's nested objects are dicts; the ABC check is the slow path for the rest.
    by = by if type(by) is dict or isinstance(by, Mapping) else {}
    digests = parsed.audit.get("tool_output_digests")
    return {
        "principal": principal,
        "model": by.get("model"),
        "harness_version": by.get("harness_version"),
        "context_digest": parsed.audit.get("context_digest"),
        "tool_output_digests": list(digests) if isinstance(digests, list | tuple) else [],
        "decision": {
            "allowed": decision.allowed,
            "tier": decision.tier.value,
            "reason": decision.reason,
            "policy_version": decision.policy_version,
        },
    }


def _replayed(row: Operation) -> Operation:
    return replace(row, replayed=True)


#: The audit entry the gate writes when a dispatch ends without a receipt; its detail says why.
OUTCOME_UNKNOWN_ENTRY = "dispatch_outcome_unknown"
_TRAIL_LIMIT = 10_000


def uncertain_cause(trail: Iterable[ChainEntry]) -> str:
    """Why a ``submitted`` row's outcome is unknown, from its audit trail (the latest word)."""
    cause = (
        "no receipt recorded: the call may still be in flight, or it was interrupted "
        "(or never made) after the row was journalled"
    )
    for entry in trail:
        if entry.kind == OUTCOME_UNKNOWN_ENTRY:
            detail = entry.detail
            cause = _unknown_cause(detail if isinstance(detail, Mapping) else {})
    return cause


def _unknown_cause(detail: Mapping[str, object]) -> str:
    error = detail.get("error")
    if error:
        return f"no receipt from the venue ({error})"
    return "the venue's answer did not say whether it applied the action"


def _unrecorded(receipt: Receipt, exc: EffectgateError) -> str:
    """The cause when the receipt itself could not be journalled."""
    lost = f"the ledger could not record the receipt ({exc.code})"
    if receipt.outcome is Outcome.APPLIED:
        return f"the venue answered applied (venue id {receipt.venue_id}) but {lost}"
    if receipt.outcome is Outcome.NOT_APPLIED:
        said = proof_text(receipt.proof) if receipt.proof else "no proof"
        return f"the venue answered not applied ({said}) but {lost}"
    return f"{_unknown_cause(receipt.detail)}, and {lost}"


def _describe(exc: BaseException) -> str:
    # Adapters keep secrets out of their messages; still, cap what is journalled.
    text = str(exc) if isinstance(exc, EffectgateError) else type(exc).__name__
    return text[:500]
