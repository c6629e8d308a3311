"""Grants under ``/v1/admin/grants`` (docs/authority.md). Mirrors ``effectgate grants``:

* ``GET /grants[?holder=&include_revoked=true]``, ``GET /grants/{grant_id}``
* ``POST /grants`` ``{"holder", "actions", "expires_in", ...}``: a root grant (``201``);
  operators of scope ``"*"`` only (a grant reaches every tenant it names)
* ``POST /grants/{grant_id}/delegate`` ``{"holder", ...}``: a grant beneath it, by its holder
  (any authenticated principal: the caller must hold the parent), contained on every axis
* ``POST /grants/revoke`` ``{"grant_id" | "holder" | "created_by", "reason"?}``: transitive
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.grants import parse_spec
from effectgate._doors._shared.controls import _global
from effectgate._service import Service

__all__ = ["grants_router"]


class SpecIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holder: str = Field(max_length=128, description="Who holds the grant")
    actions: list[str] | str = Field(description='Action classes, or "*"')
    targets: list[str] | str = Field("*", description='Targets, or "*"')
    environments: list[str] | str = Field("*", description='Environments, or "*"')
    scope: str = Field("*", max_length=64, description='The tenant, or "*"')
    expires_in: float | None = Field(None, gt=0, description="Seconds from now")
    expires_at: float | None = Field(None, gt=0, description="Unix time")
    max_value: str | None = Field(None, max_length=64, description="Per-action value ceiling")
    budget: str | None = Field(None, max_length=64, description="Aggregate value budget")
    hops: int = Field(0, ge=0, le=5, description="Further delegations allowed beneath")
    break_glass: bool = Field(False, description="Loud, short, root only")

    def spec_dict(self) -> dict[str, object]:
        raw = self.model_dump(exclude={"holder"})
        return {k: v for k, v in raw.items() if not (k.startswith("expires") and v is None)}


class RevokeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grant_id: str | None = Field(None, max_length=64)
    holder: str | None = Field(None, max_length=128)
    created_by: str | None = Field(None, max_length=128)
    reason: str = Field("", max_length=500)


def grants_router(
    service: Service, operator: Any, anyone: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    @router.get("/grants", summary="Grants (live ones; include_revoked for every one)")
    async def list_grants(
        who: operator,
        holder: Annotated[str | None, Query(max_length=128)] = None,
        include_revoked: Annotated[bool, Query()] = False,
    ) -> list[dict[str, object]]:
        rows = await run_in_threadpool(
            lambda: store.list_grants(holder=holder, include_revoked=include_revoked)
        )
        return [g.to_dict() for g in rows]

    @router.get("/grants/{grant_id}", summary="One grant")
    async def show_grant(who: operator, grant_id: str) -> dict[str, object]:
        return (await run_in_threadpool(store.get_grant, grant_id)).to_dict()

    @router.post("/grants", status_code=201, summary="Create a root grant")
    async def create_grant(who: operator, body: SpecIn) -> dict[str, object]:
        _global(who, "creating grants")
        now = service.clock()
        spec = parse_spec(body.spec_dict(), now=now)
        grant = await run_in_threadpool(
            lambda: store.create_grant(body.holder, spec, created_by=who.name, now=now)
        )
        return grant.to_dict()

    @router.post("/grants/{grant_id}/delegate", status_code=201, summary="Delegate beneath a grant")
    async def delegate_grant(who: anyone, grant_id: str, body: SpecIn) -> dict[str, object]:
        now = service.clock()
        spec = parse_spec(body.spec_dict(), now=now)
        grant = await run_in_threadpool(
            lambda: store.delegate_grant(grant_id, body.holder, spec, by=who.name, now=now)
        )
        return grant.to_dict()

    @router.post("/grants/revoke", summary="Revoke grants, and everything beneath them")
    async def revoke_grants(who: operator, body: RevokeIn) -> list[dict[str, object]]:
        _global(who, "revoking grants")
        gone = await run_in_threadpool(
            lambda: store.revoke_grants(
                by=who.name,
                now=service.clock(),
                grant_id=body.grant_id,
                holder=body.holder,
                created_by=body.created_by,
                reason=body.reason,
            )
        )
        return [g.to_dict() for g in gone]

    return router
