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

from effectgate._doors._shared.receipts import ReceiptIssuer
from effectgate._service import Service

__all__ = ["receipts_router"]


def receipts_router(service: Service, agent: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    issuer = ReceiptIssuer(service)  # the key is read here, at start

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
        receipts = await run_in_threadpool(issuer.issue, who, operation_id, history)
        body: Any = {"receipts": receipts} if history else receipts[-1]
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return router
