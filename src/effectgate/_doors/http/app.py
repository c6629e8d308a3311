"""The HTTP door (FastAPI): the agent API, the operator API, health, metrics and MCP over HTTP.

``create_app(service)`` returns an ASGI app; ``effectgate serve`` runs it under uvicorn.

Agent API (agent bearer token; one tenant scope per token):

* ``POST /v1/actions/{action}`` with ``Idempotency-Key: <operation id>``: body is the intent,
  read as raw bytes under a size cap and parsed by the core's strict parser. ``201`` with the
  operation; the same key again returns the stored operation with ``200`` and
  ``Idempotent-Replayed: true``; ``400`` without a key or with a malformed body; ``409`` while
  the first request with that key is in flight; ``422`` when the key was used with another
  payload.
* ``POST /v1/actions/{action}/evaluate``: what that POST would do now, read-only: the
  fingerprint, the decision and its reasons, and an evaluation token; a later POST may send the
  token in ``Effectgate-Evaluation-Token`` to be refused if anything it covers changed.
* ``GET /v1/operations/{operation_id}``: the operation, in the caller's scope only.
* ``GET /v1/operations/{operation_id}/receipt``: its signed receipt once it is final
  (:mod:`effectgate._doors.http._receipts`).

Before any route sees a body, :class:`~effectgate._doors.http._body.BodyGate` authenticates
the caller and checks the body's type and size (401, 415, 413). No redirects: a path with a
trailing slash is 404 like any unknown path, so no URL is ever built from the client's
``Host``. An unknown action is 404 ``unknown_action_class`` naming the actions that exist.

Errors are ``application/problem+json`` (RFC 9457) with a stable ``code``. The Gate is
synchronous, so it runs in the threadpool; the event loop never waits on the ledger or a venue.
"""

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from effectgate import __version__
from effectgate._core.principals import Capability
from effectgate._doors._shared.models import OperationOut, Problem, operation_out, problem_for
from effectgate._doors._shared.offload import offload
from effectgate._doors._shared.run_wire import RUN_CALL_HEADER, parse_run_call
from effectgate._doors._shared.tracing import TraceContext
from effectgate._doors.http._admin import admin_router
from effectgate._doors.http._body import PRINCIPAL_KEY, PROBLEM_JSON, BodyGate, refuse_deep
from effectgate._doors.http._budgets import harness_budgets_router
from effectgate._doors.http._channels import CHANNELS_PREFIX, channels_router
from effectgate._doors.http._continuations import continuations_router
from effectgate._doors.http._evaluate import EVALUATION_HEADER, add_evaluate_route
from effectgate._doors.http._grants import grants_router
from effectgate._doors.http._policies import policies_router
from effectgate._doors.http._quarantine import quarantine_router
from effectgate._doors.http._receipts import receipts_router
from effectgate._doors.http._retention import retention_router
from effectgate._doors.http._runs import harness_runs_router
from effectgate._service import Principal, Service
from effectgate._service._metrics import CONTENT_TYPE
from effectgate.errors import (
    BadRequest,
    EffectgateError,
    IdempotencyKeyMissing,
    InternalError,
    InvalidIdempotencyKey,
    MethodNotAllowed,
    RouteNotFound,
    StoreError,
    UnknownActionClass,
)
from effectgate.store.base import OPERATION_ID_PATTERN, Operation

__all__ = ["PROBLEM_JSON", "create_app"]

log = logging.getLogger("effectgate.http")

_KEY_PATTERN = f'^"?{OPERATION_ID_PATTERN.pattern}"?$'
_bearer = HTTPBearer(
    auto_error=False, description="A principal's token (agent, harness, operator or approver)"
)


async def _authorize(
    service: Service, request: Request, capability: Capability | None
) -> Principal:
    """The request's principal, holding ``capability`` (None: any), charged to its rate limit.

    BodyGate authenticated a request with a body already, in this request; any other is looked
    up here. The lookup reads the ledger: off the event loop."""
    found = request.scope.get(PRINCIPAL_KEY)
    who = (
        found
        if isinstance(found, Principal)
        else await offload(service.tokens.from_header, request.headers.get("authorization"))
    )
    if capability is not None:
        who.require(capability)
    service.limiter.check(who)
    return who


def _served_by(handler: Callable[[Request], Coroutine[Any, Any, Response]]) -> type[APIRoute]:
    """A route FastAPI documents from its endpoint's signature but that ``handler`` serves.

    FastAPI's per-request dependency solving and parameter validation cost more event-loop CPU
    than the rest of the action route together (py-spy, docs/benchmarks.md); the one hot route
    reads its principal and two headers itself and calls the same endpoint function."""

    class HotRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            return handler

    return HotRoute


def problem_response(exc: EffectgateError) -> JSONResponse:
    status, body, headers = problem_for(exc)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


_PROBLEM_CONTENT = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": text, "content": _PROBLEM_CONTENT}
    for status, text in (
        (400, "Missing key or malformed body"),
        (401, "No valid token"),
        (403, "Wrong role for this endpoint"),
        (404, "Not found"),
        (409, "Same key still in flight"),
        (422, "Key reused with a different payload"),
        (429, "Rate limited"),
    )
}
#: BodyGate's answers, declared by _openapi on every operation that takes a body.
_BODY_ERRORS = {
    "413": "Body larger than max_body_bytes",
    "415": "Body is not Content-Type: application/json",
}


def create_app(
    service: Service,
    *,
    mcp_http: bool | None = None,
    standing_reconciler: bool = False,
    mcp_mount: Any = None,
    operator_mcp: bool | None = None,
) -> FastAPI:
    """The ASGI app for ``service``. ``mcp_http`` defaults to the config's ``mcp_http``;
    ``mcp_mount``: another MCP endpoint at ``/mcp`` (the gateway's); ``operator_mcp``: the
    operator tool set at ``/mcp/operator`` (default: the config's ``operator_mcp_http``)."""
    settings = service.config.service
    want_mcp = settings.mcp_http if mcp_http is None else mcp_http
    mount = mcp_mount
    if mount is None and want_mcp:
        from effectgate._doors.mcp.server import McpHttpMount

        mount = McpHttpMount(service)

    # The operator tool set (approvals) on its own endpoint and credential (docs/authority.md).
    operator_mount: Any = None
    if settings.operator_mcp_http if operator_mcp is None else operator_mcp:
        from effectgate._doors.mcp.operator import operator_mcp_mount

        operator_mount = operator_mcp_mount(service)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if mount is not None:
                await stack.enter_async_context(mount.running())
            if operator_mount is not None:
                await stack.enter_async_context(operator_mount.running())
            if standing_reconciler:
                service.start_reconciler()
                service.start_dispatcher()  # released rows: beside the reconciler
            yield

    # No redirect_slashes: its 307 builds the Location from the client's Host header.
    app = FastAPI(
        title="effectgate",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,
        description="The boundary between an agent's proposed action and its effect.",
    )
    _install_errors(app)
    app.add_middleware(TraceContext)
    app.add_middleware(
        BodyGate,
        tokens=service.tokens,
        cap=settings.max_body_bytes,
        skip=(("/mcp",) if mount is not None else ())
        + (("/mcp/operator",) if operator_mount is not None else ()),
        # Their own gates: the console (session cookie, CSRF, capped forms); signed callbacks.
        skip_prefixes=("/console/", CHANNELS_PREFIX),
    )

    def principal(capability: Capability | None) -> Callable[..., Coroutine[Any, Any, Principal]]:
        async def dependency(
            request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
        ) -> Principal:
            return await _authorize(service, request, capability)

        return dependency

    agent = Annotated[Principal, Depends(principal(Capability.PROPOSE))]
    operator = Annotated[Principal, Depends(principal(Capability.OPERATE))]
    approver = Annotated[Principal, Depends(principal(Capability.APPROVE))]
    harness = Annotated[Principal, Depends(principal(Capability.RECORD_RUNS))]
    anyone = Annotated[Principal, Depends(principal(None))]

    for name in service.config.registry.names():
        _add_action_route(app, service, name, agent)
        add_evaluate_route(app, service, name, agent, _ERRORS)

    # After the registered actions, so only a name that is none of them lands here.
    @app.post("/v1/actions/{action}", include_in_schema=False)
    async def unknown_action(action: str, who: agent) -> JSONResponse:
        names = sorted(service.config.registry.names())
        exc = UnknownActionClass(
            f"no action class named {action[:64]!r}; this service "
            f"accepts: {', '.join(names)} (GET /v1/actions for schemas)"
        )
        status, body, headers = problem_for(exc)
        body["actions"] = names
        return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)

    @app.post("/v1/actions/{action}/evaluate", include_in_schema=False)
    async def unknown_evaluate(action: str, who: agent) -> JSONResponse:
        return await unknown_action(action, who)

    @app.get(
        "/v1/operations/{operation_id}",
        response_model=OperationOut,
        responses=_ERRORS,
        tags=["agent"],
        summary="Look up an operation in your scope",
    )
    async def get_operation(operation_id: str, who: agent) -> Response:
        op = await run_in_threadpool(service.lookup, who, operation_id)
        return _operation_response(op, 200, service)

    @app.get(
        "/v1/actions",
        tags=["agent"],
        summary="The action classes this service accepts",
        responses=_ERRORS,
    )
    async def list_actions(who: agent) -> dict[str, Any]:
        return {
            "actions": [
                {
                    "name": ac.name,
                    "effect_class": ac.effect_class.value,
                    "tier_floor": ac.tier_floor.value,
                    "schema": ac.json_schema(),
                }
                for ac in service.config.registry
            ]
        }

    @app.get("/healthz", tags=["health"], summary="Liveness")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness: the ledger answers",
        responses={503: _ERRORS[429] | {"description": "Ledger unavailable"}},
    )
    async def ready() -> JSONResponse:
        try:
            await run_in_threadpool(service.store.get, "default", "readiness-probe")
        except Exception as exc:
            log.warning("readiness check failed: %s", type(exc).__name__)
            return problem_response(StoreError("the ledger does not answer"))
        return JSONResponse({"status": "ready"})

    # Operator credential: the figures describe every tenant's ledger, and a scrape costs
    # queries; neither belongs to anonymous callers.
    @app.get(
        "/metrics",
        tags=["operator"],
        summary="Prometheus metrics (operator token)",
        response_class=Response,
        responses=_ERRORS,
    )
    async def metrics(who: operator) -> Response:
        body = await run_in_threadpool(service.metrics.render)
        return Response(body, media_type=CONTENT_TYPE)

    app.include_router(receipts_router(service, agent, _ERRORS), prefix="/v1", tags=["agent"])
    app.include_router(
        admin_router(service, operator, approver, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    app.include_router(
        quarantine_router(service, operator, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    app.include_router(
        continuations_router(service, operator, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    app.include_router(
        harness_runs_router(service, harness, _ERRORS), prefix="/v1", tags=["harness"]
    )
    app.include_router(
        harness_budgets_router(service, harness, _ERRORS), prefix="/v1", tags=["harness"]
    )
    app.include_router(
        grants_router(service, operator, anyone, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    app.include_router(
        policies_router(service, operator, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    app.include_router(
        retention_router(service, operator, _ERRORS), prefix="/v1/admin", tags=["operator"]
    )
    if service.config.channels:
        app.include_router(channels_router(service, _ERRORS), tags=["channels"])
    # The MCP endpoints go first: routes are matched in order, and at the end of the list
    # every MCP request was matched against each API route first (about 180 us of CPU each).
    if operator_mount is not None:
        app.router.routes.insert(
            0, Route("/mcp/operator", endpoint=operator_mount, include_in_schema=False)
        )
    if mount is not None:
        app.router.routes.insert(0, Route("/mcp", endpoint=mount, include_in_schema=False))
    from effectgate._doors.console import mount_console  # the operator console (/console)

    mount_console(app, service)
    app.openapi = lambda: _openapi(app, service)  # type: ignore[method-assign]
    return app


def _add_action_route(app: FastAPI, service: Service, name: str, agent: Any) -> None:
    """``POST /v1/actions/NAME``: documented from ``propose``, served by ``handle``."""
    settings = service.config.service

    async def propose(
        request: Request,
        who: agent,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                description="The operation id: minted once per deliberate action, "
                "sent again unchanged on every retry. For a class with operation_ids = "
                '"minted", a request key: effectgate mints the operation id and returns it',
                json_schema_extra={"pattern": _KEY_PATTERN},
            ),
        ] = None,
        run_call_header: Annotated[
            str | None,
            Header(
                alias=RUN_CALL_HEADER,
                description="RUN/SLOT/CALL: the harness's run call proposing it (docs/runs.md)",
            ),
        ] = None,
        evaluation_token: Annotated[
            str | None,
            Header(
                alias=EVALUATION_HEADER,
                description="A token from POST /v1/actions/NAME/evaluate: refused (409 "
                "evaluation_token_stale, 400 evaluation_token_invalid) unless what it covers "
                "still holds",
            ),
        ] = None,
    ) -> Response:
        if len(request.headers.getlist("idempotency-key")) > 1:
            # One request is one operation: picking one of several ids would be a guess.
            raise InvalidIdempotencyKey(
                "send exactly one Idempotency-Key header: one request is one operation"
            )
        if idempotency_key is None:
            raise IdempotencyKeyMissing(
                "the Idempotency-Key header is required: send the operation id"
            )
        key = idempotency_key.strip()
        if len(key) >= 2 and key[0] == key[-1] == '"':  # the draft's sf-string form
            key = key[1:-1]
        if not OPERATION_ID_PATTERN.fullmatch(key):
            raise InvalidIdempotencyKey(
                f"Idempotency-Key must match {OPERATION_ID_PATTERN.pattern}"
            )
        if len(request.headers.getlist(RUN_CALL_HEADER)) > 1:
            raise BadRequest(f"send at most one {RUN_CALL_HEADER} header")
        run_call = parse_run_call(run_call_header)
        raw = await request.body()  # authenticated, JSON-typed and capped by BodyGate
        refuse_deep(raw, settings.max_depth)
        if len(request.headers.getlist(EVALUATION_HEADER)) > 1:
            raise BadRequest(f"send at most one {EVALUATION_HEADER} header")
        op = await offload(service.propose, who, name, key, raw, run_call, evaluation_token)
        return _operation_response(op, 200 if op.replayed else 201, service)

    async def handle(request: Request) -> Response:
        # What FastAPI would solve from propose's signature, read directly (_served_by).
        headers = request.headers
        return await propose(
            request,
            await _authorize(service, request, Capability.PROPOSE),
            headers.get("idempotency-key"),
            headers.get(RUN_CALL_HEADER),
            headers.get(EVALUATION_HEADER),
        )

    app.router.add_api_route(
        f"/v1/actions/{name}",
        propose,
        route_class_override=_served_by(handle),
        methods=["POST"],
        response_model=OperationOut,
        status_code=201,
        tags=["agent"],
        name=f"propose_{name}",
        summary=f"Propose a {name} action",
        responses={
            200: {
                "model": OperationOut,
                "description": "Replay: the stored operation (header Idempotent-Replayed: true)",
            },
            **_ERRORS,
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/intent_{name}"}}
                },
            }
        },
    )


def _operation_response(op: Operation, status: int, service: Service) -> Response:
    headers = {"Location": f"/v1/operations/{op.operation_id}"}
    if op.replayed:
        headers["Idempotent-Replayed"] = "true"
    # Serialised by pydantic-core straight to JSON bytes: no dict of the model, no json.dumps.
    return Response(
        operation_out(op, service.config.registry).model_dump_json(),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(EffectgateError)
    async def on_error(_: Request, exc: EffectgateError) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return problem_response(BadRequest(f"{where}: {first.get('msg', 'invalid request')}"))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Routing raises only these; anything else it might raise is the client's request.
        kind = {404: RouteNotFound, 405: MethodNotAllowed}.get(exc.status_code, BadRequest)
        return problem_response(kind(str(exc.detail)))

    @app.exception_handler(Exception)
    async def on_crash(_: Request, exc: Exception) -> JSONResponse:
        # Type only: a message could carry request details. Nothing about the request leaks.
        log.error("unhandled %s in a request", type(exc).__name__)
        return problem_response(InternalError("internal error"))


def _openapi(app: FastAPI, service: Service) -> dict[str, Any]:
    """FastAPI's document plus one intent schema per action class (refs moved to components)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for ac in service.config.registry:
        schema = ac.json_schema()
        defs = schema.pop("$defs", {})
        text = json.dumps(schema).replace('"#/$defs/', '"#/components/schemas/')
        schemas[f"intent_{ac.name}"] = json.loads(text)
        for def_name, sub in defs.items():
            schemas.setdefault(
                def_name, json.loads(json.dumps(sub).replace('"#/$defs/', '"#/components/schemas/'))
            )
    # The handler answers a missing key with its own 400 (the draft's rule), so FastAPI sees the
    # header as optional; the published contract says what clients must send.
    for path in doc.get("paths", {}).values():
        for param in path.get("post", {}).get("parameters", []):
            if param.get("name") == "Idempotency-Key":
                param["required"] = True
        for operation in path.values():
            if "requestBody" in operation:
                for status, text in _BODY_ERRORS.items():
                    operation["responses"].setdefault(
                        status, {"description": text, "content": _PROBLEM_CONTENT}
                    )
    app.openapi_schema = doc
    return doc
