"""The budgets' wire models, shared by the HTTP routes (_http_budgets.py) and the MCP tools
(mcp_budgets.py): strict (nothing coerced), unknown fields refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from effectgate._core.budgets import Resources
from effectgate._core.reservations import PlanPolicy, ReservationRequest, Settlement

__all__ = [
    "PlanIn",
    "ReservationIn",
    "ResourcesIn",
    "RunBudgetIn",
    "SettlementIn",
    "StepIn",
    "StrictModel",
    "TokensIn",
]

_ID = Field(max_length=128)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ResourcesIn(StrictModel):
    steps: int = 0
    tokens: int = 0
    tool_calls: int = 0
    fan_out: int = 0
    replans: int = 0
    money_micros: int = 0
    value_micros: int = 0

    def value(self) -> Resources:
        return Resources(**self.model_dump())


class RunBudgetIn(StrictModel):
    max_steps: int = 0
    max_tokens: int = 0
    max_tool_calls: int = 0
    deadline: float | None = None


class StepIn(StrictModel):
    configured_output: int = Field(0, description="The provider's own per-call output cap")


class TokensIn(StrictModel):
    reported_tokens: int | None = Field(
        description="What the provider reported; null (or negative) is charged pessimistically"
    )


class PlanIn(StrictModel):
    plan_id: str = _ID
    plan_digest: str = Field(max_length=64)
    limits: ResourcesIn
    deadline: float
    token_only: bool = False
    pricing_revision: str | None = Field(None, max_length=128)
    value_bound: bool = False

    def value(self) -> PlanPolicy:
        return PlanPolicy(**{**self.model_dump(), "limits": self.limits.value()})


class ReservationIn(StrictModel):
    reservation_id: str = _ID
    plan_digest: str = Field(max_length=64)
    task_id: str = _ID
    owner_ref: str = _ID
    kind: str = Field(max_length=16, description="leaf or branch")
    allocation: ResourcesIn
    deadline: float
    parent_id: str | None = Field(None, max_length=128)
    money_bound: bool = False
    pricing_revision: str | None = Field(None, max_length=128)

    def value(self, plan_id: str) -> ReservationRequest:
        return ReservationRequest(
            **{**self.model_dump(), "plan_id": plan_id, "allocation": self.allocation.value()}
        )


class SettlementIn(StrictModel):
    reservation_id: str = _ID
    request_digest: str = Field(max_length=64)
    usage: ResourcesIn = Field(default_factory=ResourcesIn)
    known: list[str] = Field(default_factory=list, max_length=7)
    minimum: ResourcesIn | None = None
    close_branch: bool = False
    receipt: str | None = Field(None, max_length=512)

    def value(self) -> Settlement:
        return Settlement(
            reservation_id=self.reservation_id,
            request_digest=self.request_digest,
            usage=self.usage.value(),
            known=frozenset(self.known),
            minimum=None if self.minimum is None else self.minimum.value(),
            close_branch=self.close_branch,
            receipt=self.receipt,
        )
