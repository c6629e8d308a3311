"""CPU per MCP tools/call through McpHttpMount's ASGI interface, fast path on or off, in process.

Usage: PYTHONPATH=/abs/src:/abs/tests python asgi_prof.py N [fast|sdk] [profile.out]
No HTTP server and no sockets: what the door's own Python costs per call beside the gate's.
"""

import cProfile
import json
import sys
import tempfile
import time

import anyio

sys.path.insert(0, "tests")
from servicekit import AGENT_A, ORDER, config_text  # noqa: E402

from effectgate._doors.mcp.server import McpHttpMount  # noqa: E402
from effectgate._service import Service, parse_config  # noqa: E402
from effectgate.adapters.paper import PaperAdapter, PaperVenue  # noqa: E402


def body(op: str) -> bytes:
    args = {"operation_id": op, **ORDER}
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    msg["params"] = {"name": "submit_order", "arguments": args}
    return json.dumps(msg).encode()


async def post(mount: McpHttpMount, data: bytes) -> None:
    head = [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(data)).encode()),
            (b"authorization", f"Bearer {AGENT_A}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "root_path": "",
             "query_string": b"", "headers": head, "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 8000)}
    sent = [{"type": "http.request", "body": data, "more_body": False}]
    out = []

    async def receive():
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(m):
        out.append(m)

    await mount(scope, receive, send)
    if b'"acknowledged"' not in b"".join(m.get("body", b"") for m in out):
        raise SystemExit(f"not acknowledged: {out}")


def main() -> None:
    n, which = int(sys.argv[1]), sys.argv[2]
    prof_out = sys.argv[3] if len(sys.argv) > 3 else None
    tmp = tempfile.mkdtemp()
    unlimited = "[service.rate_limit]\nper_second = 1000000\nburst = 1000000"
    text = config_text(store_url=f"sqlite:///{tmp}/l.db", service=unlimited)
    cfg = parse_config(text, "t.toml")
    service = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
    mount = McpHttpMount(service, fast_path=which == "fast")

    async def go() -> None:
        async with mount.running():
            for i in range(50):
                await post(mount, body(f"w{i}"))
            prof = cProfile.Profile() if prof_out else None
            t0 = time.process_time()
            if prof:
                prof.enable()
            for i in range(n):
                await post(mount, body(f"a{i}"))
            if prof:
                prof.disable()
                prof.dump_stats(prof_out)
            print(f"{which}: {1e6 * (time.process_time() - t0) / n:.0f} us CPU per call (this thread)")

    anyio.run(go)
    service.close()


if __name__ == "__main__":
    main()
