"""The real venues' adapters in the config file: ``kind = "stripe" | "aws" | "email"``.

Each reads its credential from ``credential_env``, ``credential_file`` or ``credential_hook``
(a ``"module:function"`` secrets-manager hook), never from the file itself; everything else is
in ``[adapters.NAME.options]``. The extras are imported only when such an adapter is built.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from effectgate._execute.adapter import Adapter
from effectgate.errors import ConfigError

__all__ = [
    "VENUE_KINDS",
    "DeliveryCollector",
    "build_venue_adapter",
    "class_claims",
    "config_claims",
    "listing_problems",
]

#: kind -> (module, class, extra)
VENUE_KINDS = {
    "stripe": ("effectgate.adapters.stripe", "StripeAdapter", "stripe"),
    "aws": ("effectgate.adapters.aws", "Ec2Adapter", "aws"),
    "email": ("effectgate.adapters.email", "EmailAdapter", "email"),
}
_LIBRARY = {"stripe": "stripe", "aws": "boto3", "email": "smtplib"}


def build_venue_adapter(
    name: str,
    kind: str,
    *,
    endpoint: str | None,
    credential: dict[str, str | None],
    timeout: float,
    options: dict[str, Any],
) -> Adapter:
    module, cls, extra = VENUE_KINDS[kind]
    if importlib.util.find_spec(_LIBRARY[kind]) is None:
        raise ConfigError(
            f"adapters.{name}: {_LIBRARY[kind]} not installed: pip install 'effectgate[{extra}]'"
        )
    factory = getattr(importlib.import_module(module), cls)
    kwargs: dict[str, Any] = {**options, **{k: v for k, v in credential.items() if v is not None}}
    if kind != "email":
        kwargs["endpoint"] = endpoint
    kwargs["timeout"] = timeout
    try:
        made = factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"adapters.{name}: {exc}") from None
    if not isinstance(made, Adapter):  # pragma: no cover - our own classes
        raise ConfigError(f"adapters.{name}: {cls} did not build an Adapter")
    return made


def class_claims(
    registry: Any, config_path: str, kinds: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Per action class: what ``check`` may claim about delivery, and why (see _conformance).

    ``kinds``: adapter name -> its kind (what a report names). A relative
    ``conformance_report`` path is read from the config file's folder.
    """
    from pathlib import Path

    from effectgate.adapters.conformance.kit import delivery_claim

    base = Path(config_path).parent
    out: dict[str, dict[str, str]] = {}
    for ac in registry:
        report = ac.venue.conformance_report
        if report is not None and not Path(report).is_absolute():
            report = str(base / report)
        claim, why = delivery_claim(
            ac.venue.honours_key.value, report, kinds.get(ac.adapter, ac.adapter)
        )
        out[ac.name] = {"claim": claim, "why": why}
    return out


def config_claims(cfg: Any) -> dict[str, dict[str, str]]:
    """:func:`class_claims` for a loaded :class:`ServiceConfig`."""
    return class_claims(cfg.registry, cfg.path, {n: a.kind for n, a in cfg.adapters.items()})


class DeliveryCollector:
    """``effectgate_exactly_once{action}``: 1 where exactly-once is claimed (declared and
    verified by a conformance report, as ``check`` says), 0 for at-most-once dispatch with
    reconciliation. Read once at start: the config and its reports do not change under a
    running service."""

    def __init__(self, claims: dict[str, dict[str, str]]) -> None:
        self._claims = claims

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        from effectgate.adapters.conformance.kit import EXACTLY_ONCE

        gauge = GaugeMetricFamily(
            "effectgate_exactly_once",
            "1 where the venue's key honour is declared and verified by a conformance report",
            labels=["action"],
        )
        for action, c in sorted(self._claims.items()):
            gauge.add_metric([action], 1 if c["claim"] == EXACTLY_ONCE else 0)
        yield gauge


def listing_problems(cfg: Any, build: Any) -> list[tuple[str, str]]:
    """``(class name, problem)`` for every class whose declared ``[classes.NAME.venue]
    listing`` is not how its adapter lists (``build``: the service's adapter factory)."""
    out: list[tuple[str, str]] = []
    built: dict[str, str] = {}
    for ac in cfg.registry:
        declared = ac.venue.listing
        if declared is None or ac.adapter not in cfg.adapters:
            continue
        if ac.adapter not in built:
            try:
                adapter = build(cfg.adapters[ac.adapter])
            except Exception as exc:  # a user's factory may raise anything
                # The adapter's own check reports why it cannot be built; nothing to compare.
                built[ac.adapter] = f"unbuildable ({type(exc).__name__})"
                continue
            built[ac.adapter] = adapter.listing.value
            adapter.close()
        if built[ac.adapter].startswith("unbuildable"):
            continue
        if built[ac.adapter] != declared:
            out.append(
                (
                    ac.name,
                    f"declares listing {declared!r} but adapter {ac.adapter!r} lists by "
                    f"{built[ac.adapter]!r} (docs/adapters.md)",
                )
            )
    return out
