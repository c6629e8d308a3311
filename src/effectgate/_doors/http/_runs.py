"""Run calls over HTTP: the harness's routes under ``/v1/runs`` and the operators' under
``/v1/admin/runs`` (docs/runs.md).

* Harness tokens (role ``harness``) record calls and their returns in their own scope: ``POST
  /v1/runs/{run_id}/calls`` (201 new, 200 an identical replay, 409 ``run_call_conflict`` or
  ``run_sealed``), ``PUT /v1/runs/{run_id}/calls/{slot}/completion``, and read them back. An
  agent token cannot: the model never records a call.
* Operators list runs, seal one (the operator is the seal's actor; 30 s deadline), take and
  fetch recovery snapshots. A scoped operator sees its scope only.
* An action proposed over HTTP is bound to a run call by the ``Effectgate-Run-Call:
  RUN/SLOT/CALL`` header; over MCP by the request ``_meta`` key ``io.effectgate/run_call``
  (both parsed by :mod:`effectgate._doors._shared.run_wire`).
"""

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.run_snapshot import MAX_BYTES
from effectgate._core.runs import RunCall, RunCallRef, RunCompletion, RunSeal
from effectgate._doors._shared.controls import visible_scope
from effectgate._execute.runs import RunSealer, SealRequest
from effectgate._service import Service
from effectgate.errors import InvalidRunCall, RunNotFound

__all__ = ["harness_runs_router", "operator_runs_router"]

T = TypeVar("T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CallIn(_Strict):
    slot: str = Field(max_length=128)
    call_id: str = Field(max_length=128)
    kind: str = Field(max_length=16, description="model or tool")
    request_digest: str = Field(max_length=64, description="SHA-256 of the prompt or arguments")
    request_bytes: int
    provider: str | None = Field(None, max_length=128)
    model: str | None = Field(None, max_length=128)
    tool: str | None = Field(None, max_length=128)
    deadline: float | None = Field(None, description="No effect is admitted after it")
    agent: str | None = Field(None, max_length=128)
    parent_run_id: str | None = Field(None, max_length=128)


class CompletionIn(_Strict):
    call_id: str = Field(max_length=128)
    result_digest: str = Field(max_length=64)
    result_bytes: int
    reported_tokens: int | None = None


class SealIn(_Strict):
    reason: str = Field(min_length=1, max_length=1000, description="Why (audited)")


def _call_response(record: Any, new: bool) -> JSONResponse:
    return JSONResponse(record.to_dict(), status_code=201 if new else 200)


def harness_runs_router(service: Service, harness: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    @router.post("/runs/{run_id}/calls", status_code=201, summary="Record a call before making it")
    async def record(who: harness, run_id: str, body: CallIn) -> JSONResponse:
        call = RunCall(run_id=run_id, **body.model_dump())
        record, new = await run_in_threadpool(
            lambda: store.record_run_call(who.scope, call, now=service.clock(), actor=who.name)
        )
        return _call_response(record, new)

    @router.put(
        "/runs/{run_id}/calls/{slot}/completion",
        status_code=201,
        summary="Record a call's local return (immutable)",
    )
    async def complete(who: harness, run_id: str, slot: str, body: CompletionIn) -> JSONResponse:
        ref = RunCallRef(run_id, slot, body.call_id)
        done = RunCompletion(body.result_digest, body.result_bytes, body.reported_tokens)
        record, new = await run_in_threadpool(
            lambda: store.complete_run_call(
                who.scope, ref, done, now=service.clock(), actor=who.name
            )
        )
        return _call_response(record, new)

    @router.get("/runs/{run_id}/calls", summary="A page of the run's calls, in slot order")
    async def calls(
        who: harness,
        run_id: str,
        after: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        page = await run_in_threadpool(
            lambda: store.list_run_calls(who.scope, run_id, after=after, limit=limit)
        )
        return {
            "calls": [r.to_dict() for r in page],
            "next_after": page[-1].call.slot if len(page) == limit else None,
        }

    return router


def operator_runs_router(
    service: Service, operator: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    @router.get("/runs", summary="Runs, newest first (open, sealed or both)")
    async def runs(
        who: operator,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        sealed: bool | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        found = await call(store.list_runs, visible_scope(who, scope), sealed=sealed, limit=limit)
        return [r.to_dict() for r in found]

    @router.get("/runs/{scope}/{run_id}", summary="One run: its counts, seal and a page of calls")
    async def show(
        who: operator,
        scope: str,
        run_id: str,
        after: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        visible_scope(who, scope)
        run = await call(store.get_run, scope, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in scope {scope!r}")
        page = await call(store.list_run_calls, scope, run_id, after=after, limit=limit)
        snapshots = await call(store.list_run_snapshots, scope, run_id)
        return {
            **run.to_dict(),
            "page": [r.to_dict() for r in page],
            "next_after": page[-1].call.slot if len(page) == limit else None,
            "snapshots": [
                {"digest": d, "entries": n, "size_bytes": b, "created_at": at, "created_by": by}
                for d, n, b, at, by in snapshots
            ],
        }

    @router.post("/runs/{scope}/{run_id}/seal", summary="Seal a run for good (no reopen)")
    async def seal(who: operator, scope: str, run_id: str, body: SealIn) -> dict[str, Any]:
        visible_scope(who, scope)

        def authorize(request: SealRequest) -> None:
            # The operator's credential, checked again under the sealer's deadline.
            visible_scope(who, request.scope)

        sealer = RunSealer(store, authorize=authorize, clock=service.clock)
        done: RunSeal = await call(
            sealer.seal, run_id, actor=who.name, reason=body.reason, scope=scope
        )
        return done.to_dict()

    @router.post(
        "/runs/{scope}/{run_id}/snapshot",
        summary="Take the sealed run's recovery snapshot (the canonical document)",
        response_class=Response,
    )
    async def snapshot(who: operator, scope: str, run_id: str) -> Response:
        visible_scope(who, scope)
        document, digest, new = await call(
            store.snapshot_run, scope, run_id, now=service.clock(), actor=who.name
        )
        return Response(
            document,
            status_code=201 if new else 200,
            media_type="application/json",
            headers={"Effectgate-Snapshot-Digest": digest},
        )

    @router.get(
        "/runs/{scope}/{run_id}/snapshots/{digest}",
        summary="A kept snapshot, byte for byte",
        response_class=Response,
    )
    async def kept(who: operator, scope: str, run_id: str, digest: str) -> Response:
        visible_scope(who, scope)
        document = await call(store.get_run_snapshot, scope, run_id, digest[:64])
        if document is None:
            raise RunNotFound(f"no snapshot {digest[:64]!r} of run {run_id!r}")
        if len(document) > MAX_BYTES:  # unreachable: the store keeps bounded documents
            raise InvalidRunCall("the kept snapshot is over the bound")
        return Response(document, media_type="application/json")

    return router
