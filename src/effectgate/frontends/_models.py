"""Wire shapes shared by the HTTP and MCP doors: the operation result and problem details.

The one mapping from the error tree to what the doors answer lives here too: status, code and
outcome come from the error's class (RFC 9457 problem details over HTTP, an ``isError`` tool
result carrying the same object over MCP).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from effectgate.core.states import State
from effectgate.errors import (
    EffectgateError,
    ModelOutcome,
    OperationInFlight,
    RateLimited,
)
from effectgate.store.base import Operation

__all__ = ["DecisionOut", "OperationOut", "Problem", "operation_out", "problem_for"]


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
    body: dict[str, Any] = {"type": f"urn:effectgate:problem:{exc.code}",
                            "title": HTTPStatus(status).phrase, "status": status,
                            "detail": exc.message, "code": exc.code,
                            "outcome": exc.outcome.value, **exc.details()}
    headers: dict[str, str] = {}
    if isinstance(exc, OperationInFlight | RateLimited):
        retry = max(1, int(exc.retry_after + 0.999))
        body["retry_after"] = retry
        headers["Retry-After"] = str(retry)
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return status, body, headers
