"""B5: the HTTP API (and the MCP door) under concurrent load from a separate process.

The service runs as ``effectgate serve`` in its own process (uvicorn, one worker) on a fresh
ledger in the target store, with the in-process paper venue; rate limits are lifted and the
standing reconciler is off so only the request path is measured. A second process drives it
with C concurrent keep-alive clients (asyncio, HTTP/1.1 written by hand), each POSTing intents
under fresh ``Idempotency-Key`` values, and reports throughput and per-request latency. Every
request must answer 201 with an acknowledged operation: anything else fails the run.

The reference ("floor" column) is in-process B1 on the same kind of store, measured in the same
run just before: ``Gate.submit`` in a loop on a fresh ledger, one thread, no HTTP. The ratio says
what the door keeps of what the library does alone (target: 0.5x at 16 clients). The MCP path is
the same service's ``/mcp`` (streamable HTTP, stateless, JSON answers): each request a
``tools/call`` of ``submit_order`` with a fresh ``operation_id``, the same 16 clients.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from effectgate.bench.common import Figure, Target, summarise
from effectgate.errors import StoreError

__all__ = ["CLIENTS", "SERVE_ARGS", "load_report", "run"]

CLIENTS = (16, 64)
#: How the benchmark starts the server (``effectgate serve`` options): no access log, so what
#: is measured is the request path, not a log line per request.
SERVE_ARGS = ("--no-access-log",)

#: An order for the starter config's ``submit_order`` class (what ``effectgate init`` writes).
BODY = (
    b'{"intent_version": "1", "action": "submit_order", "instrument": "XYZ-PERP", '
    b'"side": "buy", "quantity": "4", "limit_price": "100.00", '
    b'"rationale": "B5 load", "context_digest": "sha256:0123456789abcdef"}'
)


def run(target: Target, n: int, *, smoke: bool = False) -> list[Figure]:
    alone = in_process(target, n)
    figures = []
    for clients in CLIENTS:
        service = _service(target, f"b5c{clients}")
        with service as (url, token):
            doors = ("http", "mcp") if clients == CLIENTS[0] else ("http",)
            for door in doors:
                before = service.cpu_seconds()
                fig = _drive(url, token, clients, max(n, clients), alone=alone, door=door)
                # The server's own CPU per request (user + system), beside the wall clock:
                # what the door costs, whatever else the machine runs.
                fig.notes["server_cpu_us_per_request"] = round(
                    1e6 * (service.cpu_seconds() - before) / fig.notes["n"], 1
                )
                figures.append(fig)
    return figures


def in_process(target: Target, n: int) -> float:
    """Actions/s of ``Gate.submit`` alone on a fresh ledger in ``target`` (B1's action)."""
    from effectgate._core.states import State
    from effectgate.adapters.paper import PaperAdapter, PaperVenue
    from effectgate.bench.common import INTENT_BODY, bench_gate
    from effectgate.store import open_store

    if target.dialect == "sqlite":
        cm: Any = target.sqlite_file("b5-alone")
        url = f"sqlite:///{cm.__enter__()}"
    else:
        cm = target.pg_schema("b5alone")
        url = cm.__enter__()
    try:
        store = open_store(url, create=True)
        try:
            gate = bench_gate(store, PaperAdapter(PaperVenue()))
            for i in range(50):  # warm-up, outside the clock
                gate.submit("submit_order", f"w{i}", INTENT_BODY)
            t0 = time.perf_counter()
            for i in range(n):
                if (
                    gate.submit("submit_order", f"a{i}", INTENT_BODY).state
                    is not State.ACKNOWLEDGED
                ):
                    raise StoreError(f"B5 reference action a{i} was not acknowledged")
            return n / (time.perf_counter() - t0)
        finally:
            store.close()
    finally:
        cm.__exit__(None, None, None)


class _service:
    """``effectgate serve`` on a free loopback port with a starter config aimed at ``target``."""

    def __init__(
        self,
        target: Target,
        name: str,
        serve_args: tuple[str, ...] = SERVE_ARGS,
        *,
        venue_latency: float = 0.0,
        pool_max_size: int | None = None,
    ) -> None:
        self.target, self.name, self.serve_args = target, name, serve_args
        self.venue_latency, self.pool_max_size = venue_latency, pool_max_size

    def __enter__(self) -> tuple[str, str]:
        from effectgate._service import write_starter

        self._tmp = tempfile.TemporaryDirectory(prefix="effectgate-b5-")
        folder = Path(self._tmp.name)
        starter = write_starter(folder)
        if self.target.dialect == "sqlite":
            self._store_cm: Any = self.target.sqlite_file(self.name)
            store_url = f"sqlite:///{self._store_cm.__enter__()}"
        else:
            self._store_cm = self.target.pg_schema(self.name)
            store_url = self._store_cm.__enter__()
        port = _free_port()
        text = starter.config.read_text(encoding="utf-8")
        text = re.sub(r"(?m)^port = \d+", f"port = {port}", text)
        text = re.sub(r"(?m)^reconcile_interval = [\d.]+", "reconcile_interval = 0", text)
        text = re.sub(r"(?m)^mcp_http = false", "mcp_http = true", text)
        text = re.sub(r"(?m)^per_second = \d+", "per_second = 1000000", text)
        text = re.sub(r"(?m)^burst = \d+", "burst = 1000000", text)
        text = re.sub(r'(?m)^url = "sqlite:///effectgate.db"', f'url = "{store_url}"', text)
        if self.venue_latency:
            text = text.replace(
                '[adapters.paper]\nkind = "paper"\n',
                f'[adapters.paper]\nkind = "paper"\nlatency = {self.venue_latency!r}\n',
            )
        if self.pool_max_size and self.target.dialect == "postgresql":
            text = text.replace(
                f'url = "{store_url}"', f'url = "{store_url}"\npool_max_size = {self.pool_max_size}'
            )
        starter.config.write_text(text, encoding="utf-8")
        token = _agent_token(store_url)
        # The service's log (an access line per request at INFO) goes to a file: a pipe nobody
        # reads fills up and blocks the server in the middle of the run.
        self._log = open(folder / "serve.log", "wb")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "effectgate",
                "serve",
                "--config",
                str(starter.config),
                *self.serve_args,
            ],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, self._proc, folder / "serve.log")
        return url, token

    def cpu_seconds(self) -> float:
        """CPU time the server and its workers have used so far (user + system; Linux /proc)."""
        pid = self._proc.pid
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return sum(_cpu_of(p) for p in (pid, *map(int, kids)))

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()
        self._store_cm.__exit__(None, None, None)
        self._tmp.cleanup()


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # a worker gone since the listing
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _agent_token(store_url: str) -> str:
    """An agent token in the benchmark's ledger (the starter's tokens are in its own)."""
    from effectgate._service import os_actor
    from effectgate.store import open_store

    ledger = open_store(store_url, create=True)
    try:
        return ledger.create_principal(
            "b5-agent", "agent", "default", created_by=os_actor(), now=time.time()
        ).token
    finally:
        ledger.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = log.read_text(errors="replace")
            raise StoreError(f"B5: effectgate serve exited with {proc.returncode}: {err[-500:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise StoreError("B5: effectgate serve did not become healthy within 30 s")


def _drive(
    url: str, token: str, clients: int, n: int, *, alone: float | None = None, door: str = "http"
) -> Figure:
    """Run the load generator in its own process and turn its report into a figure."""
    result = load_report(url, token, clients, n, door=door)
    notes = {
        "clients": clients,
        "n": n,
        "reference": "in-process B1, same store",
        **summarise(result["lat"]),
    }
    label = "HTTP" if door == "http" else "MCP (streamable HTTP)"
    return Figure(
        "B5", f"{label}, {clients} clients", "actions/s", n / result["seconds"], alone, notes
    )


def load_report(
    url: str, token: str, clients: int, n: int, *, door: str = "http"
) -> dict[str, Any]:
    """``n`` requests from ``clients`` keep-alive connections, driven from a process of its own:
    ``{"seconds": wall clock, "lat": [per-request seconds]}``; any failed request fails the run."""
    ctx = mp.get_context("spawn")
    out: Queue[dict[str, Any]] = ctx.Queue()
    proc = ctx.Process(target=_load, args=(url, token, clients, n, out, door))
    proc.start()
    result = out.get(timeout=600)
    proc.join(timeout=30)
    if result.get("error"):
        raise StoreError(f"{door} load at {clients} clients: {result['error']}")
    return result


def _load(
    url: str, token: str, clients: int, n: int, out: Queue[dict[str, Any]], door: str = "http"
) -> None:
    """The load generator's process: ``clients`` keep-alive connections, ``n`` requests."""
    try:
        out.put(asyncio.run(_load_async(url, token, clients, n, door)))
    except Exception as exc:  # report, never hang the parent
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def _mcp_call(op: str) -> bytes:
    """A ``tools/call`` of ``submit_order`` carrying B5's order under operation id ``op``."""
    import json

    args = {**json.loads(BODY), "operation_id": op}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "submit_order", "arguments": args},
    }
    return json.dumps(call).encode()


def _failure(door: str, status: int, body: bytes) -> str | None:
    """Why an answer is not an acknowledged operation (None: it is)."""
    import json

    if door == "mcp":
        result = json.loads(body).get("result") or {} if status == 200 else {}
        state = (result.get("structuredContent") or {}).get("state")
        ok = state == "acknowledged" and not result.get("isError")
    else:
        ok = status == 201 and json.loads(body).get("state") == "acknowledged"
    return None if ok else f"{status} {body[:200]!r}"


class _Client:
    """One keep-alive HTTP/1.1 connection, written by hand: an HTTP library in the load
    generator costs several hundred us of CPU a request, taken from the two cores the server
    runs on. Each answer is still read whole (Content-Length or chunked) and checked."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        self.writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        fields = {}
        for line in raw.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        if b"content-length" in fields:
            return status, await self.reader.readexactly(int(fields[b"content-length"]))
        chunks = []
        while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
            chunks.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)
        await self.reader.readuntil(b"\r\n")
        return status, b"".join(chunks)


async def _load_async(url: str, token: str, clients: int, n: int, door: str) -> dict[str, Any]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    run_id = os.urandom(4).hex()
    lat: list[float] = []
    errors: list[str] = []
    common = (
        f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
    )
    mcp_head = (
        f"POST /mcp HTTP/1.1\r\n{common}Accept: application/json, text/event-stream\r\n"
    ).encode()
    conns = [_Client(*await asyncio.open_connection(host, port)) for _ in range(clients)]

    async def one(client: _Client, i: int) -> None:
        op = f"b5-{run_id}-{i}"
        t0 = time.perf_counter()
        if door == "mcp":
            status, body = await client.post(mcp_head, _mcp_call(op))
        else:
            head = (
                f"POST /v1/actions/submit_order HTTP/1.1\r\n{common}Idempotency-Key: {op}\r\n"
            ).encode()
            status, body = await client.post(head, BODY)
        lat.append(time.perf_counter() - t0)
        if (failure := _failure(door, status, body)) is not None:
            errors.append(failure)

    async def worker(w: int) -> None:
        for i in range(w, n, clients):
            await one(conns[w], i)

    try:
        await one(conns[0], -1)  # warm the server (imports, first request) outside the clock
        lat.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        seconds = time.perf_counter() - t0
    finally:
        for c in conns:
            c.writer.close()
    if errors:
        return {"error": f"{len(errors)} of {n} requests failed; first: {errors[0]}"}
    return {"seconds": seconds, "lat": lat}
