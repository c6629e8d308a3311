"""One line per B5 JSON of the sitting: in-process reference, HTTP and MCP at 16 clients, ratios,
server CPU per request. Usage: python summary.py FILE.json..."""

import json
import sys

for path in sys.argv[1:]:
    doc = json.load(open(path))
    figs = doc["figures"] if isinstance(doc, dict) and "figures" in doc else doc
    row = {}
    for f in figs:
        row[f["variant"]] = f
    http, mcp = row.get("HTTP, 16 clients"), row.get("MCP (streamable HTTP), 16 clients")
    ref = mcp["floor"]
    print(
        f"{path}: in-process {ref:,.0f}/s; HTTP {http['effectgate']:,.0f}/s "
        f"({http['effectgate'] / ref:.2f}x, {http['notes']['server_cpu_us_per_request']:,.0f} us); "
        f"MCP {mcp['effectgate']:,.0f}/s ({mcp['effectgate'] / ref:.2f}x, "
        f"{mcp['notes']['server_cpu_us_per_request']:,.0f} us)"
    )
