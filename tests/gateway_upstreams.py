"""Real upstream MCP servers for the gateway tests, written with the official SDK (MCPServer).

Run as ``python gateway_upstreams.py MODE`` (stdio) or ``... MODE --http PORT`` (streamable
HTTP on 127.0.0.1). Orders live in the JSON file named by ``SHOP_STATE``, so a restarted server
(after ``dying``) still has them; every mode requires ``SHOP_API_KEY`` (the credential the
gateway holds).

* ``keyed``: ``place_order`` honours ``idempotency_key`` (a key seen before returns the first
  order); ``list_orders`` and ``get_order`` read the orders.
* ``unkeyed``: ``send_note`` has no key, dedups nothing and cannot be listed.
* ``slow``: like ``keyed`` but ``place_order`` records the order, then answers after
  ``SHOP_DELAY`` seconds.
* ``dying``: like ``keyed`` but ``place_order`` records the order, then the process exits
  without answering (once: a marker file stops it dying again).
* ``drifted``: like ``keyed`` but ``place_order`` has an extra ``currency`` argument (also
  any mode, once a ``.upgrade`` file sits beside the state file when the server starts).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

MODE = sys.argv[1]
STATE = Path(os.environ["SHOP_STATE"])
if STATE.with_suffix(".upgrade").exists():
    MODE = "drifted"  # the operator's shop was upgraded: a restart serves the new schema
if not os.environ.get("SHOP_API_KEY"):
    sys.exit("SHOP_API_KEY is not set")  # the gateway passes its credential


def _load() -> list[dict[str, Any]]:
    return json.loads(STATE.read_text()) if STATE.exists() else []


def _save(orders: list[dict[str, Any]]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(orders))
    tmp.replace(STATE)


def _place(sku: str, quantity: int, amount: str, key: str | None) -> dict[str, Any]:
    orders = _load()
    if key is not None and MODE != "unkeyed":
        for order in orders:
            if order["idempotency_key"] == key:
                return order
    order = {
        "order_id": f"ord-{len(orders) + 1}",
        "sku": sku,
        "quantity": quantity,
        "amount": amount,
        "idempotency_key": key,
    }
    orders.append(order)
    _save(orders)
    return order


server = MCPServer(f"shop-{MODE}")

if MODE == "unkeyed":

    @server.tool()
    def send_note(to: str, text: str) -> dict[str, Any]:
        """Send a note (no key: every call sends one)."""
        notes = _load()
        notes.append({"to": to, "text": text})
        _save(notes)
        return {"note_id": f"note-{len(notes)}"}

elif MODE == "drifted":

    @server.tool()
    def place_order(
        sku: str, quantity: int, amount: str, currency: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Place an order (a newer version: a currency argument)."""
        return _place(sku, quantity, amount, idempotency_key)

else:

    @server.tool()
    def place_order(sku: str, quantity: int, amount: str, idempotency_key: str) -> dict[str, Any]:
        """Place an order. A key seen before returns the order it made."""
        order = _place(sku, quantity, amount, idempotency_key)
        if MODE == "slow":
            time.sleep(float(os.environ.get("SHOP_DELAY", "3")))
        if MODE == "dying":
            marker = STATE.with_suffix(".died")
            if not marker.exists():
                marker.write_text("1")
                os._exit(1)  # recorded, never answered
        return order


if MODE != "unkeyed":

    @server.tool()
    def list_orders() -> dict[str, Any]:
        """Every order."""
        return {"orders": _load()}

    @server.tool()
    def get_order(idempotency_key: str) -> dict[str, Any]:
        """The orders placed under one key."""
        return {"orders": [o for o in _load() if o["idempotency_key"] == idempotency_key]}

    @server.tool()
    def cancel_all() -> dict[str, Any]:
        """A tool the gateway config does not name: it must stay hidden."""
        _save([])
        return {"cancelled": True}


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run("stdio")
