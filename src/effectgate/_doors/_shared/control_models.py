"""The request and response bodies of the operator controls under ``/v1/admin`` (strict:
unknown fields are refused)."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from effectgate._doors._shared.models import OperationOut

__all__ = [
    "AlertOut",
    "ApprovalOutcomeOut",
    "BlastRadiusOut",
    "ControlsOut",
    "DecisionIn",
    "EnvelopeOut",
    "IncumbentIn",
    "IncumbentOut",
    "PendingOut",
    "ReasonIn",
    "ShadowGroupOut",
    "ShadowReportOut",
    "StepIn",
    "StepOut",
    "VerifyOut",
]

Action = Annotated[str, Field(max_length=64)]


class StrictIn(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReasonIn(StrictIn):
    reason: str | None = Field(None, max_length=500, description="Why (audited)")


class DecisionIn(ReasonIn):
    fingerprint: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="The exact payload decided on (from the list)"
    )


class StepIn(StrictIn):
    axis: str = Field(max_length=32, description="max_value, exposure, allowed_targets, rate")
    value: Any = Field(
        description='New value: "2000", {"limit": "5000", "window": 3600}, '
        '["XYZ-PERP"], {"limit": 10, "interval": 60}, or null to lift the axis'
    )
    evidence: dict[str, Any] = Field(
        description="What justified the step (audited). Widening an axis: the evidence "
        "`GET /envelope/{action}/evidence` gives, checked again at the step; tightening: a note"
    )
    reverse_on: str | None = Field(
        None,
        max_length=64,
        description="Widening: breaker_trip (default) or breaker_trip:<signal>; "
        "tightening: manual (default)",
    )


class IncumbentIn(StrictIn):
    correlation_id: str = Field(max_length=128)
    action: Action
    intent: dict[str, Any] | None = Field(
        None, description="What the incumbent did (the intent's fields); null: it did nothing"
    )


class ControlsOut(BaseModel):
    action: str
    killed: bool
    kill_reason: str | None
    breaker_open: bool
    breaker_reason: str | None
    shadow: bool
    envelope: dict[str, Any]
    envelope_version: int
    updated_by: str | None
    updated_at: float | None


class BlastRadiusOut(BaseModel):
    action: str
    killed: bool
    would_hold: list[str] = Field(description="Validated operations the switch would hold now")
    awaiting_approval: int
    in_flight: int = Field(description="Submitted rows: already sent, not affected")
    dispatched_last_hour: int


class PendingOut(OperationOut):
    effect: dict[str, Any]
    required: int
    expires_at: float | None
    approvers: list[str]


class ApprovalOutcomeOut(BaseModel):
    operation: OperationOut
    approvals: int
    required: int
    complete: bool


class EnvelopeOut(BaseModel):
    action: str
    version: int
    max_value: str | None
    exposure: dict[str, Any] | None
    allowed_targets: list[str] | None
    rate: dict[str, Any] | None


class StepOut(BaseModel):
    id: int
    action: str
    axis: str
    old: Any
    new: Any
    evidence: dict[str, Any]
    reverse_on: str
    operator: str
    at: float
    kind: str
    reverses: int | None
    active: bool


class ShadowGroupOut(BaseModel):
    model: str | None = Field(description="The proposals' proposed_by.model (audit field)")
    harness_version: str | None
    window_start: float | None
    window_end: float | None
    compared: int
    agreed: int
    disagreed: int
    awaiting_incumbent: int
    disagreement_rate: float | None


class ShadowReportOut(BaseModel):
    action: str | None
    compared: int
    agreed: int
    disagreed: int
    awaiting_incumbent: int
    disagreement_rate: float | None
    agreed_inaction: int = Field(description="Agreements where neither side acted")
    window: float | None
    since: float | None
    until: float | None
    groups: list[ShadowGroupOut] = Field(
        description="Per model, harness version and (with window) time window"
    )
    cases: list[dict[str, Any]]


class IncumbentOut(BaseModel):
    correlation_id: str
    fingerprint: str | None


class VerifyOut(BaseModel):
    ok: bool
    checked: int
    heads: dict[str, dict[str, Any]]
    findings: list[dict[str, Any]]


class AlertOut(BaseModel):
    kind: str
    subject: str
    action: str | None
    message: str
    detail: dict[str, Any]
    at: float
