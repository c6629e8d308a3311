"""``POST /v1/actions/{action}/evaluate``: what proposing a body would do now, read-only.

The body is the intent, screened and capped by :class:`~effectgate._doors.http._body.BodyGate`
and parsed by the core's strict parser like a submit's; the answer is
:meth:`effectgate.Evaluation.to_dict`, with the evaluation token a later submit presents in
:data:`EVALUATION_HEADER` (docs/service.md, "Evaluate without writing").
"""

from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse

from effectgate._doors._shared.offload import offload
from effectgate._doors._shared.run_wire import RUN_CALL_HEADER, parse_run_call
from effectgate._doors.http._body import refuse_deep
from effectgate._service import Service
from effectgate.errors import InvalidIdempotencyKey
from effectgate.store.base import OPERATION_ID_PATTERN

__all__ = ["EVALUATION_HEADER", "add_evaluate_route"]

#: The header a submit presents an evaluation token in (docs/service.md).
EVALUATION_HEADER = "Effectgate-Evaluation-Token"
_KEY_PATTERN = f'^"?{OPERATION_ID_PATTERN.pattern}"?$'


def add_evaluate_route(
    app: FastAPI, service: Service, name: str, agent: Any, errors: dict[int | str, dict[str, Any]]
) -> None:
    """``POST /v1/actions/NAME/evaluate``: what proposing the body would do now, read-only."""
    settings = service.config.service

    async def evaluate(
        request: Request,
        who: agent,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                description="Optional: the operation id the submit will use",
                json_schema_extra={"pattern": _KEY_PATTERN},
            ),
        ] = None,
        run_call_header: Annotated[
            str | None,
            Header(alias=RUN_CALL_HEADER, description="RUN/SLOT/CALL: the run call it would be in"),
        ] = None,
    ) -> JSONResponse:
        key = None if idempotency_key is None else idempotency_key.strip().strip('"')
        if key is not None and not OPERATION_ID_PATTERN.fullmatch(key):
            raise InvalidIdempotencyKey(
                f"Idempotency-Key must match {OPERATION_ID_PATTERN.pattern}"
            )
        raw = await request.body()
        refuse_deep(raw, settings.max_depth)
        run_call = parse_run_call(run_call_header)
        result = await offload(service.evaluate, who, name, raw, key, run_call)
        return JSONResponse(result.to_dict(), headers={"Cache-Control": "no-store"})

    app.router.add_api_route(
        f"/v1/actions/{name}/evaluate",
        evaluate,
        methods=["POST"],
        tags=["agent"],
        name=f"evaluate_{name}",
        summary=f"Evaluate a {name} action without writing (decision, reasons, token)",
        responses=errors,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/intent_{name}"}}
                },
            }
        },
    )
