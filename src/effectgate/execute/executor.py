"""The gate: strict parse, policy, journal, dispatch once, journal the receipt.

The order of durable steps is the contract: the row reaches ``submitted`` in a committed
transaction *before* the adapter is called (invariant 3), the store's compare-and-set decides who
dispatches (invariant 1), and nothing retries a mutation (invariant 9). An exception, timeout or
crash after the journal leaves the row ``submitted``: uncertain, for the reconciler to settle.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping

from effectgate.core.intent import Intent, Registry, Tier
from effectgate.core.policy import Decision, PolicySet
from effectgate.core.states import State
from effectgate.errors import (
    ConfigError,
    EffectgateError,
    IndeterminateCommit,
    IntentError,
    OperationNotFound,
    StaleState,
    StoreError,
    UnknownActionClass,
)
from effectgate.execute.adapter import Adapter, OutboundRequest, Outcome, Receipt
from effectgate.execute.crashpoints import crashpoint
from effectgate.store.base import NewOperation, Operation, Store, validate_identity

__all__ = ["Gate"]

log = logging.getLogger("effectgate.executor")

RawIntent = bytes | str | Mapping[str, object]


class Gate:
    """What a harness embeds: one object per process, safe to share between threads."""

    def __init__(self, *, store: Store, registry: Registry, adapters: Mapping[str, Adapter],
                 policy: PolicySet, clock: Callable[[], float] = time.time,
                 dispatch_timeout: float = 10.0) -> None:
        missing = sorted({registry.get(n).adapter for n in registry.names()} - set(adapters))
        if missing:
            raise ConfigError(f"action classes name adapters that are not configured: {missing}")
        if dispatch_timeout <= 0:
            raise ConfigError("dispatch_timeout must be positive")
        self.store = store
        self.registry = registry
        self.adapters = dict(adapters)
        self.policy = policy
        self.clock = clock
        self.dispatch_timeout = dispatch_timeout

    # --- the front door -------------------------------------------------------------------

    def submit(self, action: str, operation_id: str, intent: RawIntent, *,
               scope: str = "default", dispatch: bool = True) -> Operation:
        """Propose an action under ``operation_id`` and, if policy allows it automatically, run it.

        The same id with the same effect payload is a retry: the existing row comes back
        (``replayed=True``) and nothing is sent again. The same id with another payload raises
        :class:`~effectgate.errors.IdempotencyConflict`. Refused input raises
        :class:`~effectgate.errors.IntentError` and writes only an audit line.
        """
        parsed = self._parse(action, operation_id, intent, scope)
        action_class = self.registry.get(action)
        decision = self.policy.decide(action_class, parsed)
        path = _path_for(decision, dispatch)
        new = NewOperation(
            scope=scope, operation_id=operation_id, action=action,
            fingerprint=parsed.fingerprint, intent=parsed.snapshot, effect=parsed.effect,
            tier=decision.tier.value, reason=decision.reason,
            policy_version=decision.policy_version)
        try:
            row, created = self.store.insert_operation(new, path, now=self.clock())
        except IndeterminateCommit:
            return self._after_lost_commit(scope, operation_id)
        if not created:
            if row.state is State.VALIDATED and dispatch:
                return _replayed(self.dispatch(operation_id, scope=scope))
            return _replayed(row)
        if row.state is State.SUBMITTED:
            return self._call(row)
        return row

    def propose(self, action: str, operation_id: str, intent: RawIntent, *,
                scope: str = "default") -> Operation:
        """Journal and decide without dispatching (the row ends ``validated`` at most)."""
        return self.submit(action, operation_id, intent, scope=scope, dispatch=False)

    def dispatch(self, operation_id: str, *, scope: str = "default") -> Operation:
        """Send a ``validated`` operation. Any other state is returned untouched."""
        row = self.get(operation_id, scope=scope)
        if row.state is not State.VALIDATED:
            return row
        try:
            row = self.store.transition(scope, operation_id, State.VALIDATED, State.SUBMITTED,
                                        now=self.clock())
        except StaleState:
            # Another process won the compare-and-set; it alone dispatches (invariant 1).
            return self.get(operation_id, scope=scope)
        except IndeterminateCommit:
            return self._after_lost_commit(scope, operation_id)
        return self._call(row)

    def get(self, operation_id: str, *, scope: str = "default") -> Operation:
        row = self.store.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        return row

    # --- internals ------------------------------------------------------------------------

    def _parse(self, action: str, operation_id: str, intent: RawIntent, scope: str) -> Intent:
        try:
            validate_identity(scope, operation_id)
            return self.registry.parse(action, intent)
        except (IntentError, UnknownActionClass) as exc:
            # A refusal changes nothing but the audit log.
            raw = intent if isinstance(intent, bytes) else str(intent).encode("utf-8", "replace")
            self.store.append_audit("intent_refused", {
                "action": action if isinstance(action, str) else repr(action),
                "error": exc.to_dict(), "body_sha256": hashlib.sha256(raw).hexdigest(),
                "body_bytes": len(raw)}, now=self.clock(),
                scope=scope if isinstance(scope, str) else None,
                operation_id=operation_id if isinstance(operation_id, str) else None)
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
            raise IndeterminateCommit(f"journal commit for {operation_id!r} was lost and no row "
                                      "is visible; retry with the same operation id")
        log.error("journal commit for %s was indeterminate; not dispatching (state %s)",
                  row.op_key, row.state.value)
        return row

    def _call(self, row: Operation) -> Operation:
        """The one outbound call for a row this process moved to ``submitted``."""
        crashpoint("after_journal")
        adapter = self.adapters[self.registry.get(row.action).adapter]
        request = OutboundRequest(operation_key=row.op_key, action=row.action, effect=row.effect)
        try:
            receipt = adapter.execute(request, timeout=self.dispatch_timeout)
        except Exception as exc:
            log.warning("dispatch of %s ended without a receipt (%s); left uncertain",
                        row.op_key, type(exc).__name__)
            receipt = Receipt(Outcome.UNKNOWN, detail={"error": _describe(exc)})
        crashpoint("after_venue_call")
        try:
            row = self._journal_receipt(row, receipt)
        except (StoreError, StaleState) as exc:
            # The receipt may or may not be durable; the row is uncertain either way and the
            # reconciler settles it against the venue. Never dispatch again.
            log.error("receipt for %s not journalled (%s); reconciler will settle it",
                      row.op_key, exc)
            return row
        crashpoint("after_receipt")
        return row

    def _journal_receipt(self, row: Operation, receipt: Receipt) -> Operation:
        now = self.clock()
        if receipt.outcome is Outcome.APPLIED:
            return self.store.transition(row.scope, row.operation_id, State.SUBMITTED,
                                         State.ACKNOWLEDGED, now=now, venue_id=receipt.venue_id)
        if receipt.outcome is Outcome.NOT_APPLIED:
            return self.store.transition(row.scope, row.operation_id, State.SUBMITTED,
                                         State.FAILED, now=now, detail=receipt.proof,
                                         audit={"proof": receipt.proof})
        self.store.append_audit("dispatch_outcome_unknown", dict(receipt.detail), now=now,
                                scope=row.scope, operation_id=row.operation_id)
        return row


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


def _replayed(row: Operation) -> Operation:
    from dataclasses import replace

    return replace(row, replayed=True)


def _describe(exc: BaseException) -> str:
    # Adapters keep secrets out of their messages; still, cap what is journalled.
    text = str(exc) if isinstance(exc, EffectgateError) else type(exc).__name__
    return text[:500]
