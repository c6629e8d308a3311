"""The operator API under ``/v1/admin`` (operator tokens; an approver's reaches the approvals
only; agent tokens get 403).

An operator token's scope limits what it sees: ``"*"`` sees every tenant, a named scope only
its own. Sections:

* ledger: ``GET operations``, ``GET operations/{scope}/{operation_id}`` (with its audit trail)
* reconciliation: ``POST reconcile`` (one pass now), ``GET divergences``
* released rows: ``POST dispatch`` (one pass of the standing dispatcher now)
* controls (kill switches, breakers, approvals, envelope steps, shadow mode, audit, alerts):
  :mod:`effectgate._doors._shared.controls`
* principals and their tokens: :mod:`effectgate._doors.http._tokens`
* runs: list, seal, snapshots: :mod:`effectgate._doors.http._runs`
* kill switch rehearsals: :mod:`effectgate._doors.http._rehearsals`
"""

import time
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from effectgate._core.states import State
from effectgate._doors._shared.controls import controls_router, visible_scope
from effectgate._doors._shared.models import OperationOut, operation_dict
from effectgate._doors.http._budgets import operator_budgets_router
from effectgate._doors.http._rehearsals import rehearsals_router
from effectgate._doors.http._runs import operator_runs_router
from effectgate._doors.http._tokens import tokens_router
from effectgate._execute.record import uncertain_cause
from effectgate._service import Service, report_dict
from effectgate.errors import OperationNotFound, PermissionDenied

__all__ = ["admin_router"]

_TRAIL_LIMIT = 100_000


class DivergenceOut(BaseModel):
    kind: str
    op_key: str
    venue_ids: list[str]
    ledger_state: str | None
    first_seen: float


class ReconcileOut(BaseModel):
    swept: bool
    ledger_rows: int
    venue_records: int
    confirmed: int
    written_off: int
    still_uncertain: int
    quarantined: int
    probe_errors: int
    new_divergences: list[dict[str, Any]]


class DispatchOut(BaseModel):
    leased: int
    sent: int
    shadowed: int
    held: int
    taken: int
    errors: int


class AuditOut(BaseModel):
    seq: int
    at: float
    kind: str
    detail: dict[str, Any]


class OperationDetailOut(OperationOut):
    #: The id of the row's dispatch (None: never dispatched); see docs/adapters.md, "Receipts".
    dispatch_id: str | None = None
    intent: dict[str, Any]
    effect: dict[str, Any]
    audit: list[AuditOut]


def admin_router(
    service: Service, operator: Any, approver: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)

    @router.get(
        "/operations",
        response_model=list[OperationOut],
        summary="List operations (most recently updated first)",
    )
    async def list_operations(
        who: operator,
        state: Annotated[State | None, Query()] = None,
        action: Annotated[str | None, Query(max_length=64)] = None,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        older_than: Annotated[float | None, Query(ge=0, le=1e9)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        visible = visible_scope(who, scope)
        cutoff = time.time() - older_than if older_than is not None else None
        rows = await run_in_threadpool(
            lambda: service.store.list_operations(
                state=state, action=action, scope=visible, older_than=cutoff, limit=limit
            )
        )
        return [operation_dict(r, service.config.registry) for r in rows]

    @router.get(
        "/operations/{scope}/{operation_id}",
        response_model=OperationDetailOut,
        summary="One operation with its intent snapshot and audit trail",
    )
    async def show_operation(who: operator, scope: str, operation_id: str) -> dict[str, Any]:
        visible_scope(who, scope)

        def load() -> dict[str, Any]:
            row = service.store.get(scope, operation_id)
            if row is None:
                raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
            # One indexed range read on (scope, operation_id, seq), not a scan of the log.
            entries = service.store.audit_entries(
                scope=scope, operation_id=operation_id, limit=_TRAIL_LIMIT
            )
            if row.state is State.SUBMITTED:
                row = replace(row, cause=uncertain_cause(entries))
            trail = [
                {"seq": e.seq, "at": e.at, "kind": e.kind, "detail": dict(e.detail)}
                for e in entries
            ]
            return {
                **operation_dict(row, service.config.registry),
                "dispatch_id": row.dispatch_id,
                "intent": dict(row.intent),
                "effect": dict(row.effect),
                "audit": trail,
            }

        return await run_in_threadpool(load)

    @router.post(
        "/reconcile", response_model=ReconcileOut, summary="Run one reconciliation pass now"
    )
    async def reconcile(who: operator) -> dict[str, object]:
        if who.scope != "*":
            raise PermissionDenied("reconciling sweeps every scope: needs an operator of '*'")
        report = await run_in_threadpool(service.reconcile_now)
        return report_dict(report)

    @router.post(
        "/dispatch",
        response_model=DispatchOut,
        summary="Dispatch the rows a control released now (one pass of the standing job)",
    )
    async def dispatch(who: operator) -> dict[str, int]:
        if who.scope != "*":
            raise PermissionDenied("released rows span every scope: needs an operator of '*'")
        report = await run_in_threadpool(service.dispatch_now)
        return report.to_dict()

    @router.get(
        "/divergences",
        response_model=list[DivergenceOut],
        summary="Every divergence recorded, once each",
    )
    async def divergences(
        who: operator, limit: Annotated[int, Query(ge=1, le=10000)] = 1000
    ) -> list[dict[str, Any]]:
        # Filtered by the token's scope in SQL, before the limit applies.
        visible = None if who.scope == "*" else who.scope
        rows = await run_in_threadpool(
            lambda: service.store.list_divergences_in(visible, limit=limit)
        )
        return [
            {
                "kind": d.kind,
                "op_key": d.op_key,
                "venue_ids": list(d.venue_ids),
                "ledger_state": d.ledger_state,
                "first_seen": d.first_seen,
            }
            for d in rows
        ]

    # Before the controls: its literal /kill/rehearsals paths must win over /kill/{action}.
    router.include_router(rehearsals_router(service, operator, errors))
    router.include_router(controls_router(service, operator, approver, errors))
    router.include_router(tokens_router(service, operator, errors))
    router.include_router(operator_runs_router(service, operator, errors))
    router.include_router(operator_budgets_router(service, operator, errors))
    return router
