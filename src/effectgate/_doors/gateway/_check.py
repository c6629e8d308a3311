"""``effectgate check --config gateway.toml``: will ``effectgate gateway`` start, and what may it
claim about each governed tool?

It asks every upstream for its tools (as the gateway does at start), binds the config to them,
checks the store like the service's preflight, and for each governed tool gives its schema pin
status, its venue contract and the delivery claim read from its conformance report (the kit
report of adapter ``mcp-upstream``), exactly as ``check`` does for a service's classes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mcp_types as types

from effectgate._doors.gateway._config import bind, load_gateway
from effectgate._doors.gateway._upstream import UpstreamLink

__all__ = ["GatewayCheck", "gateway_check"]


@dataclass(frozen=True)
class GatewayCheck:
    problems: tuple[str, ...]
    summary: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.problems


def gateway_check(path: str, *, connect: bool = False) -> GatewayCheck:
    """Check a gateway config file; ConfigError for a file that does not parse."""
    from effectgate._doors._shared.check_view import class_summary
    from effectgate._service import preflight
    from effectgate._service._venues import config_claims

    cfg = load_gateway(path)
    problems: list[str] = []
    listings: dict[str, list[types.Tool]] = {}
    for name, spec in cfg.upstreams.items():
        link = UpstreamLink(spec)
        try:
            listings[name] = link.list_tools()
        except Exception as exc:  # an upstream that does not start or answer: say which
            problems.append(
                f"{cfg.path}: upstreams.{name}: cannot list its tools ({type(exc).__name__})"
            )
        finally:
            link.close()
    if problems:
        return GatewayCheck(tuple(problems), {})
    bound = bind(cfg, listings, base_dir=Path(path).resolve().parent)
    service = bound.service
    # The store and the extras as serve checks them; the upstream calls are not built adapters.
    checked = preflight(replace(service, adapters={}), connect=connect)
    problems += checked.problems
    claims = config_claims(service)
    classes: dict[str, Any] = {}
    for ac in service.registry:
        binding = bound.bindings[ac.name]
        classes[ac.name] = {
            "upstream": cfg.tools[ac.name].upstream,
            "upstream_tool": binding.tool,
            "schema": "pinned",
            **class_summary(
                ac,
                claims[ac.name],
                policy=ac.name in service.policy_names,
                dispatch_timeout=service.service.dispatch_timeout,
                in_flight_grace=service.service.in_flight_grace,
                listing="key_order" if binding.reads is not None else "probe",
            ),
        }
    held = {
        name: {"pinned": pin, "live": live, "upstream": cfg.tools[name].upstream}
        for name, (pin, live) in bound.held.items()
    }
    summary = {
        "store": service.store.url.split("://")[0],
        "checked": list(checked.notes),
        "upstreams": {
            name: {"tools": len(listings[name]), "transport": "http" if spec.url else "stdio"}
            for name, spec in cfg.upstreams.items()
        },
        "classes": classes,
        "held": held,
        "passthrough": sorted(bound.passthrough),
    }
    return GatewayCheck(tuple(problems), summary)
