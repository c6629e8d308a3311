"""Wire shapes shared by the HTTP and MCP doors: the operation result and problem details.

One mapping from the error tree to HTTP statuses lives here too, so both doors report the
same stable ``code`` for the same refusal (RFC 9457 problem details over HTTP, an ``isError``
tool result carrying the same object over MCP).
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from effectgate.core.states import State
from effectgate.errors import (
    ApprovalError,
    ControlError,
    EffectgateError,
    IdempotencyConflict,
    IntentError,
    OperationInFlight,
    RateLimited,
)
from effectgate.store.base import Operation

__all__ = ["STATUS_BY_CODE", "DecisionOut", "OperationOut", "Problem", "operation_out",
           "problem_for", "status_for"]



class DecisionOut(BaseModel):
    """The policy's decision as journalled: the oversight tier and the reason."""

    model_config = ConfigDict(extra="forbid")

    tier: str | None
    reason: str | None
    policy_version: str | None


class OperationOut(BaseModel):
    """An operation as the ledger holds it."""

    model_config = ConfigDict(extra="forbid")

    operation_id: str
    scope: str
    action: str
    state: State = Field(description="Ledger state; 'submitted' means sent, outcome not "
                             "yet known (the reconciler settles it)")
    fingerprint: str = Field(description="sha256 of the canonical effect fields")
    decision: DecisionOut
    venue_id: str | None = Field(description="The venue's id for the effect, when known")
    detail: str | None
    created_at: float
    updated_at: float
    submitted_at: float | None
    replayed: bool = Field(description="True when this call found the operation already "
                           "journalled (a retry): nothing was sent again")


def operation_out(op: Operation) -> OperationOut:
    return OperationOut(
        operation_id=op.operation_id, scope=op.scope, action=op.action, state=op.state,
        fingerprint=op.fingerprint,
        decision=DecisionOut(tier=op.tier, reason=op.reason, policy_version=op.policy_version),
        venue_id=op.venue_id, detail=op.detail, created_at=op.created_at,
        updated_at=op.updated_at, submitted_at=op.submitted_at, replayed=op.replayed)


class Problem(BaseModel):
    """RFC 9457 problem details, with effectgate's stable ``code``."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    field: str | None = None
    reason: str | None = None


STATUS_BY_CODE: Final[dict[str, int]] = {
    "invalid_intent": 400, "bad_request": 400, "idempotency_key_missing": 400,
    "invalid_idempotency_key": 400, "unauthenticated": 401, "forbidden": 403,
    "unknown_action_class": 404, "operation_not_found": 404, "not_found": 404,
    "method_not_allowed": 405, "operation_in_flight": 409, "body_too_large": 413,
    "idempotency_conflict": 422, "rate_limited": 429, "adapter_error": 502,
    "store_error": 503, "indeterminate_commit": 503, "invalid_control": 400,
    "approval_refused": 409,
}
#: An approval refused for these reasons is not a conflict with the row's state.
_APPROVAL_STATUS: Final = {"self_approval": 403, "invalid_approver": 400}

_TITLES: Final = {
    400: "Bad request", 401: "Unauthenticated", 403: "Forbidden", 404: "Not found",
    405: "Method not allowed", 409: "Operation in flight", 413: "Content too large",
    422: "Idempotency key reused with a different payload", 429: "Too many requests",
    500: "Internal error", 502: "Venue error", 503: "Ledger unavailable",
}


def status_for(exc: EffectgateError) -> int:
    if isinstance(exc, IntentError) and exc.reason == "too_large":
        return 413
    if isinstance(exc, ApprovalError):
        return _APPROVAL_STATUS.get(exc.reason, 409)
    return STATUS_BY_CODE.get(exc.code, 500)


def problem_for(exc: EffectgateError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``(status, problem body, extra headers)`` for an error from the tree."""
    status = status_for(exc)
    code = "body_too_large" if status == 413 else exc.code
    body: dict[str, Any] = {"type": f"urn:effectgate:problem:{code}",
                            "title": _TITLES.get(status, "Error"), "status": status,
                            "detail": exc.message, "code": code}
    headers: dict[str, str] = {}
    if isinstance(exc, IntentError):
        body["field"] = exc.field
        body["reason"] = exc.reason
    if isinstance(exc, ControlError):
        body["field"] = exc.field
    if isinstance(exc, ApprovalError):
        body["reason"] = exc.reason
        body["title"] = "Approval refused"
    if isinstance(exc, IdempotencyConflict):
        body["operation_id"] = exc.operation_id
    if isinstance(exc, OperationInFlight | RateLimited):
        retry = max(1, int(exc.retry_after + 0.999))
        body["retry_after"] = retry
        headers["Retry-After"] = str(retry)
    if isinstance(exc, OperationInFlight):
        body["operation_id"] = exc.operation_id
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return status, body, headers
