"""The record stage: the venue's answer journalled as the row's second write, and why a row is
uncertain when there is no answer to journal.

Every function takes the store and the clock it writes with; none imports the gate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from effectgate._core.controls import Alert
from effectgate._core.receipts import proof_text, proves_not_applied, request_digest
from effectgate._core.states import State
from effectgate._execute.adapter import OutboundRequest, Outcome, Receipt
from effectgate._execute.alerts import AlertSink, deliver
from effectgate.errors import CommitOutcomeUnknown, EffectgateError, OutcomeUnknown, StoreError
from effectgate.store.base import Journal, Operation
from effectgate.store.roles import Store

if TYPE_CHECKING:
    from effectgate._evidence.audit import ChainEntry

__all__ = [
    "OUTCOME_UNKNOWN_ENTRY",
    "after_journal",
    "after_lost_commit",
    "explain",
    "journal_receipt",
    "late_receipt",
    "uncertain_cause",
    "unrecorded",
]

log = logging.getLogger("effectgate.executor")

#: The audit entry the gate writes when a dispatch ends without a receipt; its detail says why.
OUTCOME_UNKNOWN_ENTRY = "dispatch_outcome_unknown"
_TRAIL_LIMIT = 10_000


def journal_receipt(
    store: Store, now: float, row: Operation, receipt: Receipt, request: OutboundRequest
) -> Operation:
    """The receipt in the row's second write, bound to the dispatch id, the request digest,
    the venue's version and an evidence reference (docs/adapters.md, "Receipts"): no
    statement beyond the transition and its audit entry."""
    bound = binding(row, receipt, request)
    if receipt.outcome is Outcome.APPLIED:
        return store.transition(
            row.scope,
            row.operation_id,
            State.SUBMITTED,
            State.ACKNOWLEDGED,
            now=now,
            venue_id=receipt.venue_id,
            audit=bound,
            current=row,
        )
    proof = receipt.proof
    if receipt.outcome is Outcome.NOT_APPLIED and proof is not None:
        if proves_not_applied(proof):
            return store.transition(
                row.scope,
                row.operation_id,
                State.SUBMITTED,
                State.FAILED,
                now=now,
                detail=proof_text(proof),
                audit={**bound, "proof": proof.to_dict()},
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
    store.append_audit(
        OUTCOME_UNKNOWN_ENTRY,
        {**receipt.detail, **bound},
        now=now,
        scope=row.scope,
        operation_id=row.operation_id,
    )
    # In memory only: the audit entry just written is where a later read finds it.
    return replace(row, cause=_unknown_cause(receipt.detail))


def late_receipt(
    store: Store, now: float, row: Operation, receipt: Receipt, request: OutboundRequest
) -> Operation:
    """A receipt that arrived after the row left ``submitted``: audit it, return the row."""
    try:
        store.append_audit(
            "late_receipt",
            {
                "outcome": receipt.outcome.value,
                "venue_id": receipt.venue_id,
                "proof": receipt.proof.to_dict() if receipt.proof else None,
                "detail": dict(receipt.detail),
                **binding(row, receipt, request),
            },
            now=now,
            scope=row.scope,
            operation_id=row.operation_id,
        )
        current = store.get(row.scope, row.operation_id)
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


def binding(row: Operation, receipt: Receipt, request: OutboundRequest) -> dict[str, object]:
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


def after_journal(alerts: AlertSink | None, action: str, done: Journal, now: float) -> None:
    """Page on a trip (after the commit that recorded it) and say why a row was held."""
    if done.tripped:
        reason = "; ".join(done.tripped)
        deliver(
            alerts,
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


def explain(store: Store, row: Operation) -> Operation:
    """Attach why a ``submitted`` row is uncertain: one indexed read of its audit trail."""
    if row.state is not State.SUBMITTED or row.cause is not None:
        return row
    try:
        trail = store.audit_entries(
            scope=row.scope, operation_id=row.operation_id, limit=_TRAIL_LIMIT
        )
    except (StoreError, OutcomeUnknown) as exc:
        # The row was read; only its explanation is missing. Say so, never fail for it.
        return replace(row, cause=f"not known: the audit trail could not be read ({exc.code})")
    return replace(row, cause=uncertain_cause(trail))


def after_lost_commit(store: Store, scope: str, operation_id: str) -> Operation:
    """The journal's COMMIT may or may not have landed: never dispatch on a guess.

    If the row is there it is returned as stored; a ``submitted`` row nobody called for
    stays uncertain and the reconciler writes it off past the horizon (invariant 3). If it
    is not there, nothing was journalled and the error goes to the caller, who may retry
    with the same operation id.
    """
    row = store.get(scope, operation_id)
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


def unrecorded(receipt: Receipt, exc: EffectgateError) -> str:
    """The cause when the receipt itself could not be journalled."""
    lost = f"the ledger could not record the receipt ({exc.code})"
    if receipt.outcome is Outcome.APPLIED:
        return f"the venue answered applied (venue id {receipt.venue_id}) but {lost}"
    if receipt.outcome is Outcome.NOT_APPLIED:
        said = proof_text(receipt.proof) if receipt.proof else "no proof"
        return f"the venue answered not applied ({said}) but {lost}"
    return f"{_unknown_cause(receipt.detail)}, and {lost}"
