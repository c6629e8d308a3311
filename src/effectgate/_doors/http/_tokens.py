"""Principals and their tokens under ``/v1/admin/tokens``: an operator of scope ``"*"`` only.

A token names who may call, in which role and tenant, so minting one from a scoped operator
token could widen that operator's reach; every route here needs ``"*"``. Mirrors ``effectgate
token create|list|revoke``:

* ``GET /tokens[?include_revoked=true]``: the principals (a token's prefix, never the token)
* ``POST /tokens`` ``{"name", "role", "scope", "replace"?}``: ``201``, the principal and its
  token, shown this once (``Cache-Control: no-store``)
* ``DELETE /tokens/{name}``: revoke it; every replica refuses the token from its next request
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._doors._shared.controls import _global
from effectgate._service import Service

__all__ = ["tokens_router"]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=128, description="The caller's identity in the audit log")
    role: str = Field(max_length=16, description="agent, harness, operator or approver")
    scope: str = Field(max_length=64, description='The tenant; "*" for an operator of every one')
    replace: bool = Field(
        False, description="Revoke the live principal of this name in the same transaction"
    )


class PrincipalOut(BaseModel):
    name: str
    role: str
    scope: str
    token_prefix: str
    created_at: float
    created_by: str
    revoked_at: float | None
    revoked_by: str | None
    live: bool


class IssuedOut(PrincipalOut):
    token: str = Field(description="The token, shown this once; only its SHA-256 is stored")


def tokens_router(service: Service, operator: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    @router.get(
        "/tokens",
        response_model=list[PrincipalOut],
        summary="Principals and their token prefixes (never a token)",
    )
    async def list_tokens(
        who: operator, include_revoked: Annotated[bool, Query()] = False
    ) -> list[dict[str, object]]:
        _global(who, "managing tokens")
        rows = await run_in_threadpool(store.list_principals, include_revoked=include_revoked)
        return [r.to_dict() for r in rows]

    @router.post(
        "/tokens",
        response_model=IssuedOut,
        status_code=201,
        summary="Create a principal and its token (shown once)",
    )
    async def create_token(who: operator, body: TokenIn) -> JSONResponse:
        _global(who, "managing tokens")
        service.tokens.refuse_config_name(body.name)
        issued = await run_in_threadpool(
            lambda: store.create_principal(
                body.name,
                body.role,
                body.scope,
                created_by=who.name,
                now=service.clock(),
                replace=body.replace,
            )
        )
        return JSONResponse(
            {**issued.record.to_dict(), "token": issued.token},
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )

    @router.delete(
        "/tokens/{name}",
        response_model=PrincipalOut,
        summary="Revoke a principal's token: refused everywhere from the next request on",
    )
    async def revoke_token(who: operator, name: str) -> dict[str, object]:
        _global(who, "managing tokens")
        record = await run_in_threadpool(
            lambda: store.revoke_principal(name, revoked_by=who.name, now=service.clock())
        )
        return record.to_dict()

    return router
