"""The service configuration: one TOML file, validated completely before anything starts.

Secrets never live in the file. An adapter names the *environment variable* or *file* that
holds its credential; a token is stored as its SHA-256 (or named by an environment variable).
Every error names the key, and the line where the source allows it (see ``docs/service.md``).
"""

from __future__ import annotations

import hashlib
import importlib
import ipaddress
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from effectgate._core.controls import ApprovalRules, BreakerConfig
from effectgate._core.effects import OPERATION_ID_MODES
from effectgate._core.intent import (
    AUDIT_FIELDS,
    ActionClass,
    EffectClass,
    IntentBase,
    Registry,
    Tier,
)
from effectgate._core.model_window import ON_FAIL, WindowEnd
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.venue import LISTING_MODES, REVISION_NAMES, KeyHonour, ReadView, VenueContract
from effectgate._service._anchor_config import AnchorConfig, anchor_section
from effectgate._service._authority_config import (
    AuthorityConfig,
    IdentityConfig,
    authority_section,
    identity_section,
)
from effectgate._service._channels import ChannelConfig, channel_section
from effectgate._service._controls_config import (
    AlertsConfig,
    alerts_section,
    approvals_section,
    breaker_section,
    new_target_fields,
    repeat_key_section,
)
from effectgate._service._jsonschema import model_from_json_schema
from effectgate._service._logging import LOG_FORMATS
from effectgate._service._speculation_config import check_horizons, speculation_section
from effectgate._service._toml import Section
from effectgate.errors import ConfigError, EffectgateError, RegistryError
from effectgate.store.base import SCOPE_PATTERN, parse_store_url

__all__ = [
    "AdapterConfig",
    "AlertsConfig",
    "RateLimit",
    "ServiceConfig",
    "ServiceSettings",
    "StoreConfig",
    "TokenConfig",
    "import_object",
    "load_config",
    "parse_config",
    "shown_url",
]

_NAME = r"[a-z][a-z0-9_-]{0,63}"
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_CALLER_NAME = r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}"
_SECRET_KEYS = ("credential", "api_key", "apikey", "password", "secret", "token", "key")
ADAPTER_KINDS = ("http", "paper", "python", "stripe", "aws", "email")
#: Keys an ActionClass refusal names first ("submit_order: hold_bound ..."): located on them.
_LOCATED_KEYS = (
    "visibility_horizon",
    "key_retention",
    "settlement_window",
    "hold_bound",
    "repeat_key",
    "new_target_fields",
    "rehearsal_period",
    "model_window",
)
# Facts about the venue, never defaulted: a round number that is wrong for the venue writes
# rows off too early or lets a retry outlive the venue's memory of the key.
_HORIZON_WHY = (
    "seconds the venue's reads may lag its writes; take it from the venue's "
    "documentation, there is no safe default"
)
_RETENTION_WHY = (
    "seconds the venue remembers an idempotency key; take it from the venue's "
    "documentation, there is no safe default"
)


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``per_second`` sustained, ``burst`` at once."""

    per_second: float
    burst: int


@dataclass(frozen=True)
class ServiceSettings:
    host: str = "127.0.0.1"
    port: int = 8787
    public: bool = False
    max_body_bytes: int = 65536
    max_depth: int = 16
    dispatch_timeout: float = 10.0
    #: Seconds one probe or listing page of the reconciler (and of a continuation's admission)
    #: may take; capped like every adapter call.
    probe_timeout: float = 10.0
    mcp_http: bool = True
    #: The operator MCP tool set (approvals) at /mcp/operator, on an approver's credential.
    operator_mcp_http: bool = False
    reconcile_interval: float = 5.0
    dispatch_interval: float = 1.0
    in_flight_grace: float = 2.0
    rate_limit: RateLimit = RateLimit(20.0, 40)
    log_format: str = "text"


@dataclass(frozen=True)
class StoreConfig:
    url: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AdapterConfig:
    """How to build one adapter. Holds names of where secrets are, never the secrets."""

    name: str
    kind: str
    endpoint: str | None = None
    credential_env: str | None = None
    credential_file: str | None = None
    timeout: float = 5.0
    factory: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenConfig:
    """A bearer token for an agent or an operator, stored as its SHA-256 hex digest.

    Deprecated: tokens live in the ledger (``effectgate token create``), where a revocation
    holds at once in every replica; these are still accepted.
    """

    name: str
    role: str
    scope: str
    sha256: str = field(repr=False)
    rate_limit: RateLimit | None = None


@dataclass(frozen=True)
class ServiceConfig:
    path: str
    service: ServiceSettings
    store: StoreConfig
    registry: Registry
    adapters: Mapping[str, AdapterConfig]
    policy: PolicySet
    policy_names: frozenset[str]
    tokens: tuple[TokenConfig, ...]
    breakers: Mapping[str, BreakerConfig] = field(default_factory=dict)
    approvals: ApprovalRules = field(default_factory=ApprovalRules)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    anchor: AnchorConfig | None = None
    #: Verified identity (JWTs) and the grant axis (docs/authority.md).
    identity: IdentityConfig | None = None
    authority: AuthorityConfig = field(default_factory=AuthorityConfig)
    #: Approval channels: signed webhook out, signed callback in (docs/authority.md).
    channels: Mapping[str, ChannelConfig] = field(default_factory=dict)
    #: ``[receipts] key_file``: the Ed25519 PEM private key signing operation receipts (a path,
    #: relative to the config file; ``$EFFECTGATE_RECEIPT_KEY`` overrides it). Never the key.
    receipt_key_file: str | None = None


def load_config(path: str | os.PathLike[str]) -> ServiceConfig:
    """Read and fully validate the config at ``path``; raise :class:`ConfigError` naming the key."""
    file = Path(path)
    try:
        source = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the config file: {exc.strerror}") from None
    return parse_config(source, str(file), base_dir=file.resolve().parent)


def parse_config(
    source: str, file: str = "<config>", *, base_dir: Path | None = None
) -> ServiceConfig:
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    if base_dir is not None and str(base_dir) not in sys.path:
        # `module:Name` references resolve next to the config file first (effectgate init).
        sys.path.insert(0, str(base_dir))
    top = Section(data, (), file, source)
    service = _service(top.table("service"))
    store_section = top.table("store", required=True)
    if store_section is None:  # unreachable: required=True raises first
        top.fail("store", "is required")
    store = _store(store_section, base_dir)
    adapters = {name: _adapter(name, sec) for name, sec in top.tables("adapters")}
    if not adapters:
        top.fail("adapters", "declare at least one adapter ([adapters.NAME])")
    registry = Registry(max_bytes=service.max_body_bytes, max_depth=service.max_depth)
    for name, sec in top.tables("classes"):
        registry.register(_action_class(name, sec, adapters))
    if not len(registry):
        top.fail("classes", "declare at least one action class ([classes.NAME])")
    check_horizons(
        registry, dispatch_timeout=service.dispatch_timeout, in_flight_grace=service.in_flight_grace
    )
    _check_compensations(top, registry)
    policy = PolicySet()
    policy_names: set[str] = set()
    for name, sec in top.tables("policies"):
        if name not in registry:
            sec.fail(None, f"no action class named {name!r}")
        limits = _policy(sec)
        if registry.get(name).value_of is None:
            for key in ("max_value", "approve_above"):
                if getattr(limits, key) is not None:
                    sec.fail(
                        key,
                        f"class {name!r} declares no value measure (classes.{name}."
                        "value), so this limit could never be checked",
                    )
        policy.set(name, limits)
        policy_names.add(name)
    breakers = {name: breaker_section(name, sec, registry) for name, sec in top.tables("controls")}
    approvals = approvals_section(top.table("approvals"))
    alerts = alerts_section(top.table("alerts"))
    anchor = anchor_section(top.table("anchor"))
    identity = identity_section(top.table("identity"), base_dir)
    authority = authority_section(top.table("authority"), registry)
    channels = {name: channel_section(name, sec) for name, sec in top.tables("channels")}
    receipt_key_file = _receipts(top.table("receipts"), base_dir)
    tokens = tuple(_token(name, sec) for name, sec in top.tables("tokens"))
    digests = [t.sha256 for t in tokens]
    if len(set(digests)) != len(digests):
        top.fail("tokens", "two tokens have the same value; give each caller its own")
    top.done()
    return ServiceConfig(
        path=file,
        service=service,
        store=store,
        registry=registry,
        adapters=adapters,
        policy=policy,
        policy_names=frozenset(policy_names),
        tokens=tokens,
        breakers=breakers,
        approvals=approvals,
        alerts=alerts,
        anchor=anchor,
        identity=identity,
        authority=authority,
        channels=channels,
        receipt_key_file=receipt_key_file,
    )


def _receipts(sec: Section | None, base_dir: Path | None) -> str | None:
    if sec is None:
        return None
    path = Path(sec.req_text("key_file"))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        sec.fail("key_file", f"{path} is not a file (`effectgate receipt keygen` makes one)")
    sec.done()
    return str(path)


def shown_url(url: str) -> str:
    """``url`` whole, as written, but with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def import_object(ref: str) -> Any:
    """``package.module:Attribute`` -> the object. Raises ConfigError with the reason."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.]*", module_name) or not attr.isidentifier():
        raise ConfigError(f"{ref!r} is not of the form package.module:Name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None


# --- sections ---------------------------------------------------------------------------------


def _rate(sec: Section | None, default: RateLimit) -> RateLimit:
    if sec is None:
        return default
    limit = RateLimit(
        sec.number("per_second", default.per_second), sec.integer("burst", default.burst, minimum=1)
    )
    sec.done()
    return limit


def _service(sec: Section | None) -> ServiceSettings:
    if sec is None:
        return ServiceSettings()
    d = ServiceSettings()
    host = sec.text("host", d.host) or d.host
    public = sec.flag("public", d.public)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        sec.fail("host", f"{host!r} is not an IP address")
    if not loopback and not public:
        sec.fail(
            "host",
            f"{host!r} is not a loopback address; bind 127.0.0.1 behind a TLS "
            "proxy, or set public = true if you really mean it",
        )
    settings = ServiceSettings(
        host=host,
        public=public,
        port=sec.integer("port", d.port, minimum=0, maximum=65535),
        max_body_bytes=sec.integer(
            "max_body_bytes", d.max_body_bytes, minimum=256, maximum=16 * 1024 * 1024
        ),
        max_depth=sec.integer("max_depth", d.max_depth, minimum=2, maximum=64),
        dispatch_timeout=_capped(sec, "dispatch_timeout", d.dispatch_timeout),
        probe_timeout=_capped(sec, "probe_timeout", d.probe_timeout),
        mcp_http=sec.flag("mcp_http", d.mcp_http),
        operator_mcp_http=sec.flag("operator_mcp_http", d.operator_mcp_http),
        reconcile_interval=sec.number("reconcile_interval", d.reconcile_interval, exclusive=False),
        dispatch_interval=sec.number("dispatch_interval", d.dispatch_interval, exclusive=False),
        in_flight_grace=sec.number("in_flight_grace", d.in_flight_grace, exclusive=False),
        rate_limit=_rate(sec.table("rate_limit"), d.rate_limit),
        log_format=sec.text("log_format", d.log_format, choices=LOG_FORMATS) or d.log_format,
    )
    sec.done()
    return settings


def _store(sec: Section, base_dir: Path | None = None) -> StoreConfig:
    url = sec.req_text("url")
    try:
        dialect, target = parse_store_url(url)
    except ConfigError:
        sec.fail(
            "url",
            f"unsupported store URL {shown_url(url)!r}; use sqlite:///PATH or postgresql://...",
        )
    options: dict[str, Any] = {}
    if dialect == "sqlite":
        sync = sec.text("synchronous", choices=["FULL", "EXTRA", "NORMAL", "OFF"])
        if sync is not None:
            options["synchronous"] = sync
        if sec.has("busy_timeout_ms"):
            options["busy_timeout_ms"] = sec.integer("busy_timeout_ms", 30000, minimum=1)
    else:
        # PostgreSQL: pool sizes and the server-side timeouts (see docs/postgresql.md).
        for key, option, low in (
            ("pool_min_size", "min_size", 1),
            ("pool_max_size", "max_size", 1),
            ("statement_timeout_ms", "statement_timeout_ms", 1),
            ("lock_timeout_ms", "lock_timeout_ms", 1),
        ):
            if sec.has(key):
                options[option] = sec.integer(key, 1, minimum=low, maximum=10_000_000)
        for key in ("connect_timeout", "pool_timeout"):
            if sec.has(key):
                options[key] = sec.number(key, 5.0)
        schema = sec.text("schema", pattern=r"[a-z_][a-z0-9_]{0,62}")
        if schema is not None:
            options["schema"] = schema
        sync = sec.text(
            "synchronous_commit", choices=["on", "remote_apply", "remote_write", "local", "off"]
        )
        if sync is not None:
            options["synchronous_commit"] = sync
        if options.get("min_size", 1) > options.get("max_size", 4):
            sec.fail("pool_min_size", "must not exceed pool_max_size (default 4)")
    sec.done()
    if (
        dialect == "sqlite"
        and base_dir is not None
        and target != ":memory:"
        and not Path(target).is_absolute()
    ):
        # A relative ledger path means "next to this config file", wherever the command runs
        # from: resolved against the working directory, another folder opened another, empty
        # ledger and a retry of an acknowledged operation was sent again.
        url = f"sqlite:///{(base_dir / target).resolve()}"
    return StoreConfig(url=url, options=options)


def _refuse_secrets(sec: Section) -> None:
    for key in sec.names():
        if key.lower() in _SECRET_KEYS or key.lower().endswith(("_key", "_secret", "password")):
            sec.fail(
                key,
                "secrets never go in the config file; put the credential in an "
                "environment variable or a file and name it with credential_env or "
                "credential_file",
            )


def _adapter(name: str, sec: Section) -> AdapterConfig:
    if not re.fullmatch(_NAME, name):
        sec.fail(None, f"adapter name must match {_NAME}")
    _refuse_secrets(sec)
    kind = sec.req_text("kind", choices=list(ADAPTER_KINDS))
    cfg: AdapterConfig
    if kind == "http":
        env = sec.text("credential_env", pattern=_ENV_NAME)
        cred_file = sec.text("credential_file")
        if (env is None) == (cred_file is None):
            sec.fail("credential_env", "give exactly one of credential_env or credential_file")
        cfg = AdapterConfig(
            name,
            kind,
            endpoint=sec.req_text("endpoint"),
            credential_env=env,
            credential_file=cred_file,
            timeout=_capped(sec, "timeout", 5.0),
            options={"speculation": sec.flag("speculation", False)},
        )
    elif kind in ("stripe", "aws", "email"):
        given = {k: sec.text(k) for k in ("credential_env", "credential_file", "credential_hook")}
        if kind != "email" and sum(v is not None for v in given.values()) != 1:
            sec.fail(
                "credential_env",
                "give exactly one of credential_env, credential_file or credential_hook",
            )
        opts = sec.table("options")
        raw = opts.take_all() if opts is not None else {}
        for key in raw:
            if key.lower() in _SECRET_KEYS or key.lower().endswith(("_secret", "password")):
                sec.fail(
                    key,
                    "secrets never go in the config file: use credential_env, "
                    "credential_file or credential_hook",
                )
        cfg = AdapterConfig(
            name,
            kind,
            endpoint=sec.text("endpoint"),
            credential_env=given["credential_env"],
            credential_file=given["credential_file"],
            timeout=_capped(sec, "timeout", 10.0),
            factory=given["credential_hook"],
            options=raw,
        )
    elif kind == "paper":
        options = {
            "honour_key": sec.flag("honour_key", True),
            "read_lag": sec.number("read_lag", 0.0, exclusive=False),
            # The dry-run sandbox (seed 000): absent means the paper venue cannot speculate.
            "sandbox": sec.text("sandbox", None, choices=["honest", "naive", "evicting"]),
            "sandbox_lifetime": sec.number("sandbox_lifetime", 60.0),
            # Seconds each dispatch waits, as a real venue's round trip would (rehearsals, B6).
            "latency": _capped(sec, "latency", 0.0, exclusive=False),
        }
        cfg = AdapterConfig(name, kind, options=options)
    else:
        factory = sec.req_text("factory")
        try:
            if not callable(import_object(factory)):
                sec.fail("factory", f"{factory!r} is not callable")
        except ConfigError as exc:
            sec.fail("factory", exc.message)
        opts = sec.table("options")
        raw = opts.take_all() if opts is not None else {}
        cfg = AdapterConfig(name, kind, factory=factory, options=raw)
    sec.done()
    return cfg


def _action_class(name: str, sec: Section, adapters: Mapping[str, AdapterConfig]) -> ActionClass:
    schema_ref = sec.text("schema")
    json_schema = sec.table("json_schema")
    if (schema_ref is None) == (json_schema is None):
        sec.fail(
            "schema",
            'give exactly one of schema = "package.module:Model" or a '
            "[classes.NAME.json_schema] table",
        )
    model: type[IntentBase]
    if schema_ref is not None:
        obj = _imported(sec, "schema", schema_ref)
        if not (isinstance(obj, type) and issubclass(obj, IntentBase)):
            sec.fail("schema", f"{schema_ref!r} is not a subclass of effectgate.IntentBase")
        model = obj
    else:
        if json_schema is None:  # unreachable: checked above
            sec.fail("json_schema", "is required")
        model = model_from_json_schema(name, json_schema)
    adapter = sec.req_text("adapter")
    if adapter not in adapters:
        sec.fail(
            "adapter", f"no adapter named {adapter!r} (declared: {', '.join(sorted(adapters))})"
        )
    value_ref = sec.text("value")
    value_of: Callable[..., Decimal | None] | None = None
    if value_ref is not None:
        value_of = _imported(sec, "value", value_ref)
        if not callable(value_of):
            sec.fail("value", f"{value_ref!r} is not callable")
    versions = sec.text_list("schema_versions") or ["1"]
    expect_effect = sec.text_list("effect_fields")
    expect_decimal = sec.text_list("decimal_fields")
    expect_audit = sec.text_list("audit_fields")
    # Read before the try: a ConfigError from the getters is located already.
    effect_class = EffectClass(sec.req_text("effect_class", choices=[e.value for e in EffectClass]))
    tier_floor = Tier(
        sec.text("tier_floor", "validate", choices=[t.value for t in Tier]) or "validate"
    )
    horizon = sec.req_number("visibility_horizon", _HORIZON_WHY)
    retention = sec.req_number("key_retention", _RETENTION_WHY)
    target_field = sec.text("target_field")
    settlement = sec.number("settlement_window", 1.0) if sec.has("settlement_window") else None
    hold_bound = sec.number("hold_bound", 1.0) if sec.has("hold_bound") else None
    rehearsal = sec.number("rehearsal_period", 1.0) if sec.has("rehearsal_period") else None
    model_window = sec.number("model_window", 1.0) if sec.has("model_window") else None
    window_end = _window_end(sec, model_window is not None)
    venue = _venue_contract(sec.table("venue"))
    speculation = speculation_section(sec.table("speculation"))
    retries = sec.integer("retries", 0, minimum=0, maximum=7)
    compensation = sec.text("compensation")
    require_provenance = sec.flag("require_provenance", False)
    repeat_key = repeat_key_section(sec.table("repeat_key"))
    watched = new_target_fields(sec)
    operation_ids = sec.text("operation_ids", "caller", choices=list(OPERATION_ID_MODES))
    try:
        ac = ActionClass(
            name=name,
            model=model,
            adapter=adapter,
            effect_class=effect_class,
            tier_floor=tier_floor,
            visibility_horizon=horizon,
            key_retention=retention,
            schema_versions=frozenset(versions),
            value_of=value_of,
            target_field=target_field,
            settlement_window=settlement,
            hold_bound=hold_bound,
            rehearsal_period=rehearsal,
            model_window=model_window,
            model_window_end=window_end,
            venue=venue,
            speculation=speculation,
            retries=retries,
            compensation=compensation,
            require_provenance=require_provenance,
            repeat_key=repeat_key,
            new_target_fields=watched,
            operation_ids=operation_ids or "caller",
        )
    except EffectgateError as exc:
        # "submit_order: visibility_horizon ...": locate the key the message is about.
        words = exc.message.removeprefix(f"{name}: ").split(maxsplit=1)
        if len(words) == 2 and words[0] in _LOCATED_KEYS:
            sec.fail(words[0], words[1])
        sec.fail(None, exc.message)
    # Declared field lists are assertions: they document the class and catch drift between
    # the config and the model it points at.
    for key, expected, actual in (
        ("effect_fields", expect_effect, [f for f in ac.effect_fields if f != "action"]),
        ("decimal_fields", expect_decimal, list(ac.decimal_fields)),
        ("audit_fields", expect_audit, sorted(AUDIT_FIELDS)),
    ):
        if expected is not None and sorted(expected) != sorted(actual):
            sec.fail(key, f"says {sorted(expected)} but the schema has {sorted(actual)}")
    sec.done()
    return ac


def _window_end(sec: Section, windowed: bool) -> WindowEnd:
    """``model_window_cases``, ``model_window_max_disagreement``, ``model_window_on_fail``."""
    cases = sec.integer("model_window_cases", 1) if sec.has("model_window_cases") else None
    key = "model_window_max_disagreement"
    rate = sec.number(key, 0.0, exclusive=False) if sec.has(key) else None
    if rate is not None and rate > 1:
        sec.fail(key, "must be a rate from 0 to 1")
    on_fail = sec.text("model_window_on_fail", "demote", choices=list(ON_FAIL)) or "demote"
    end = WindowEnd(cases, rate, on_fail)
    if end != WindowEnd() and not windowed:
        sec.fail("model_window", "is required when the class says how its model windows end")
    return end


def _venue_contract(sec: Section | None) -> VenueContract:
    """``[classes.NAME.venue]``: what the venue promises; absent keys are the weakest promise."""
    if sec is None:
        return VenueContract()
    honours = sec.text("honours_key", "unknown", choices=[k.value for k in KeyHonour])
    read_view = sec.text("read_view", "lagging", choices=[r.value for r in ReadView])
    uses_given = sec.flag("sandbox_uses_given_key", False)
    persistence = (
        sec.number("sandbox_key_persistence", 1.0) if sec.has("sandbox_key_persistence") else None
    )
    report = sec.text("conformance_report")
    listing = sec.text("listing", choices=list(LISTING_MODES))
    revisions = [
        (name, value)
        for name in REVISION_NAMES
        if (value := sec.text(f"{name}_revision")) is not None
    ]
    sec.done()
    try:
        return VenueContract(
            honours_key=KeyHonour(honours or "unknown"),
            read_view=ReadView(read_view or "lagging"),
            sandbox_uses_given_key=uses_given,
            sandbox_key_persistence=persistence,
            conformance_report=report,
            listing=listing,
            revisions=tuple(revisions),
        )
    except RegistryError as exc:
        # Name the key the contract refused (the message names the revision).
        key = next(
            (f"{n}_revision" for n in REVISION_NAMES if f"{n}_revision" in exc.message), None
        )
        sec.fail(key, exc.message.removeprefix("venue: "))


def _imported(sec: Section, key: str, ref: str) -> Any:
    try:
        return import_object(ref)
    except ConfigError as exc:
        sec.fail(key, exc.message)


def _policy(sec: Section) -> LimitPolicy:
    sec.text("kind", "limit", choices=["limit"])

    def dec(key: str) -> Decimal | None:
        text = sec.text(key)
        if text is None:
            return None
        try:
            value = Decimal(text)
        except InvalidOperation:
            sec.fail(key, f'{text!r} is not a decimal (write it as a string, e.g. "1000")')
        if not value.is_finite() or value < 0:
            sec.fail(key, "must be a finite decimal >= 0")
        return value

    max_value = dec("max_value")
    approve_above = dec("approve_above")
    targets = sec.text_list("allowed_targets")
    policy = LimitPolicy(
        max_value,
        version=sec.text("version", "limit-1") or "limit-1",
        approve_above=approve_above,
        allowed_targets=frozenset(targets) if targets is not None else None,
    )
    sec.done()
    return policy


def _token(name: str, sec: Section) -> TokenConfig:
    if not re.fullmatch(_CALLER_NAME, name):
        # The name is the caller's identity in the audit log (proposer, approver, operator).
        sec.fail(None, f"token name must match {_CALLER_NAME}")
    if sec.has("token") or sec.has("value"):
        sec.fail(
            "token" if sec.has("token") else "value",
            'plaintext tokens never go in the config file; store sha256 = "<hex>" or env = "VAR"',
        )
    role = sec.req_text("role", choices=["agent", "operator"])
    scope = sec.req_text("scope")
    if not (scope == "*" and role == "operator") and not SCOPE_PATTERN.fullmatch(scope):
        sec.fail(
            "scope",
            f"must match {SCOPE_PATTERN.pattern}"
            + (' (or "*" for an operator of every scope)' if role == "operator" else ""),
        )
    digest = sec.text("sha256", pattern=r"[0-9a-f]{64}")
    env = sec.text("env", pattern=_ENV_NAME)
    if (digest is None) == (env is None):
        sec.fail("sha256", 'give exactly one of sha256 = "<hex digest>" or env = "VAR"')
    if env is not None:
        value = os.environ.get(env)
        if not value:
            sec.fail("env", f"environment variable {env} is not set or empty")
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
    limit = (
        _rate(sec.table("rate_limit"), ServiceSettings().rate_limit)
        if sec.has("rate_limit")
        else None
    )
    sec.done()
    if digest is None:  # unreachable: one of the two is set
        sec.fail("sha256", "is required")
    return TokenConfig(name=name, role=role, scope=scope, sha256=digest, rate_limit=limit)


def _capped(sec: Section, key: str, default: float, *, exclusive: bool = True) -> float:
    """A timeout of one adapter call: above the ceiling (docs/continuations.md) is refused."""
    from effectgate._execute.adapter import ADAPTER_CALL_CEILING

    value = sec.number(key, default, exclusive=exclusive)
    if value > ADAPTER_CALL_CEILING:
        sec.fail(
            key, f"{value:g}s is above the {ADAPTER_CALL_CEILING:g}s ceiling on one adapter call"
        )
    return value


def _check_compensations(top: Section, registry: Registry) -> None:
    """Every declared compensation names a registered mutation class (docs/continuations.md)."""
    from effectgate._core.effects import check_compensations

    try:
        check_compensations(
            {
                n: (registry.get(n).effect_class.value, registry.get(n).compensation)
                for n in registry.names()
            }
        )
    except ConfigError as exc:
        top.fail("classes", exc.message)
