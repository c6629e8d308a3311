"""Continuations under ``/v1/admin/continuations`` (operator tokens): the HTTP face of
:class:`~effectgate._execute.continuations.ContinuationService`, mirroring ``effectgate continue``
and the chain of ``effectgate ops show`` (docs/continuations.md).

The operator token's principal is the authoriser recorded; a token limited to one scope acts
only there. A refused continuation is ``409 continuation_refused`` with its ``reason`` and
writes nothing but the audit entry.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.continuation import ContinuationProof, Ground
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._doors._shared.controls import visible_scope
from effectgate._execute.continuations import ContinuationService
from effectgate._service import Service

__all__ = ["continuations_router"]

T = TypeVar("T")


class ContinuationProofIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ground: Ground = Field(description="permanent_absence, provider_idempotency, ...")
    kind: EvidenceKind = Field(description="The evidence's kind (the venue's own word)")
    reference: str | None = Field(None, max_length=2000, description="A venue id, a URL...")
    note: str | None = Field(None, max_length=2000, description="Why it proves it")
    expires_in: float = Field(300.0, gt=0, le=86400, description="Seconds the proof holds")


class ContinuationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    proof: ContinuationProofIn
    seq: int = Field(ge=1, description="next_seq of the chain, as observed")
    predecessor: str = Field(
        min_length=64, max_length=64, description="predecessor_digest of the chain, as observed"
    )
    intent: dict[str, Any] | None = Field(None, description="The compensation's intent")


def continuations_router(
    service: Service, operator: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    conts = ContinuationService(service.gate, probe_timeout=service.config.service.probe_timeout)

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    @router.get(
        "/continuations/{scope}/{operation_id}",
        summary="An original's continuation chain, and the fence the next one must name",
    )
    async def chain(who: operator, scope: str, operation_id: str) -> dict[str, Any]:
        visible_scope(who, scope)
        return (await call(conts.chain, operation_id, scope=scope)).to_dict()

    @router.post(
        "/continuations/{scope}/{operation_id}/{kind}",
        summary="Retry or compensate an original: a new, separately authorised action",
    )
    async def add(
        who: operator, scope: str, operation_id: str, kind: str, body: ContinuationIn
    ) -> dict[str, Any]:
        visible_scope(who, scope)
        if kind not in ("retry", "compensate"):
            from effectgate.errors import RouteNotFound

            raise RouteNotFound(f"no continuation kind {kind!r} (retry or compensate)")
        proof = ContinuationProof(
            body.proof.ground,
            Proof(body.proof.kind, body.proof.reference, body.proof.note),
            service.gate.clock() + body.proof.expires_in,
        )
        common: dict[str, Any] = {
            "proof": proof,
            "by": who.name,
            "seq": body.seq,
            "predecessor": body.predecessor,
            "scope": scope,
        }
        if kind == "retry":
            row = await call(conts.retry, operation_id, **common)
        else:
            row = await call(conts.compensate, operation_id, body.intent or {}, **common)
        return {
            "continuation": row.to_dict(),
            "chain": (await call(conts.chain, operation_id, scope=scope)).to_dict(),
        }

    return router
