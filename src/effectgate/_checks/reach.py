"""``effectgate verify --from-agent``: run in the agent's environment, it fails when a venue the
config names can be reached from there (seed 001: the adapter alone holds the path to the venue).

A TCP connection that opens is the failure: the agent could bypass the boundary. Refused, timed
out or unresolvable is the pass. Adapters with no network venue (``paper``, ``python``) are n/a.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from effectgate._checks._check import FAIL, NA, PASS, Check
from effectgate._service._config import AdapterConfig, ServiceConfig

__all__ = ["GUARANTEE", "VenueAddress", "reach_checks", "venue_address"]

GUARANTEE = "venue-unreachable-from-agent"

#: Where a real venue is when the config gives no endpoint (the SDKs' defaults).
_STRIPE = "https://api.stripe.com"


@dataclass(frozen=True, slots=True)
class VenueAddress:
    host: str
    port: int
    source: str


def venue_address(adapter: AdapterConfig) -> VenueAddress | None:
    """The host and port ``adapter`` reaches its venue at; None for an in-process venue."""
    opts: Mapping[str, object] = adapter.options
    if adapter.kind == "email":
        host, port = opts.get("host"), opts.get("port", 25)
        if not isinstance(host, str) or not isinstance(port, int):
            return None
        return VenueAddress(host, port, "options.host/port")
    url = adapter.endpoint
    source = "endpoint"
    if url is None and adapter.kind == "stripe":
        url, source = _STRIPE, "Stripe's default endpoint"
    if url is None and adapter.kind == "aws":
        region = opts.get("region")
        if not isinstance(region, str):
            return None
        url, source = f"https://ec2.{region}.amazonaws.com", "EC2's regional endpoint"
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.hostname is None:
        return None
    default = 443 if parts.scheme == "https" else 80
    return VenueAddress(parts.hostname, parts.port or default, source)


Connect = Callable[[str, int, float], None]


def _connect(host: str, port: int, timeout: float) -> None:
    with socket.create_connection((host, port), timeout=timeout):
        pass


def reach_checks(
    cfg: ServiceConfig, *, timeout: float = 3.0, connect: Connect = _connect
) -> list[Check]:
    """One check per configured adapter: ``fail`` when its venue accepts a connection."""
    out: list[Check] = []
    for name in sorted(cfg.adapters):
        address = venue_address(cfg.adapters[name])
        if address is None:
            out.append(Check(GUARANTEE, name, NA, "no network venue to reach (in process)"))
            continue
        where = f"{address.host}:{address.port} ({address.source})"
        try:
            connect(address.host, address.port, timeout)
        except OSError as exc:  # refused, unreachable, timed out, unresolvable: blocked
            out.append(Check(GUARANTEE, name, PASS, f"{where} not reachable: {_why(exc)}"))
            continue
        out.append(
            Check(
                GUARANTEE,
                name,
                FAIL,
                f"{where} accepts connections from here: an agent here can reach the venue "
                "without effectgate (docs/deployment.md, the network policy)",
            )
        )
    return out


def _why(exc: OSError) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return "name does not resolve"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return type(exc).__name__
