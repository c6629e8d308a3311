"""Evidence that lasts over HTTP, under ``/v1/admin`` (operator tokens), mirroring
``effectgate audit hold place|list|release``, ``audit anchor [--verify]`` and ``audit prune``
(docs/evidence.md).

Holds are audited by the store (who, why). Anchoring and pruning act on the whole ledger, so
they need an operator token for every scope (``*``), and they use only the anchors of the
service's ``[anchor]`` section: a request never names a file, URL or command to write to or
run. Without ``[anchor]`` they are ``400 invalid_control`` and change nothing.
"""

import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.principals import Principal
from effectgate._doors._shared.controls import visible_scope
from effectgate._service import Service
from effectgate.errors import ConfigError, ControlError, PermissionDenied

__all__ = ["retention_router"]

T = TypeVar("T")
log = logging.getLogger("effectgate.http")


class HoldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(min_length=1, max_length=64, description="The scope held")
    operation_id: str | None = Field(
        None, min_length=1, max_length=255, description="One operation; absent: the whole scope"
    )
    reason: str = Field(min_length=1, max_length=2000, description="Why (audited)")


class ReleaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000, description="Why (audited)")


class PruneIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    before: AwareDatetime = Field(description="Prune only what settled before this (ISO 8601, UTC)")


def _whole_ledger(who: Principal) -> None:
    if who.scope != "*":
        raise PermissionDenied("anchoring and pruning act on every scope: an operator token for * ")


def retention_router(service: Service, operator: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store
    clock = service.operator.clock

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    def anchors() -> tuple[list[Any], bytes | None]:
        cfg = service.config.anchor
        if cfg is None or not cfg.providers():
            raise ControlError("no [anchor] section in the service's config: nothing to anchor to")
        return cfg.providers(), cfg.key()

    @router.get("/holds", summary="Legal holds (active only unless all=true)")
    async def list_holds(
        who: operator, all: Annotated[bool, Query()] = False
    ) -> list[dict[str, object]]:
        holds = await call(store.list_holds, active_only=not all)
        mine = visible_scope(who, None)
        return [h.to_dict() for h in holds if mine is None or h.scope == mine]

    @router.post("/holds", summary="Place a legal hold: no prune crosses it (audited)")
    async def place_hold(who: operator, body: HoldIn) -> dict[str, object]:
        visible_scope(who, body.scope)
        hold = await call(
            store.place_hold,
            body.scope,
            body.operation_id,
            by=who.name,
            reason=body.reason,
            now=clock(),
        )
        return hold.to_dict()

    @router.post("/holds/{hold_id}/release", summary="Release a legal hold (audited)")
    async def release_hold(who: operator, hold_id: str, body: ReleaseIn) -> dict[str, object]:
        active = {h.hold_id: h for h in await call(store.list_holds)}
        if hold_id in active:
            visible_scope(who, active[hold_id].scope)
        hold = await call(store.release_hold, hold_id, by=who.name, reason=body.reason, now=clock())
        return hold.to_dict()

    @router.post("/anchor", summary="Checkpoint every lane's head to the configured anchors")
    async def anchor_now(who: operator) -> dict[str, Any]:
        from effectgate._evidence.anchor import anchor_heads

        _whole_ledger(who)
        providers, key = anchors()
        checkpoint, where = await call(
            anchor_heads, store, providers, key=key, clock=clock, by=who.name
        )
        log.info("audit heads anchored by %s: %s", who.name, checkpoint.digest)
        return {**checkpoint.to_dict(), "anchored_at": where}

    @router.get("/anchor/verify", summary="Verify the chain against the last anchors")
    async def anchor_verify(who: operator) -> dict[str, Any]:
        from effectgate._evidence.anchor import verify_against_anchors

        _whole_ledger(who)
        providers, key = anchors()
        result, found = await call(verify_against_anchors, store, providers, key=key)
        return {
            **result.to_dict(),
            "checkpoints": [c.to_dict() for c in found],
            "intact": result.ok and bool(found),
        }

    @router.post("/prune", summary="Anchor, then prune what may go (docs/evidence.md)")
    async def prune_now(who: operator, body: PruneIn) -> dict[str, Any]:
        from effectgate._execute.retention import prune

        _whole_ledger(who)
        providers, key = anchors()
        try:
            report, after = await call(
                prune,
                store,
                service.config.registry,
                providers,
                before=body.before.timestamp(),
                by=who.name,
                key=key,
                clock=clock,
            )
        except ConfigError as exc:
            raise ControlError(exc.message) from None
        return {**report.to_dict(), "verify": after.to_dict()}

    return router
