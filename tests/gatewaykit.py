"""The conformance kit's driver for the MCP gateway's upstream adapter (issues 16 and 19).

The venue is a real upstream MCP server written with the official SDK (``gateway_upstreams.py``),
reached over stdio by the adapter exactly as ``effectgate gateway`` builds it from its config:
``keyed`` honours ``idempotency_key`` and has read tools; ``unkeyed`` takes no key and has no read
view. The driver reaches the venue directly through the upstream's state file (an order made
there is made outside the boundary).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from effectgate._doors.gateway import Gateway, parse_gateway
from effectgate._doors.gateway._adapter import UpstreamAdapter
from effectgate._doors.gateway._upstream import UpstreamLink, UpstreamSpec
from effectgate._execute.adapter import Adapter, OutboundRequest
from effectgate.testing import ConformanceReport, run_conformance

SECRET = "CANARY-gateway-upstream-key-0123456789"


class UpstreamDriver:
    """Requests for one governed tool, and direct access to the upstream's orders or notes."""

    def __init__(self, mode: str, state: Path, adapter: UpstreamAdapter) -> None:
        self.mode = mode
        self.state = state
        self.adapter = adapter
        self.venue = f"SDK MCPServer upstream '{mode}' over stdio (tests/gateway_upstreams.py)"
        self._dead: list[UpstreamLink] = []

    def request(self, operation_key: str) -> OutboundRequest:
        if self.mode == "unkeyed":
            effect: dict[str, str | int | bool] = {
                "action": "send_note",
                "to": "kit@example.test",
                "text": f"kit note {operation_key}",
            }
            return OutboundRequest(operation_key, "send_note", effect)
        effect = {"action": "place_order", "sku": "KIT-1", "quantity": 1, "amount": "1.00"}
        return OutboundRequest(operation_key, "place_order", effect)

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        # An upstream's error result never proves the effect did not happen (the request left):
        # the gateway reports it unknown. It has no provable refusal to offer the kit.
        return None

    def unreachable(self) -> Adapter:
        link = UpstreamLink(UpstreamSpec("dead", url="http://127.0.0.1:9/mcp", timeout=2.0))
        self._dead.append(link)
        return UpstreamAdapter(link, self.adapter.binding, self.adapter.name)

    def direct_effect(self) -> str | None:
        if self.mode == "unkeyed":
            return None  # no read view: nothing the adapter could find
        orders = self._load()
        order = {
            "order_id": f"ord-{len(orders) + 1}",
            "sku": "BY-HAND",
            "quantity": 1,
            "amount": "5.00",
            "idempotency_key": None,
        }
        self.state.write_text(json.dumps([*orders, order]))
        return str(order["order_id"])

    def delivered(self, operation_key: str) -> int | None:
        if self.mode != "unkeyed":
            return None
        return sum(1 for n in self._load() if operation_key in str(n.get("text", "")))

    def secrets(self) -> list[str]:
        return [SECRET]

    def close(self) -> None:
        for link in self._dead:
            link.close()

    def _load(self) -> list[dict[str, Any]]:
        return json.loads(self.state.read_text()) if self.state.exists() else []


@contextmanager
def upstream_under_kit(
    mode: str, tmp: Path, toml: str
) -> Iterator[tuple[Gateway, UpstreamAdapter, UpstreamDriver]]:
    """A gateway built from ``toml`` (its environment set here) and its tool's raw adapter."""
    state = tmp / "shop.json"
    os.environ["GW_SHOP_KEY"] = SECRET
    os.environ["GW_SHOP_STATE"] = str(state)
    os.environ["GW_SHOP_DELAY"] = "4"
    gw = Gateway(parse_gateway(toml, str(tmp / "gw.toml")), create=True)
    try:
        tool = "send_note" if mode == "unkeyed" else "place_order"
        adapter = gw.raw_adapters[tool]
        driver = UpstreamDriver(mode, state, adapter)
        try:
            yield gw, adapter, driver
        finally:
            driver.close()
    finally:
        gw.close()


def run_kit(mode: str, tmp: Path, toml: str) -> ConformanceReport:
    from importlib.metadata import version

    with upstream_under_kit(mode, tmp, toml) as (_, adapter, driver):
        return run_conformance(adapter, driver, horizon=1.0, versions={"mcp": version("mcp")})
