"""Wire shapes shared by the HTTP and MCP doors: the operation result and problem details.

The one mapping from the error tree to what the doors answer lives here too: status, code and
outcome come from the error's class (RFC 9457 problem details over HTTP, an ``isError`` tool
result carrying the same object over MCP). So does the mapping from a ledger row to the
``outcome`` and ``message`` a model reads.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._execute.operator import HELD_PREFIX
from effectgate.errors import (
    EffectgateError,
    ModelOutcome,
    OperationInFlight,
    RateLimited,
    UnknownActionClass,
)
from effectgate.store.base import Operation

__all__ = [
    "DecisionOut",
    "OperationOut",
    "Problem",
    "describe",
    "operation_dict",
    "operation_out",
    "problem_for",
]


class DecisionOut(BaseModel):
    """The policy's decision as journalled: the oversight tier and the reason."""

    model_config = ConfigDict(extra="forbid")

    tier: str | None
    reason: str | None
    policy_version: str | None


class OperationOut(BaseModel):
    """An operation as the ledger holds it, with what it means for the caller."""

    model_config = ConfigDict(extra="forbid")

    operation_id: str
    scope: str
    action: str
    outcome: ModelOutcome = Field(
        description="What happened: done (applied, or recorded in shadow mode), refused "
        "(nothing sent), failed (the venue did not apply it), uncertain (may or may not have "
        "taken effect), waiting_for_approval (a human must approve it), held (allowed, not "
        "sent yet)"
    )
    message: str = Field(description="What happened, what happens next and what not to do")
    state: State = Field(
        description="Ledger state; 'submitted' means sent, outcome not "
        "yet known (the reconciler settles it)"
    )
    cause: str | None = Field(description="Why the outcome is unknown, for a submitted row")
    fingerprint: str = Field(description="sha256 of the canonical effect fields")
    decision: DecisionOut
    venue_id: str | None = Field(description="The venue's id for the effect, when known")
    detail: str | None
    created_at: float
    updated_at: float
    submitted_at: float | None
    replayed: bool = Field(
        description="True when this call found the operation already "
        "journalled (a retry): nothing was sent again"
    )


def operation_out(op: Operation, registry: Registry | None = None) -> OperationOut:
    """The wire form of ``op``; ``registry`` lets the message name the visibility horizon."""
    outcome, message = describe(op, _horizon(registry, op.action))
    return OperationOut(
        operation_id=op.operation_id,
        scope=op.scope,
        action=op.action,
        outcome=outcome,
        message=message,
        state=op.state,
        cause=op.cause,
        fingerprint=op.fingerprint,
        decision=DecisionOut(tier=op.tier, reason=op.reason, policy_version=op.policy_version),
        venue_id=op.venue_id,
        detail=op.detail,
        created_at=op.created_at,
        updated_at=op.updated_at,
        submitted_at=op.submitted_at,
        replayed=op.replayed,
    )


def operation_dict(op: Operation, registry: Registry | None = None) -> dict[str, Any]:
    """:func:`operation_out` as JSON-able data."""
    return operation_out(op, registry).model_dump(mode="json")


def describe(op: Operation, horizon: float | None = None) -> tuple[ModelOutcome, str]:
    """``(outcome, message)`` for a ledger row: the text is written for a model to act on."""
    oid = op.operation_id
    check = (
        f"Check back with operation id {oid!r} (get_operation, or GET "
        f"/v1/operations/{oid}); do not send it again under a new operation id, which "
        "would be a second action."
    )
    why = op.detail or op.reason or "no reason recorded"
    state = op.state
    if state is State.ACKNOWLEDGED:
        return ModelOutcome.DONE, (
            f"Done: the venue applied it (venue id {op.venue_id or 'not reported'}). Sending "
            "the same operation id again returns this result and sends nothing."
        )
    if state is State.SHADOWED:
        # Shadow mode compares the agent with the incumbent; the agent's job is finished.
        return ModelOutcome.DONE, (
            "Recorded in shadow mode: effectgate did not send it; the incumbent process "
            "performs the real action. Nothing more to do; do not send it again."
        )
    if state is State.REJECTED:
        return ModelOutcome.REFUSED, (
            f"Refused: {why}. Nothing was sent. Sending the same request again is refused "
            "again; a changed request is a new action under a new operation id."
        )
    if state is State.DENIED:
        return ModelOutcome.REFUSED, (f"Refused at approval: {why}. Nothing was sent.")
    if state is State.AWAITING_APPROVAL:
        return ModelOutcome.WAITING_FOR_APPROVAL, (
            f"Waiting for a human to approve it (tier {op.tier}): nothing has been sent yet. "
            + check
        )
    if state is State.VALIDATED and (op.detail or "").startswith(HELD_PREFIX):
        hold = (op.detail or "").removeprefix(HELD_PREFIX).strip()
        return ModelOutcome.HELD, (
            f"Allowed but held by an operator control ({hold}): nothing has been sent. Once "
            "the control is lifted, effectgate sends it, once; ask again with the same "
            "operation id to learn the outcome (sending the same request again with it is "
            "safe). Do not send it under a new operation id, which would be a second action."
        )
    if state is State.SUPERSEDED:
        # A minted-id proposal whose approvals completed: its detail names the operation.
        return ModelOutcome.HELD, (
            f"Approved ({why}): the action is now an operation of its own; ask for that "
            "operation id, or send your request key again, to learn its outcome. Nothing is "
            "sent under this proposal handle; do not propose it again under a new operation "
            "id, which would be a second action."
        )
    if state is State.PROPOSED:
        return ModelOutcome.HELD, "Journalled, not decided yet: nothing has been sent. " + check
    if state is State.VALIDATED:
        return ModelOutcome.HELD, (
            "Allowed and journalled, not sent yet. Sending this request again with the same "
            "operation id dispatches it, once; a new operation id would be a second action."
        )
    if state is State.FAILED:
        return ModelOutcome.FAILED, (
            f"Failed: {why}. effectgate will not retry it. Proposing it again is a new action "
            "under a new operation id; if it was written off as absent at the venue, it may "
            "still appear there, so confirm with a human first."
        )
    if state is State.QUARANTINED and op.submitted_at is None:
        # Never dispatched (e.g. a key-namespace divergence caught before the commit): nothing
        # left effectgate, and nothing will until an operator resolves it.
        return ModelOutcome.HELD, (
            f"Quarantined for an operator before it was sent ({why}): nothing has been sent, "
            "and nothing is sent unless an operator releases it, back through policy and any "
            "approval, or closes it as failed. " + check
        )
    if state is State.QUARANTINED:
        return ModelOutcome.UNCERTAIN, (
            f"Quarantined for an operator ({why}): it may or may not have taken effect, and "
            "only an operator's resolution settles it. " + check
        )
    # submitted: journalled for dispatch, no receipt recorded.
    within = (
        f"within the venue's visibility horizon of {horizon:g}s"
        if horizon is not None
        else "once the venue's visibility horizon has passed"
    )
    return ModelOutcome.UNCERTAIN, (
        f"Outcome unknown: {op.cause or 'no receipt recorded yet'}. It may or may not have "
        "taken effect. Retrying with the same operation id is safe and sends nothing again; "
        f"the reconciler settles it {within}. " + check
    )


def _horizon(registry: Registry | None, action: str) -> float | None:
    if registry is None:
        return None
    try:
        return registry.get(action).visibility_horizon
    except UnknownActionClass:  # a row of a class no longer configured
        return None


class Problem(BaseModel):
    """RFC 9457 problem details, with effectgate's stable ``code`` and the model outcome."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    outcome: ModelOutcome
    field: str | None = None
    reason: str | None = None


def problem_for(exc: EffectgateError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``(status, problem body, extra headers)`` for an error from the tree.

    Everything comes from the error's class; no table keyed by code can miss one.
    """
    status = exc.status
    body: dict[str, Any] = {
        "type": f"urn:effectgate:problem:{exc.code}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": exc.message,
        "code": exc.code,
        "outcome": exc.outcome.value,
        **exc.details(),
    }
    headers: dict[str, str] = {}
    if isinstance(exc, OperationInFlight | RateLimited):
        retry = max(1, int(exc.retry_after + 0.999))
        body["retry_after"] = retry
        headers["Retry-After"] = str(retry)
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return status, body, headers
