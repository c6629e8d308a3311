"""Kill switch rehearsals over the operator API (issue 39 item 12), the HTTP face of
``effectgate kill rehearse`` / ``kill rehearsals``:

* ``POST /v1/admin/kill/{action}/rehearsals``: record one, the blast-radius dry run or, with
  ``"drill": true``, the switch really flipped on, seen held and flipped off (``409`` while
  the switch is on: a drill would lift a real halt). A switch acts on every tenant, and the dry
  run counts every tenant's rows, so this needs an operator of scope ``"*"``.
* ``GET /v1/admin/kill/rehearsals[?action=]``: the rehearsals recorded, newest first.
* ``GET /v1/admin/kill/rehearsals/status[?action=]``: each class against its
  ``rehearsal_period``: the last rehearsal, when the next is due, whether it is overdue.

Reading needs any operator token (a class's control state); agents and approvers get 403.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from effectgate._doors._shared.control_models import ReasonIn
from effectgate._service import Service
from effectgate.errors import PermissionDenied

__all__ = ["rehearsals_router"]


class RehearseIn(ReasonIn):
    drill: bool = Field(
        False, description="Flip the switch on, see it held, flip it off (else: a dry run)"
    )


class RehearsalOut(BaseModel):
    id: int
    action: str
    kind: str = Field(description="blast_radius (a dry run) or drill")
    operator: str
    at: float
    detail: dict[str, Any]


class RehearsalStatusOut(BaseModel):
    action: str
    period: float | None = Field(description="Seconds between rehearsals; null: no schedule")
    last: RehearsalOut | None
    due_at: float | None
    overdue: bool


def rehearsals_router(service: Service, operator: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    op = service.operator

    # Declared before any /kill/{action}/... route could claim the literal segment.
    @router.get(
        "/kill/rehearsals/status",
        response_model=list[RehearsalStatusOut],
        summary="Each class's rehearsal schedule: last rehearsal, next due, overdue",
    )
    async def status(
        who: operator, action: Annotated[str | None, Query(max_length=64)] = None
    ) -> list[dict[str, object]]:
        rows = await run_in_threadpool(op.rehearsal_status, action)
        return [s.to_dict() for s in rows]

    @router.get(
        "/kill/rehearsals",
        response_model=list[RehearsalOut],
        summary="Recorded kill switch rehearsals, newest first",
    )
    async def listed(
        who: operator,
        action: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, object]]:
        rows = await run_in_threadpool(lambda: op.rehearsals(action, limit=limit))
        return [r.to_dict() for r in rows]

    @router.post(
        "/kill/{action}/rehearsals",
        response_model=RehearsalOut,
        summary="Rehearse the class's kill switch and record it (dry run, or a real drill)",
    )
    async def rehearse(
        who: operator, action: str, body: RehearseIn | None = None
    ) -> dict[str, object]:
        if who.scope != "*":
            raise PermissionDenied(
                "a rehearsal reads (and a drill flips) every tenant's switch: needs an "
                "operator of scope '*'"
            )
        drill, reason = (body.drill, body.reason) if body else (False, None)
        out = await run_in_threadpool(
            lambda: op.rehearse(action, operator=who.name, drill=drill, reason=reason)
        )
        return out.to_dict()

    return router
