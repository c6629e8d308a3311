"""Helpers for the service tests: configs, tokens, a live uvicorn subprocess on a loopback port."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

AGENT_A = "test-agent-alpha-token"
AGENT_B = "test-agent-beta-token"
OPERATOR = "test-operator-token"
SCOPED_OPERATOR = "test-operator-alpha-token"
VENUE_KEY_ENV = "EG_TEST_VENUE_KEY"
#: The venue credential in security tests: it must never show up anywhere an agent can see.
CANARY = "CANARY-c0ffee-5e1f-venue-credential"

ORDER = {
    "intent_version": "1",
    "action": "submit_order",
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "4",
    "limit_price": "100.00",
}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def config_text(
    *, venue_url: str | None = None, service: str = "", store_url: str, horizon: float = 60.0
) -> str:
    """A complete config: the example classes, an http adapter (or the in-process paper venue),
    two agent tenants, a global operator and an operator limited to tenant alpha."""
    adapter = (
        f'kind = "http"\nendpoint = "{venue_url}"\ncredential_env = "{VENUE_KEY_ENV}"\n'
        "timeout = 5.0"
        if venue_url
        else 'kind = "paper"'
    )
    return f'''
[service]
host = "127.0.0.1"
{service}

[store]
url = "{store_url}"

[adapters.venue]
{adapter}

[classes.submit_order]
schema = "effectgate.examples:SubmitOrder"
value = "effectgate.examples:notional"
adapter = "venue"
effect_class = "non_idempotent_mutation"
visibility_horizon = {horizon}
key_retention = 86400
target_field = "instrument"
decimal_fields = ["quantity", "limit_price"]

[classes.cancel_order]
schema = "effectgate.examples:CancelOrder"
adapter = "venue"
effect_class = "idempotent_mutation"
visibility_horizon = {horizon}
key_retention = 86400

[policies.submit_order]
max_value = "1000"
approve_above = "900"

[policies.cancel_order]

[tokens.alpha]
role = "agent"
scope = "alpha"
sha256 = "{sha(AGENT_A)}"

[tokens.beta]
role = "agent"
scope = "beta"
sha256 = "{sha(AGENT_B)}"

[tokens.ops]
role = "operator"
scope = "*"
sha256 = "{sha(OPERATOR)}"

[tokens.ops-alpha]
role = "operator"
scope = "alpha"
sha256 = "{sha(SCOPED_OPERATOR)}"
'''


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m effectgate ARGS`` in a subprocess, wide output, ``env`` over this one's."""
    return subprocess.run(
        [sys.executable, "-m", "effectgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
    )


def effectgate_cmd() -> list[str]:
    return [sys.executable, "-c", "from effectgate._doors.cli.main import main; main()"]


@dataclass
class LiveService:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def live_service(
    config: Path,
    *,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[LiveService]:
    """``effectgate serve`` in a subprocess on a free loopback port; killed on exit."""
    port = free_port()
    log = log or config.with_suffix(f".{port}.log")
    full_env = {**os.environ, **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *effectgate_cmd(),
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
                "--log-level",
                "warning",
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    live = LiveService(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"service exited early:\n{live.output()}")
            try:
                if httpx.get(f"{live.url}/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"service did not start:\n{live.output()}")
            time.sleep(0.05)
        yield live
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def uvicorn_thread(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port in this process; yields its URL."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
