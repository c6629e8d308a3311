"""Signed approval callbacks in: ``POST /v1/channels/{name}/callback`` (docs/authority.md).

No bearer token: the channel's HMAC signature, timestamp and one-time nonce are the credential
(:func:`effectgate._service._channels.verify`), and the approver is the chat user the signed
body names, mapped by the channel's ``users``. The body is capped here (the route is outside
the bearer body gate).
"""

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from effectgate._service import Service
from effectgate._service._channels import handle_callback
from effectgate.errors import BodyTooLarge, RouteNotFound

__all__ = ["CHANNELS_PREFIX", "channels_router"]

CHANNELS_PREFIX = "/v1/channels/"
_CAP = 16 * 1024


def channels_router(service: Service, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)

    @router.post("/v1/channels/{name}/callback", summary="A signed approval callback")
    async def callback(name: str, request: Request) -> dict[str, object]:
        channel = service.config.channels.get(name)
        if channel is None:
            raise RouteNotFound(f"no channel named {name!r}")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _CAP:
                raise BodyTooLarge(f"a callback body is at most {_CAP} bytes")
        outcome = await run_in_threadpool(
            lambda: handle_callback(
                channel,
                service.store,
                service.operator,
                {k.lower(): v for k, v in request.headers.items()},
                body,
                now=service.clock(),
            )
        )
        return {
            "state": outcome.operation.state.value,
            "approvals": outcome.approvals,
            "required": outcome.required,
        }

    return router
