"""The quarantine queue under ``/v1/admin/quarantine`` (operator tokens): the HTTP face of
:class:`~effectgate._execute.quarantine.QuarantineService`, mirroring ``effectgate quarantine``.

A token limited to one scope sees and resolves only that scope's rows. A resolution that cannot
apply is ``409 resolution_refused`` and writes nothing.
"""

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._doors._shared.controls import visible_scope
from effectgate._doors._shared.models import OperationOut, operation_dict
from effectgate._execute.quarantine import QuarantineService
from effectgate._service import Service

__all__ = ["quarantine_router"]

T = TypeVar("T")


class ProofIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: EvidenceKind = Field(description="What proves the outcome")
    reference: str | None = Field(None, max_length=2000, description="A venue id, a URL...")
    note: str | None = Field(None, max_length=2000, description="An attestation's own words")


class ResolutionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: ResolutionOutcome = Field(description="applied, failed or released")
    proof: ProofIn
    reason: str = Field(min_length=1, max_length=2000, description="Why (audited)")
    venue_id: str | None = Field(None, max_length=255, description="For applied")


class TakeOverIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000, description="Why (audited)")


class QueueOut(BaseModel):
    count: int
    oldest_age_seconds: float
    rows: list[OperationOut]


def quarantine_router(service: Service, operator: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    queue = QuarantineService(
        service.store, clock=service.operator.clock, approval_ttl=service.config.approvals.ttl
    )
    registry = service.config.registry

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    @router.get("/quarantine", response_model=QueueOut, summary="The quarantine queue")
    async def listing(
        who: operator,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        rows = await call(queue.list, visible_scope(who, scope), limit=limit)
        count, age = await call(queue.summary)
        return {
            "count": count,
            "oldest_age_seconds": age,
            "rows": [operation_dict(r, registry) for r in rows],
        }

    @router.get(
        "/quarantine/{scope}/{operation_id}",
        summary="Both keys, both records, the audit entries of both phases",
    )
    async def show(who: operator, scope: str, operation_id: str) -> dict[str, Any]:
        visible_scope(who, scope)
        return (await call(queue.show, scope, operation_id)).to_dict()

    @router.post(
        "/quarantine/{scope}/{operation_id}/resolve",
        response_model=OperationOut,
        summary="Settle a quarantined row with evidence (applied, failed, released)",
    )
    async def resolve(
        who: operator, scope: str, operation_id: str, body: ResolutionIn
    ) -> dict[str, Any]:
        visible_scope(who, scope)
        resolution = Resolution(
            outcome=body.outcome,
            by=who.name,
            proof=Proof(body.proof.kind, reference=body.proof.reference, note=body.proof.note),
            reason=body.reason,
            venue_id=body.venue_id,
        )
        row = await call(queue.resolve, scope, operation_id, resolution)
        return operation_dict(row, registry)

    @router.post(
        "/quarantine/{scope}/{operation_id}/take-over",
        response_model=OperationOut,
        summary="Take a non-terminal row (e.g. an uncertain one) into the queue",
    )
    async def take_over(
        who: operator, scope: str, operation_id: str, body: TakeOverIn
    ) -> dict[str, Any]:
        visible_scope(who, scope)
        row = await call(queue.take_over, scope, operation_id, by=who.name, reason=body.reason)
        return operation_dict(row, registry)

    return router
