"""What the gateway adds to an MCP tool call, measured against calling the upstream directly.

    python -m effectgate.bench.gateway_compare --n 300 [--store postgresql://...]

One upstream MCP server (written with the official SDK, started over stdio) with a keyed
``place_order``. In alternating rounds, in one process:

* direct: the SDK's client calls ``place_order`` on the upstream (what an agent does today);
* gateway: the SDK's client calls the gateway's server in memory, which parses, decides,
  journals ``submitted`` (one commit), calls the same upstream over stdio and journals the
  receipt (a second commit): the whole boundary.

It prints calls/s (one caller, back to back; connecting not counted) and p50/p99 per call for
both, and the gateway's added milliseconds at p50.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_UPSTREAM = """
import json, os, pathlib
from typing import Any
from mcp.server.mcpserver import MCPServer
STATE = pathlib.Path(os.environ["BENCH_STATE"])
seen: dict[str, dict[str, Any]] = {}
server = MCPServer("bench-shop")

@server.tool()
def place_order(sku: str, quantity: int, amount: str, idempotency_key: str) -> dict[str, Any]:
    if idempotency_key not in seen:
        seen[idempotency_key] = {"order_id": f"ord-{len(seen) + 1}",
                                 "idempotency_key": idempotency_key}
    return seen[idempotency_key]

@server.tool()
def list_orders() -> dict[str, Any]:
    return {"orders": list(seen.values())}

server.run("stdio")
"""

_ARGS: dict[str, Any] = {"sku": "WIDGET-1", "quantity": 2, "amount": "19.90"}


def _config(tmp: Path, script: Path, store: str, pin: str) -> str:
    return f"""
[service]
dispatch_timeout = 30
reconcile_interval = 0
dispatch_interval = 0
rate_limit = {{ per_second = 1000000, burst = 1000000 }}

[store]
url = "{store}"

[upstreams.shop]
command = "{sys.executable}"
args = ["{script}"]
env = {{ BENCH_STATE = "BENCH_STATE" }}
timeout = 30

[tools.place_order]
upstream = "shop"
schema_sha256 = "{pin}"
effect_class = "idempotent_mutation"
visibility_horizon = 5
key_retention = 86400
key_argument = "idempotency_key"
id_field = "order_id"
value_field = "amount"
[tools.place_order.fields.sku]
pattern = "^[A-Z0-9-]{{1,32}}$"
[tools.place_order.fields.amount]
format = "positive-decimal"
[tools.place_order.reads]
list_tool = "list_orders"
items_field = "orders"
key_field = "idempotency_key"
id_field = "order_id"

[policies.place_order]
max_value = "1000000"
"""


def run(n: int, store: str | None, rounds: int) -> dict[str, Any]:
    import anyio
    from mcp import Client, StdioServerParameters

    from effectgate._core.principals import Role
    from effectgate._doors.gateway import (
        Gateway,
        UpstreamLink,
        UpstreamSpec,
        build_gateway_server,
        parse_gateway,
        schema_digest,
    )
    from effectgate._service import Principal
    from effectgate.bench.common import summarise

    tmp = Path(tempfile.mkdtemp(prefix="eg-gw-bench-"))
    script = tmp / "upstream.py"
    script.write_text(_UPSTREAM)
    os.environ["BENCH_STATE"] = str(tmp / "state.json")
    spec = UpstreamSpec("pin", command=sys.executable, args=(str(script),),
                        env={"BENCH_STATE": "BENCH_STATE"})  # fmt: skip
    link = UpstreamLink(spec)
    try:
        pin = schema_digest({t.name: t for t in link.list_tools()}["place_order"].input_schema)
    finally:
        link.close()
    url = store or f"sqlite:///{tmp}/gateway.db"
    gw = Gateway(parse_gateway(_config(tmp, script, url, pin), "bench.toml"), create=True)
    who = Principal("bench", Role.AGENT, f"b{int(time.time())}")
    direct: list[float] = []
    gated: list[float] = []

    async def direct_round(prefix: str) -> None:
        params = StdioServerParameters(
            command=sys.executable, args=[str(script)], env={"BENCH_STATE": str(tmp)}
        )
        async with Client(params) as c:
            for i in range(n):
                t0 = time.perf_counter()
                res = await c.call_tool(
                    "place_order", {**_ARGS, "idempotency_key": f"{prefix}-{i}"}
                )
                direct.append(time.perf_counter() - t0)
                if res.is_error:
                    raise RuntimeError("direct call failed")

    async def gateway_round(prefix: str) -> None:
        async with Client(build_gateway_server(gw, who)) as c:
            for i in range(n):
                t0 = time.perf_counter()
                res = await c.call_tool("place_order", {**_ARGS, "operation_id": f"{prefix}-{i}"})
                gated.append(time.perf_counter() - t0)
                if (res.structured_content or {}).get("state") != "acknowledged":
                    raise RuntimeError(f"gateway call not acknowledged: {res.structured_content}")

    try:
        for r in range(rounds):
            anyio.run(direct_round, f"d{r}")
            anyio.run(gateway_round, f"g{r}")
    finally:
        gw.close()
    d, g = summarise(direct), summarise(gated)
    return {
        "store": url.split(":", 1)[0],
        "calls_per_round": n,
        "rounds": rounds,
        # One caller, calls back to back (connecting and starting the upstream not counted).
        "direct": {**d, "calls_per_s": round(len(direct) / sum(direct), 1)},
        "gateway": {**g, "calls_per_s": round(len(gated) / sum(gated), 1)},
        "added_p50_ms": round(g["p50_ms"] - d["p50_ms"], 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300, help="calls per round and side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--store", help="ledger URL (default: a fresh SQLite file)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.n, args.store, args.rounds), indent=2))


if __name__ == "__main__":
    main()
