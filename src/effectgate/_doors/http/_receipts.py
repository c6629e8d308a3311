"""``GET /v1/operations/{operation_id}/receipt``: the signed receipt of a final operation.

The same credential and scope as reading the operation (an agent token; another tenant's
operation is simply not found, 404). ``409 receipt_unavailable`` while the operation is not
final, or when the service holds no receipt key. ``?history=true`` answers every revision,
oldest first (``{"receipts": [...]}``), so a verifier sees which one superseded which
(docs/evidence.md, "Receipts").
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from effectgate._evidence.receipt_signing import signer_from
from effectgate._evidence.signed_receipts import issue_receipts
from effectgate._service import Principal, Service

__all__ = ["receipts_router"]


def receipts_router(service: Service, agent: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    # Read once, at start: a bad key file stops the service here, not at the first request.
    signer = signer_from(service.config.receipt_key_file)

    def issue(who: Principal, operation_id: str, history: bool) -> list[dict[str, Any]]:
        op = service.lookup(who, operation_id)  # the agent's scope and capability, or 404
        return issue_receipts(
            service.store, op.scope, op.operation_id, signer, now=service.clock(), history=history
        )

    @router.get(
        "/operations/{operation_id}/receipt",
        summary="The signed receipt of a final operation in your scope",
        responses={200: {"description": "A signed receipt (or every revision, with history)"}},
    )
    async def get_receipt(
        operation_id: str,
        who: agent,
        history: Annotated[
            bool, Query(description="Every revision, oldest first, not only the current one")
        ] = False,
    ) -> JSONResponse:
        receipts = await run_in_threadpool(issue, who, operation_id, history)
        body: Any = {"receipts": receipts} if history else receipts[-1]
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return router
