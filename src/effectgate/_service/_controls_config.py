"""The controls part of the service config: breakers per class, approval rules, the alert sink.

::

    [controls.submit_order]          # the anomaly breaker of one action class
    window = 300                     # seconds of the sliding window
    max_rejection_rate = 0.5         # rejected / decided, once min_samples were seen
    min_samples = 10
    max_window_value = "50000"       # value proposed in the window (needs classes.X.value)
    max_repeats = 3                  # one fingerprint under more than N operation ids
    max_new_targets = 5              # proposals with a never-seen target (see below)

    [classes.submit_order]           # what the class's signals watch (on the class)
    new_target_fields = ["instrument", "account"]   # default: target_field; one name also works

    [classes.submit_order.repeat_key]               # repeats counted by near-identical effect
    buckets = { quantity = "0.1" }   # numeric field -> bucket size (a decimal string > 0)
    normalise = ["strategy_id"]      # text fields: NFKC, casefolded, whitespace collapsed

    [approvals]
    multi_approvers = 2              # distinct approvers a multi_approve class needs
    ttl = 86400                      # seconds an approval stays open

    [alerts]
    webhook = "http://127.0.0.1:9000/hook"   # optional; alerts are always logged at ERROR
    timeout = 5

Validated with the rest of the file: an unknown class, a threshold the class could never
measure or a malformed value is an error naming the key and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from urllib.parse import urlsplit

from effectgate._core.controls import ApprovalRules, BreakerConfig
from effectgate._core.intent import Registry
from effectgate._core.signals import RepeatKey, bucket_size
from effectgate._service._toml import Section
from effectgate.errors import ConfigError, ControlError

__all__ = [
    "AlertsConfig",
    "alerts_section",
    "approvals_section",
    "breaker_section",
    "new_target_fields",
    "repeat_key_section",
]


@dataclass(frozen=True)
class AlertsConfig:
    """Where alerts go besides the ERROR log: a webhook URL, or nowhere (log only)."""

    webhook: str | None = None
    timeout: float = 5.0


def breaker_section(name: str, sec: Section, registry: Registry) -> BreakerConfig:
    if name not in registry:
        sec.fail(None, f"no action class named {name!r}")
    ac = registry.get(name)
    d = BreakerConfig()
    window = sec.number("window", d.window)
    rate = sec.raw("max_rejection_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        sec.fail("max_rejection_rate", "must be a number in [0, 1)")
    min_samples = sec.integer("min_samples", d.min_samples, minimum=1)
    value_text = sec.text("max_window_value")
    value: Decimal | None = None
    if value_text is not None:
        if ac.value_of is None:
            sec.fail(
                "max_window_value",
                f"class {name!r} declares no value measure "
                f"(classes.{name}.value), so this threshold could never be checked",
            )
        try:
            value = Decimal(value_text)
        except InvalidOperation:
            sec.fail("max_window_value", f"{value_text!r} is not a decimal")
    repeats = sec.raw("max_repeats")
    new_targets = sec.raw("max_new_targets")
    if new_targets is not None and not ac.watched_fields:
        sec.fail(
            "max_new_targets",
            f"class {name!r} declares no target_field or new_target_fields, "
            "so new targets could never be seen",
        )
    fields = {
        "window": "window",
        "max_rejection_rate": "max_rejection_rate",
        "min_samples": "min_samples",
        "max_value": "max_window_value",
        "max_repeats": "max_repeats",
        "max_new_targets": "max_new_targets",
    }
    try:
        cfg = BreakerConfig(
            window=window,
            max_rejection_rate=rate,
            min_samples=min_samples,
            max_value=value,
            max_repeats=repeats,
            max_new_targets=new_targets,
        )
    except ControlError as exc:
        key = fields.get(exc.field or "")
        sec.fail(key, exc.message.split(": ", 1)[-1])
    if all(
        v is None
        for v in (cfg.max_rejection_rate, cfg.max_value, cfg.max_repeats, cfg.max_new_targets)
    ):
        sec.fail(
            None,
            "a breaker needs at least one of max_rejection_rate, max_window_value, "
            "max_repeats, max_new_targets",
        )
    sec.done()
    return cfg


def repeat_key_section(sec: Section | None) -> RepeatKey | None:
    """``[classes.NAME.repeat_key]``: ``buckets`` (a table of decimal strings) and
    ``normalise`` (a list of text fields); absent: repeats are counted by fingerprint."""
    if sec is None:
        return None
    buckets = sec.table("buckets")
    sizes: dict[str, Decimal] = {}
    if buckets is not None:
        for field in buckets.names():
            raw = buckets.raw(field)
            try:
                sizes[field] = bucket_size(field, raw)
            except ConfigError as exc:
                buckets.fail(field, exc.message.split(": ", 1)[-1])
    normalise = sec.text_list("normalise") or []
    sec.done()
    try:
        return RepeatKey(buckets=sizes, normalise=tuple(normalise))
    except ConfigError as exc:
        where, _, why = exc.message.partition(": ")
        sec.fail(where if where in ("buckets", "normalise") else None, why)


def new_target_fields(sec: Section) -> tuple[str, ...]:
    """``new_target_fields``: one field name, or a list of them (absent: ``target_field``)."""
    raw = sec.raw("new_target_fields")
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
        sec.fail("new_target_fields", "must be a field name or a non-empty list of field names")
    return tuple(raw)


def approvals_section(sec: Section | None) -> ApprovalRules:
    if sec is None:
        return ApprovalRules()
    d = ApprovalRules()
    try:
        rules = ApprovalRules(
            multi_approvers=sec.integer(
                "multi_approvers", d.multi_approvers, minimum=2, maximum=16
            ),
            ttl=sec.number("ttl", d.ttl),
        )
    except ControlError as exc:  # pragma: no cover - the getters check the same bounds
        sec.fail(exc.field, exc.message)
    sec.done()
    return rules


def alerts_section(sec: Section | None) -> AlertsConfig:
    if sec is None:
        return AlertsConfig()
    webhook = sec.text("webhook")
    if webhook is not None:
        parts = urlsplit(webhook)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            sec.fail("webhook", f"{webhook!r} is not an http(s) URL")
        if parts.username or parts.password:
            sec.fail(
                "webhook",
                "credentials never go in the config file; use a webhook URL without user:password",
            )
    cfg = AlertsConfig(webhook=webhook, timeout=sec.number("timeout", 5.0))
    sec.done()
    return cfg
