"""The gateway's config file: the service's sections plus ``[gateway]``, ``[upstreams.*]`` and
``[tools.*]``, read with the same strict :class:`Section` (every error names its key and line).

It is read in two steps. :func:`parse_gateway` needs no upstream: it checks the file and what
is needed to connect. :func:`bind` then takes each upstream's ``tools/list`` and builds the
action classes: each governed tool's schema is the upstream's ``inputSchema`` (its pinned
digest checked first) with the config's ``[tools.NAME.fields.FIELD]`` tables merged over its
properties, then read by the service's strict JSON Schema subset. A tool whose upstream schema
no longer matches its pin is *held*: no action class is built for it and calls are refused
until an operator accepts the new schema (``effectgate gateway accept``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import mcp_types as types

from effectgate._core.intent import ActionClass, EffectClass, Registry, Tier
from effectgate._core.policy import PolicySet
from effectgate._doors._shared.config_kind import is_gateway_config
from effectgate._doors.gateway._adapter import ReadTools, ToolBinding
from effectgate._doors.gateway._upstream import UpstreamSpec
from effectgate._execute.adapter import ADAPTER_CALL_CEILING
from effectgate._service import _config as svc
from effectgate._service._controls_config import (
    alerts_section,
    approvals_section,
    breaker_section,
    new_target_fields,
    repeat_key_section,
)
from effectgate._service._jsonschema import model_from_json_schema
from effectgate._service._toml import Section
from effectgate.errors import ConfigError, EffectgateError

__all__ = [
    "ID_MODES",
    "Bound",
    "GatewayConfig",
    "GovernedTool",
    "bind",
    "is_gateway_config",
    "load_gateway",
    "parse_gateway",
    "schema_digest",
]

#: Where the operation id comes from: an argument the model sends (``argument``), the host's
#: ``_meta`` pin only (``meta``), or minted by the gateway per request (``minted``).
ID_MODES = ("argument", "meta", "minted")
_TOOL_NAME = r"[a-z][a-z0-9_]{0,63}"
_UPSTREAM_TOOL = r"[A-Za-z0-9_.-]{1,128}"
_DROPPED = ("default", "examples")  # annotations a strict intent schema does not carry


def schema_digest(schema: Mapping[str, Any]) -> str:
    """SHA-256 of a tool's ``inputSchema`` in a canonical JSON form (sorted keys, no spaces)."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GovernedTool:
    """One ``[tools.NAME]``: an upstream tool that becomes an action class."""

    name: str
    upstream: str
    tool: str
    pin: str
    binding: ToolBinding
    data: Mapping[str, Any]  # the table, read again (for its errors' lines) by bind


@dataclass(frozen=True)
class GatewayConfig:
    path: str
    source: str
    data: Mapping[str, Any]
    id_mode: str
    upstreams: Mapping[str, UpstreamSpec]
    tools: Mapping[str, GovernedTool]
    #: Seconds between re-reads of the upstreams' listings (0: only on each connection).
    schema_check_interval: float = 60.0

    def passthrough(self) -> dict[str, str]:
        """Exposed read-only tool name -> its upstream."""
        return {t: name for name, up in self.upstreams.items() for t in up.read_only}


@dataclass(frozen=True)
class Bound:
    """The config bound to the upstreams' listings."""

    service: svc.ServiceConfig
    #: Held tools: name -> (pinned digest, live digest or "missing").
    held: Mapping[str, tuple[str, str]]
    #: Each governed (not held) tool's binding to its upstream tool.
    bindings: Mapping[str, ToolBinding]
    #: Passthrough tools as the upstream lists them.
    passthrough: Mapping[str, types.Tool] = field(default_factory=dict)


def service_config_of(path: str | Path) -> svc.ServiceConfig:
    """The service config a gateway file amounts to (its upstreams are asked for their
    schemas): what operator commands need to act on a gateway's classes."""
    from effectgate._doors.gateway._upstream import UpstreamLink

    cfg = load_gateway(path)
    listings: dict[str, list[types.Tool]] = {}
    for name, spec in cfg.upstreams.items():
        link = UpstreamLink(spec)
        try:
            listings[name] = link.list_tools()
        finally:
            link.close()
    return bind(cfg, listings, base_dir=Path(path).resolve().parent).service


def load_gateway(path: str | Path) -> GatewayConfig:
    file = Path(path)
    try:
        source = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the gateway config: {exc.strerror}") from None
    return parse_gateway(source, str(file), base_dir=file.resolve().parent)


def parse_gateway(
    source: str, file: str = "<gateway>", *, base_dir: Path | None = None
) -> GatewayConfig:
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    top = Section(data, (), file, source)
    gw = top.table("gateway")
    id_mode, recheck = "argument", 60.0
    if gw is not None:
        id_mode = gw.text("operation_id", "argument", choices=list(ID_MODES)) or id_mode
        recheck = gw.number("schema_check_interval", recheck, exclusive=False)
        gw.done()
    upstreams = {name: _upstream(name, sec, base_dir) for name, sec in top.tables("upstreams")}
    if not upstreams:
        top.fail("upstreams", "declare at least one upstream ([upstreams.NAME])")
    tools = {name: _tool(name, sec, upstreams) for name, sec in top.tables("tools")}
    if not tools and not any(u.read_only for u in upstreams.values()):
        top.fail("tools", "declare at least one governed tool ([tools.NAME]) or read_only tool")
    seen: dict[str, str] = {}
    for up in upstreams.values():
        for name in up.read_only:
            if name in tools or name in seen:
                top.fail("upstreams", f"two exposed tools are named {name!r}")
            seen[name] = up.name
    for key in ("service", "store", "policies", "controls", "approvals", "alerts", "tokens"):
        top.raw(key)  # read by bind
    top.done()
    if "store" not in data:
        top.fail("store", "is required")
    return GatewayConfig(file, source, data, id_mode, upstreams, tools, recheck)


def bind(
    cfg: GatewayConfig, listings: Mapping[str, list[types.Tool]], *, base_dir: Path | None = None
) -> Bound:
    """Build the service config from the upstreams' listings (see the module doc)."""
    top = Section(dict(cfg.data), (), cfg.path, cfg.source)
    top.table("gateway")
    top.table("upstreams")
    top.table("tools")
    service = svc._service(top.table("service"))
    store_sec = top.table("store", required=True)
    if store_sec is None:  # unreachable: required
        top.fail("store", "is required")
    store = svc._store(store_sec, base_dir)
    registry = Registry(max_bytes=service.max_body_bytes, max_depth=service.max_depth)
    held: dict[str, tuple[str, str]] = {}
    adapters: dict[str, svc.AdapterConfig] = {}
    bindings: dict[str, ToolBinding] = {}
    for name, gt in cfg.tools.items():
        listed = {t.name: t for t in listings.get(gt.upstream, [])}
        upstream_tool = listed.get(gt.tool)
        if upstream_tool is None:
            held[name] = (gt.pin, "missing")
            continue
        live = schema_digest(upstream_tool.input_schema)
        if live != gt.pin:
            held[name] = (gt.pin, live)
            continue
        sec = Section(dict(gt.data), ("tools", name), cfg.path, cfg.source)
        ac, numbers = _action_class(gt, sec, upstream_tool.input_schema, cfg)
        registry.register(ac)
        bindings[name] = replace(gt.binding, number_fields=numbers)
        # The kind a conformance report names (UpstreamAdapter.kind): check and the
        # effectgate_exactly_once gauge read the claim through it.
        adapters[name] = svc.AdapterConfig(name, "mcp-upstream", factory="gateway")
    passthrough: dict[str, types.Tool] = {}
    for exposed, up in cfg.passthrough().items():
        found = {t.name: t for t in listings.get(up, [])}.get(exposed)
        if found is not None:
            passthrough[exposed] = found
    policy, names = PolicySet(), set()
    for name, sec in top.tables("policies"):
        if name not in cfg.tools:
            sec.fail(None, f"no governed tool named {name!r}")
        limits = svc._policy(sec)
        if name in registry:
            policy.set(name, limits)
            names.add(name)
    breakers = {}
    for name, sec in top.tables("controls"):
        if name not in cfg.tools:
            sec.fail(None, f"no governed tool named {name!r}")
        if name in registry:
            breakers[name] = breaker_section(name, sec, registry)
    approvals = approvals_section(top.table("approvals"))
    alerts = alerts_section(top.table("alerts"))
    tokens = tuple(svc._token(name, sec) for name, sec in top.tables("tokens"))
    top.done()
    config = svc.ServiceConfig(
        path=cfg.path,
        service=service,
        store=store,
        registry=registry,
        adapters=adapters,
        policy=policy,
        policy_names=frozenset(names),
        tokens=tokens,
        breakers=breakers,
        approvals=approvals,
        alerts=alerts,
    )
    return Bound(config, held, bindings, passthrough)


# --- sections ---------------------------------------------------------------------------------


def _upstream(name: str, sec: Section, base_dir: Path | None) -> UpstreamSpec:
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name):
        sec.fail(None, "upstream names match [a-z][a-z0-9_-]{0,63}")
    svc._refuse_secrets(sec)
    command, url = sec.text("command"), sec.text("url")
    if (command is None) == (url is None):
        sec.fail("command", 'give exactly one of command = "..." (stdio) or url = "..." (HTTP)')
    args = sec.text_list("args") or []
    cwd = sec.text("cwd")
    env_sec = sec.table("env")
    env: dict[str, str] = {}
    if env_sec is not None:
        for key in env_sec.names():
            env[key] = env_sec.req_text(key, pattern=svc._ENV_NAME)
        env_sec.done()
    cred = sec.text("credential_env", pattern=svc._ENV_NAME)
    if url is not None:
        if args or cwd or env:
            sec.fail("url", "args, cwd and env are for a stdio upstream (command)")
        if not url.startswith(("http://", "https://")):
            sec.fail("url", "must be an http:// or https:// URL")
    elif cred is not None:
        sec.fail("credential_env", "is for an HTTP upstream; give a stdio one env = {...}")
    if cwd is not None and base_dir is not None and not Path(cwd).is_absolute():
        cwd = str((base_dir / cwd).resolve())
    read_only = sec.text_list("read_only") or []
    for tool in read_only:
        if not re.fullmatch(_TOOL_NAME, tool):
            sec.fail("read_only", f"{tool!r} must match {_TOOL_NAME}")
    spec = UpstreamSpec(
        name=name,
        command=command,
        args=tuple(args),
        cwd=cwd,
        env=env,
        url=url,
        credential_env=cred,
        timeout=_call_timeout(sec),
        read_only=tuple(read_only),
    )
    sec.done()
    return spec


_TOOL_KEYS = frozenset(
    {
        "upstream", "tool", "schema_sha256", "key_argument", "id_field", "reads", "venue",
        "fields", "value_field", "effect_class", "tier_floor", "visibility_horizon",
        "key_retention", "target_field", "settlement_window", "hold_bound",
        "repeat_key", "new_target_fields",
    }
)  # fmt: skip


def _tool(name: str, sec: Section, upstreams: Mapping[str, UpstreamSpec]) -> GovernedTool:
    for key in sec.names():
        if key not in _TOOL_KEYS:
            sec.fail(key, f"unknown key (known: {', '.join(sorted(_TOOL_KEYS))})")
    data = copy.deepcopy(sec.take_all())
    sec = Section(copy.deepcopy(data), sec.path, sec._file, sec._source)
    if not re.fullmatch(_TOOL_NAME, name):
        sec.fail(None, f"governed tool names match {_TOOL_NAME}")
    upstream = sec.req_text("upstream")
    if upstream not in upstreams:
        sec.fail("upstream", f"no upstream named {upstream!r}")
    tool = sec.text("tool", name, pattern=_UPSTREAM_TOOL) or name
    if tool in upstreams[upstream].read_only:
        sec.fail("tool", f"{tool!r} is also listed read_only for upstream {upstream!r}")
    pin = sec.req_text("schema_sha256", pattern=r"[0-9a-f]{64}")
    reads_sec = sec.table("reads")
    reads = _reads(reads_sec) if reads_sec is not None else None
    binding = ToolBinding(
        tool=tool,
        key_argument=sec.text("key_argument", pattern=r"[A-Za-z_][A-Za-z0-9_]{0,63}"),
        id_field=sec.text("id_field"),
        reads=reads,
    )
    venue = sec.table("venue")
    if reads is None and (venue is None or venue.raw("read_view") != "none"):
        sec.fail(
            "reads",
            "name the upstream's read tools ([tools.NAME.reads]) or declare "
            '[tools.NAME.venue] read_view = "none" (its uncertain rows then go to an operator)',
        )
    return GovernedTool(name, upstream, tool, pin, binding, data)


def _reads(sec: Section) -> ReadTools:
    list_args = sec.table("list_arguments")
    reads = ReadTools(
        list_tool=sec.req_text("list_tool", pattern=_UPSTREAM_TOOL),
        items_field=sec.req_text("items_field"),
        key_field=sec.req_text("key_field"),
        id_field=sec.req_text("id_field"),
        list_arguments=list_args.take_all() if list_args is not None else {},
        lookup_tool=sec.text("lookup_tool", pattern=_UPSTREAM_TOOL),
        lookup_argument=sec.text("lookup_argument"),
        lookup_items_field=sec.text("lookup_items_field"),
    )
    if (reads.lookup_tool is None) != (reads.lookup_argument is None):
        sec.fail("lookup_argument", "give lookup_tool and lookup_argument together")
    sec.done()
    return reads


def _action_class(
    gt: GovernedTool, sec: Section, upstream_schema: Mapping[str, Any], cfg: GatewayConfig
) -> tuple[ActionClass, frozenset[str]]:
    """The action class, and the decimal fields the upstream takes as JSON numbers."""
    for key in ("upstream", "tool", "schema_sha256", "key_argument", "id_field", "reads"):
        sec.raw(key)
    schema = copy.deepcopy(dict(upstream_schema))
    props: dict[str, Any] = dict(schema.get("properties") or {})
    required = [r for r in schema.get("required") or [] if r != gt.binding.key_argument]
    key_arg = gt.binding.key_argument
    if key_arg is not None:
        if key_arg not in props:
            sec.fail("key_argument", f"the upstream tool has no argument {key_arg!r}")
        del props[key_arg]  # the gateway fills it with the operation key
    numbers: set[str] = set()
    fields = sec.table("fields")
    for field_name in fields.names() if fields is not None else []:
        tighten = fields.table(field_name) if fields is not None else None
        if tighten is None:
            continue
        if field_name not in props:
            tighten.fail(None, f"the upstream tool has no argument {field_name!r}")
        merged = {**props[field_name], **tighten.take_all()}
        if props[field_name].get("type") in ("number", "integer") and merged.get("format") in (
            "decimal",
            "positive-decimal",
        ):
            merged["type"] = "string"
            numbers.add(field_name)
        props[field_name] = merged
    if fields is not None:
        fields.done()
    for prop in props.values():
        if isinstance(prop, dict):
            for key in _DROPPED:
                prop.pop(key, None)
    schema.update(properties=props, required=required, additionalProperties=False)
    schema.pop("$schema", None)
    label = (
        f"{cfg.path} (upstream {gt.upstream} tool {gt.tool}, merged with tools.{gt.name}.fields)"
    )
    try:
        model = model_from_json_schema(gt.name, Section(schema, ("inputSchema",), label, ""))
    except ConfigError as exc:
        raise ConfigError(
            f"{exc.message}; tighten it with [tools.{gt.name}.fields.FIELD] (e.g. type, "
            "format, pattern, maxLength, minimum/maximum)"
        ) from None
    value_field = sec.text("value_field")
    value_of = None
    if value_field is not None:
        if value_field not in props:
            sec.fail("value_field", f"the tool has no field {value_field!r}")

        def value_of(
            effect: Mapping[str, str | int | bool], f: str = value_field
        ) -> Decimal | None:
            raw = effect.get(f)
            return Decimal(str(raw)) if raw is not None and not isinstance(raw, bool) else None

    effect_class = EffectClass(sec.req_text("effect_class", choices=[e.value for e in EffectClass]))
    if effect_class is EffectClass.READ_ONLY:
        sec.fail("effect_class", "a read-only tool is passed through: list it in read_only")
    tier = Tier(sec.text("tier_floor", "validate", choices=[t.value for t in Tier]) or "validate")
    horizon = sec.req_number("visibility_horizon", svc._HORIZON_WHY)
    retention = sec.req_number("key_retention", svc._RETENTION_WHY)
    target_field = sec.text("target_field")
    settlement = sec.number("settlement_window", 1.0) if sec.has("settlement_window") else None
    hold_bound = sec.number("hold_bound", 1.0) if sec.has("hold_bound") else None
    venue = svc._venue_contract(sec.table("venue"))
    # A minted-id retry with jittered arguments is the gateway's typical repeat.
    repeat_key = repeat_key_section(sec.table("repeat_key"))
    watched = new_target_fields(sec)
    sec.done()
    try:
        ac = ActionClass(
            name=gt.name,
            model=model,
            adapter=gt.name,
            effect_class=effect_class,
            tier_floor=tier,
            visibility_horizon=horizon,
            key_retention=retention,
            value_of=value_of,
            target_field=target_field,
            settlement_window=settlement,
            hold_bound=hold_bound,
            venue=venue,
            repeat_key=repeat_key,
            new_target_fields=watched,
        )
    except EffectgateError as exc:
        sec.fail(None, exc.message)
    return ac, frozenset(numbers)


def _call_timeout(sec: Section) -> float:
    """An upstream's timeout bounds each call to it: above the ceiling on one adapter call
    (docs/adapters.md) is refused, naming the field."""
    value = sec.number("timeout", 10.0)
    if value > ADAPTER_CALL_CEILING:
        sec.fail(
            "timeout",
            f"{value:g}s is above the {ADAPTER_CALL_CEILING:g}s ceiling on one adapter call",
        )
    return float(value)
