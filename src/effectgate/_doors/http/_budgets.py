"""Budgets over HTTP (docs/budgets.md): the harness's routes under ``/v1/runs/{run_id}/budget``
and ``/v1/plans``, the operators' reads under ``/v1/admin/plans``.

* Harness tokens (role ``harness``) fix a run's budget, begin model steps and charge tokens,
  open a plan account, reserve, check and settle, in their own scope. A replay answers 200, a
  new record 201; ``budget_exceeded`` (409) names the dimension.
* Operators read a plan account as a tree with used, reserved and remaining per dimension,
  and list accounts. A scoped operator sees its scope only.
"""

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from effectgate._core.budgets import RunBudget
from effectgate._doors._shared.budget_wire import (
    PlanIn,
    ReservationIn,
    RunBudgetIn,
    SettlementIn,
    StepIn,
    TokensIn,
)
from effectgate._doors._shared.controls import visible_scope
from effectgate._service import Service
from effectgate.errors import ReservationNotFound

__all__ = ["harness_budgets_router", "operator_budgets_router"]

T = TypeVar("T")


def _answer(body: dict[str, Any], new: bool) -> JSONResponse:
    return JSONResponse(body, status_code=201 if new else 200)


def harness_budgets_router(
    service: Service, harness: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    @router.put("/runs/{run_id}/budget", status_code=201, summary="Fix a run's budget (once)")
    async def set_budget(who: harness, run_id: str, body: RunBudgetIn) -> JSONResponse:
        budget = RunBudget(**body.model_dump())
        state, new = await call(
            store.set_run_budget, who.scope, run_id, budget, now=service.clock(), actor=who.name
        )
        return _answer(state.to_dict(), new)

    @router.get("/runs/{run_id}/budget", summary="A run's limits and cumulative usage")
    async def get_budget(who: harness, run_id: str) -> dict[str, Any]:
        state = await call(store.run_budget, who.scope, run_id)
        if state is None:
            raise ReservationNotFound(f"run {run_id!r} has no budget")
        return state.to_dict()

    @router.post("/runs/{run_id}/budget/steps", summary="Begin a model step (or be refused)")
    async def step(who: harness, run_id: str, body: StepIn) -> dict[str, Any]:
        state, cap = await call(
            store.begin_run_step,
            who.scope,
            run_id,
            now=service.clock(),
            configured_output=body.configured_output,
        )
        return {**state.to_dict(), "output_limit": cap}

    @router.post("/runs/{run_id}/budget/tokens", summary="Charge one model call's tokens")
    async def tokens(who: harness, run_id: str, body: TokensIn) -> dict[str, Any]:
        state = await call(
            store.record_run_tokens, who.scope, run_id, body.reported_tokens, now=service.clock()
        )
        return state.to_dict()

    @router.post("/plans", status_code=201, summary="Open a plan's shared account (once)")
    async def open_plan(who: harness, body: PlanIn) -> JSONResponse:
        policy = body.value()
        got, new = await call(
            store.open_plan_account, who.scope, policy, now=service.clock(), actor=who.name
        )
        return _answer(got.to_dict(), new)

    @router.post("/plans/{plan_id}/reservations", status_code=201, summary="Reserve capacity")
    async def reserve(who: harness, plan_id: str, body: ReservationIn) -> JSONResponse:
        request = body.value(plan_id)
        got, new = await call(
            store.reserve, who.scope, request, now=service.clock(), actor=who.name
        )
        return _answer(got.to_dict(), new)

    @router.post(
        "/plans/{plan_id}/reservations/{reservation_id}/check",
        summary="Check an open reservation before further work (grants nothing)",
    )
    async def check(who: harness, plan_id: str, reservation_id: str) -> dict[str, Any]:
        await call(store.check_reservation, who.scope, plan_id, reservation_id, now=service.clock())
        return {"plan_id": plan_id, "reservation_id": reservation_id, "open": True}

    @router.post("/plans/{plan_id}/settlements", status_code=201, summary="Settle a reservation")
    async def settle(who: harness, plan_id: str, body: SettlementIn) -> JSONResponse:
        s = body.value()
        got, new = await call(
            store.settle, who.scope, plan_id, s, now=service.clock(), actor=who.name
        )
        return _answer(got.to_dict(), new)

    @router.post(
        "/plans/{plan_id}/reservations/{reservation_id}/runs/{run_id}",
        status_code=201,
        summary="Admit a run under an open leaf: its budget is the leaf's allocation",
    )
    async def admit_run(
        who: harness, plan_id: str, reservation_id: str, run_id: str
    ) -> JSONResponse:
        link, new = await call(
            store.admit_run,
            who.scope,
            run_id,
            plan_id,
            reservation_id,
            now=service.clock(),
            actor=who.name,
        )
        return _answer(link.to_dict(), new)

    @router.post(
        "/runs/{run_id}/settlement",
        status_code=201,
        summary="Settle the run's leaf from its stored usage and dispatched value",
    )
    async def settle_run(who: harness, run_id: str) -> JSONResponse:
        got, new = await call(
            store.settle_run, who.scope, run_id, now=service.clock(), actor=who.name
        )
        return _answer(got.to_dict(), new)

    @router.get("/plans/{plan_id}", summary="The plan's account as a tree")
    async def account(who: harness, plan_id: str) -> dict[str, Any]:
        snap = await call(store.plan_account, who.scope, plan_id)
        return snap.to_dict()

    return router


def operator_budgets_router(
    service: Service, operator: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    @router.get("/plans", summary="Plan accounts, newest first")
    async def plans(
        who: operator,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, str]]:
        found = await run_in_threadpool(
            lambda: store.list_plan_accounts(visible_scope(who, scope), limit=limit)
        )
        return [{"scope": s, "plan_id": p} for s, p in found]

    @router.get("/plans/{scope}/{plan_id}", summary="A plan's account as a tree")
    async def show(who: operator, scope: str, plan_id: str) -> dict[str, Any]:
        visible_scope(who, scope)
        snap = await run_in_threadpool(lambda: store.plan_account(scope, plan_id))
        return snap.to_dict()

    return router
