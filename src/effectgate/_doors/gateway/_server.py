"""The gateway: an MCP server in front of unmodified upstream MCP servers.

:class:`Gateway` connects to every upstream, binds the config to their listings (schema pins
checked), and runs a :class:`~effectgate._service.Service` whose adapters are the upstream
calls. :func:`build_gateway_server` is the MCP server the agent talks to:

* each governed tool goes through the whole path (strict parse, policy and tiers, approvals,
  kill switch and breakers, journal, then the upstream call; its answer is the receipt), and
  its result is the operation with its ``outcome`` text;
* each ``read_only`` tool is passed through as the upstream lists and answers it;
* ``get_operation`` looks an operation up; every other upstream tool is hidden;
* a held tool (its schema drifted) is refused with ``upstream_schema_held``.

The operation id comes from ``[gateway] operation_id``: ``argument`` (the model sends
``operation_id``, as with ``effectgate mcp``; a host's ``_meta`` pin must agree), ``meta`` (only
the host's pin in ``_meta["io.effectgate/operation_id"]``: the safe way), or ``minted`` (the
gateway mints one per request: a retry is a new action; each tool must then have a breaker
with ``max_repeats``, which watches one payload arriving under many ids).
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from effectgate import __version__
from effectgate._doors._shared.mcp_screen import REFUSED_META, ScreenedLines
from effectgate._doors._shared.models import OperationOut, operation_out, problem_for
from effectgate._doors.gateway._adapter import UpstreamAdapter
from effectgate._doors.gateway._config import GatewayConfig, bind, schema_digest
from effectgate._doors.gateway._upstream import UpstreamLink
from effectgate._doors.mcp.server import (
    LOOKUP_TOOL,
    OPERATION_ID_SCHEMA,
    PIN_META_KEY,
    McpHttpMount,
    lookup_tool,
    principal_for,
)
from effectgate._service import Principal, Service
from effectgate.errors import (
    AdapterError,
    ConfigError,
    EffectgateError,
    IntentError,
    UnknownActionClass,
    UpstreamSchemaHeld,
)
from effectgate.store.base import OPERATION_ID_PATTERN
from effectgate.store.roles import Store

__all__ = ["Gateway", "build_gateway_server", "gateway_app", "run_gateway_stdio"]

log = logging.getLogger("effectgate.gateway")

HELD_AUDIT: Final = "gateway_schema_held"
_SYSTEM: Final = "effectgate.gateway"
_FILLED = ("action", "intent_version")


class Gateway:
    """The upstream links, the bound config and the service of one gateway process."""

    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        base_dir: Path | None = None,
        create: bool = False,
        clock: Callable[[], float] = time.time,
        store: Store | None = None,
    ) -> None:
        """``store``: an open ledger to use instead of the config's (tests, embedding)."""
        self.cfg = cfg
        self.links = {name: UpstreamLink(spec) for name, spec in cfg.upstreams.items()}
        try:
            listings = {name: link.list_tools() for name, link in self.links.items()}
            bound = bind(cfg, listings, base_dir=base_dir)
            if cfg.id_mode == "minted":
                for name in bound.service.registry.names():
                    breaker = bound.service.breakers.get(name)
                    if breaker is None or breaker.max_repeats is None:
                        raise ConfigError(
                            f'{cfg.path}: controls.{name}: operation_id = "minted" needs a '
                            "breaker with max_repeats for every governed tool (a retry under a "
                            "minted id is a new action; the repeat signal watches for it)"
                        )
            adapters = {
                name: UpstreamAdapter(
                    self.links[cfg.tools[name].upstream], binding, name, self.is_held
                )
                for name, binding in bound.bindings.items()
            }
            self.service = Service(
                bound.service, adapters=adapters, create=create, clock=clock, store=store
            )
            #: Each governed tool's own adapter (the service wraps them with timing).
            self.raw_adapters: dict[str, UpstreamAdapter] = adapters
        except BaseException:
            for link in self.links.values():
                link.close()
            raise
        self.passthrough = dict(bound.passthrough)
        self._held: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        for name, (pin, live) in bound.held.items():
            self._hold(name, pin, live)
        for upstream, link in self.links.items():
            link.on_connect = self._checker(upstream)

    def is_held(self, name: str) -> bool:
        with self._lock:
            return name in self._held

    def held(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self._held)

    def _hold(self, name: str, pin: str, live: str) -> None:
        with self._lock:
            if self._held.get(name) == (pin, live):
                return
            self._held[name] = (pin, live)
        log.error(
            "gateway tool %s held: upstream schema %s does not match the pinned %s; "
            "accept it with `effectgate gateway accept`",
            name,
            live,
            pin,
        )
        self.service.store.append_audit(
            HELD_AUDIT,
            {"tool": name, "pinned_sha256": pin, "live_sha256": live, "by": _SYSTEM},
            now=self.service.clock(),
        )

    def _checker(self, upstream: str) -> Callable[[list[types.Tool]], None]:
        """Checks the pins of ``upstream``'s governed tools on each new connection."""

        def check(tools: list[types.Tool]) -> None:
            listed = {t.name: t for t in tools}
            for name, gt in self.cfg.tools.items():
                if gt.upstream != upstream:
                    continue
                found = listed.get(gt.tool)
                live = schema_digest(found.input_schema) if found is not None else "missing"
                if live != gt.pin:
                    self._hold(name, gt.pin, live)

        return check

    def recheck(self) -> None:
        """Read every upstream's listing now and hold any governed tool whose schema drifted
        (an upstream upgraded behind a connection the gateway keeps open)."""
        for upstream, link in self.links.items():
            try:
                tools = link.list_tools()
            except Exception as exc:  # an unreachable upstream is the adapter's business
                log.warning("schema check of upstream %s failed (%s)", upstream, exc)
                continue
            self._checker(upstream)(tools)

    def start_schema_watch(self) -> None:
        """Run :meth:`recheck` every ``[gateway] schema_check_interval`` seconds."""
        interval = self.cfg.schema_check_interval
        if interval <= 0 or self._watch is not None:
            return

        def run() -> None:
            while not self._stop.wait(interval):
                self.recheck()

        self._watch = threading.Thread(target=run, name="effectgate-schema-watch", daemon=True)
        self._watch.start()

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=30)
        try:
            self.service.close()
        finally:
            for link in self.links.values():
                link.close()


def _governed_tools(gw: Gateway) -> list[types.Tool]:
    registry = gw.service.config.registry
    output = OperationOut.model_json_schema()
    tools: list[types.Tool] = []
    mode = gw.cfg.id_mode
    for ac in registry:
        schema = ac.json_schema()
        props = {k: v for k, v in schema["properties"].items() if k not in _FILLED}
        required = [r for r in schema.get("required", []) if r not in _FILLED]
        if mode == "argument":
            props = {"operation_id": OPERATION_ID_SCHEMA, **props}
            required = ["operation_id", *required]
        schema.update(properties=props, required=required)
        how = {
            "argument": "Send an operation_id you mint once for this action and repeat on "
            "every retry; a new id is a new action.",
            "meta": "Your host pins the operation id; retry with the same request.",
            "minted": "WARNING: the gateway mints the operation id for each request, so a "
            "retry (also after a reconnect) is a NEW action. Do not resend a call whose "
            "result you did not see: look it up with get_operation instead.",
        }[mode]
        upstream_doc = (gw.cfg.tools[ac.name].tool, gw.cfg.tools[ac.name].upstream)
        tools.append(
            types.Tool(
                name=ac.name,
                title=ac.name.replace("_", " "),
                description=(
                    f"{upstream_doc[0]} on {upstream_doc[1]}, governed by effectgate "
                    f"({ac.effect_class.value}; oversight tier at least {ac.tier_floor.value}). "
                    f"{how} Decimals are JSON strings. The result is the journalled operation."
                ),
                input_schema=schema,
                output_schema=output,
                annotations=types.ToolAnnotations(
                    read_only_hint=False,
                    destructive_hint=True,
                    idempotent_hint=mode != "minted",
                    open_world_hint=True,
                ),
            )
        )
    tools.append(lookup_tool(output))
    return tools


def build_gateway_server(
    gw: Gateway, principal: Principal | Callable[[], Principal] | None = None
) -> Server[Any]:
    """The agent-facing MCP server; ``principal`` as for the ``effectgate mcp`` server."""
    governed = _governed_tools(gw)

    async def list_tools(
        _: ServerRequestContext[Any], __: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        held = gw.held()
        shown = [t for t in governed if t.name not in held]
        return types.ListToolsResult(tools=[*shown, *gw.passthrough.values()])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            who = await principal_for(ctx, principal)
            gw.service.limiter.check(who)
            return await _call(gw, who, params)
        except EffectgateError as exc:
            _, body, _ = problem_for(exc)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(body))],
                structured_content=body,
                is_error=True,
            )

    return Server(
        "effectgate-gateway",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        instructions="Consequential tools are governed by effectgate: each result is the "
        "journalled operation and its outcome; look one up with get_operation.",
    )


def _operation_id(mode: str, args: dict[str, Any], meta: Mapping[str, Any]) -> str:
    pinned = meta.get(PIN_META_KEY)
    if mode == "minted":
        if "operation_id" in args or pinned is not None:
            raise IntentError(
                "this gateway mints operation ids; send no operation_id",
                field="operation_id",
                reason="extra_forbidden",
            )
        return f"gw-{uuid.uuid4().hex}"
    if mode == "meta":
        if "operation_id" in args:
            raise IntentError(
                "the operation id comes from your host's _meta pin, not an argument",
                field="operation_id",
                reason="extra_forbidden",
            )
        if pinned is None:
            raise IntentError(
                f"this gateway needs the operation id pinned by the host in _meta "
                f"[{PIN_META_KEY!r}]",
                field="operation_id",
                reason="missing",
            )
        op_id = pinned
    else:
        if "operation_id" not in args:
            raise IntentError(
                "required field 'operation_id' is missing", field="operation_id", reason="missing"
            )
        op_id = args["operation_id"]
        if pinned is not None and pinned != op_id:
            raise IntentError(
                "differs from the operation id your harness pinned for this call; send the "
                "pinned id",
                field="operation_id",
                reason="pinned_mismatch",
            )
    if not isinstance(op_id, str) or not OPERATION_ID_PATTERN.fullmatch(op_id):
        raise IntentError(
            f"must be a string matching {OPERATION_ID_PATTERN.pattern}",
            field="operation_id",
            reason="invalid_operation_id",
        )
    return op_id


async def _call(
    gw: Gateway, who: Principal, params: types.CallToolRequestParams
) -> types.CallToolResult:
    meta = dict(params.meta or {})
    refused = meta.get(REFUSED_META)
    if refused is not None:
        raise IntentError(
            f"duplicate key {str(refused)!r} in the tool call; send each key once",
            field=str(refused),
            reason="duplicate_key",
        )
    args = dict(params.arguments or {})
    name = params.name
    registry = gw.service.config.registry
    if name in gw.passthrough:
        link = gw.links[gw.cfg.passthrough()[name]]
        try:
            return await anyio.to_thread.run_sync(lambda: link.call(name, args, link.spec.timeout))
        except AdapterError:
            raise
        except Exception as exc:  # a read: nothing to journal, the model may simply ask again
            raise AdapterError(
                f"upstream {link.spec.name}: {name} failed ({type(exc).__name__})"
            ) from None
    if name in gw.held():
        pin, live = gw.held()[name]
        raise UpstreamSchemaHeld(
            f"tool {name!r} is held: its upstream schema changed (pinned {pin[:12]}, now "
            f"{live[:12]}); nothing was sent. An operator must accept the new schema."
        )
    if name == LOOKUP_TOOL:
        op_id = args.pop("operation_id", None)
        if args:
            raise IntentError(
                f"unknown field {sorted(args)[0]!r} (allowed: operation_id)",
                field=sorted(args)[0],
                reason="extra_forbidden",
            )
        if not isinstance(op_id, str) or not OPERATION_ID_PATTERN.fullmatch(op_id):
            raise IntentError(
                f"must be a string matching {OPERATION_ID_PATTERN.pattern}",
                field="operation_id",
                reason="invalid_operation_id",
            )
        op = await anyio.to_thread.run_sync(gw.service.lookup, who, op_id)
    elif name in registry:
        op_id = _operation_id(gw.cfg.id_mode, args, meta)
        args.pop("operation_id", None)
        version = sorted(registry.get(name).schema_versions)[-1]
        body = {"action": name, "intent_version": version, **args}
        op = await anyio.to_thread.run_sync(gw.service.propose, who, name, op_id, body)
    else:
        raise UnknownActionClass(f"no tool named {name!r}")
    out = operation_out(op, registry).model_dump(mode="json")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(out))], structured_content=out
    )


async def run_gateway_stdio(gw: Gateway, authenticate: Callable[[], Principal]) -> None:
    """Serve the gateway over this process's stdin/stdout (every call authenticated afresh)."""
    server = build_gateway_server(gw, authenticate)
    lines = ScreenedLines(
        anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    )
    async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
        await server.run(read, write, server.create_initialization_options())


def gateway_app(gw: Gateway, *, standing_reconciler: bool = False) -> FastAPI:
    """The gateway over HTTP: its MCP server at ``/mcp`` (agent bearer token per request,
    duplicate keys refused) beside the service's HTTP API, whose operator door
    (``/v1/admin``: approvals, kill switches, breakers) acts on the governed tools."""
    from effectgate._doors.http.app import create_app

    mount = McpHttpMount(gw.service, build_gateway_server(gw))
    return create_app(gw.service, standing_reconciler=standing_reconciler, mcp_mount=mount)
