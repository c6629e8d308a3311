"""Local stand-ins for the real venues, for ``effectgate verify --adapters`` (issue 20).

The conformance kit makes effects and needs direct access to the venue, so it never runs
against a user's live account. For ``stripe``, ``aws`` and ``email`` adapters it runs against a
local stand-in on loopback, with an adapter built from the user's own ``[adapters.NAME]``
(its options and timeout) pointed there with a throwaway credential:

* ``stripe``: localstripe (a stateful fake Stripe), in a subprocess, state in memory;
* ``aws``: moto's server mode (EC2), in a subprocess, with AMI validation on so a refusal can
  be provable;
* ``email``: an aiosmtpd relay in a thread, which keeps every message it accepted (the kit
  counts deliveries at the far end) and refuses ``refuse-*`` recipients with 550.

A stand-in whose package is not installed is reported ``n/a``, saying which package. What a
stand-in does is not what the real venue does (localstripe and moto ignore idempotency keys):
the kit measures the adapter's behaviour against it, and the report says what it ran against.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email import message_from_bytes
from email.message import Message
from typing import Any

from effectgate._execute.adapter import Adapter, OutboundRequest
from effectgate._service._config import AdapterConfig
from effectgate._service._venues import build_venue_adapter
from effectgate.adapters.conformance.kit import ConformanceReport, run_conformance

__all__ = ["SANDBOXES", "Unavailable"]

#: The throwaway credential's variable (set in this process only, for the kit's adapter).
_ENV = "EFFECTGATE_VERIFY_SANDBOX_SECRET"
_CREDENTIAL_KEYS = ("credential_env", "credential_file", "credential_hook")


class Unavailable(Exception):
    """The stand-in cannot run here (the message says which package to install)."""


def _need(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise Unavailable(f"{package} is not installed (pip install '{package}')")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _subprocess(argv: list[str], probe: str, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run a stand-in server until ``probe`` answers (any HTTP status); stop it after."""
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the stand-in exited with {proc.returncode}")
            try:
                urllib.request.urlopen(probe, timeout=1)  # noqa: S310 - loopback http
                break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the stand-in did not start within 60s") from None
                time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _adapter(name: str, cfg: AdapterConfig, **override: Any) -> Adapter:
    """The user's adapter (kind, options, timeout) pointed at the stand-in, with a throwaway
    credential read from this process's environment."""
    options = {k: v for k, v in cfg.options.items() if k not in _CREDENTIAL_KEYS}
    endpoint = override.pop("endpoint", None)
    credential: dict[str, str | None] = {"credential_env": _ENV}
    if cfg.kind == "email" and options.get("username") is None:
        credential = {}
    return build_venue_adapter(
        name,
        cfg.kind,
        endpoint=endpoint,
        credential=credential,
        # At least 10 s: a stand-in on a busy machine is slower than the venue it stands for.
        timeout=max(cfg.timeout, 10.0),
        options={**options, **override},
    )


def _action(cfg: AdapterConfig, kind: str, default: str) -> str:
    """The action the user's ``operations`` map sends as ``kind`` (else the default name)."""
    ops = cfg.options.get("operations")
    if isinstance(ops, dict):
        for action, op in ops.items():
            if op == kind:
                return str(action)
    return default


class _Driver:
    """The kit's direct access to a stand-in; subclasses say what to send and how to make an
    effect outside the boundary."""

    venue = "stand-in"

    def __init__(self, make: Callable[[str], Adapter], secret: str) -> None:
        self._make, self._secret = make, secret

    def unreachable(self) -> Adapter:
        return self._make("http://127.0.0.1:9")  # nothing listens on the discard port

    def direct_effect(self) -> str | None:
        return None

    def delivered(self, operation_key: str) -> int | None:
        return None

    def secrets(self) -> list[str]:
        return [self._secret]


_LOCALSTRIPE = """
import sys
from aiohttp import web
from localstripe import resources, server
resources.store.dump_to_disk = lambda: None  # keep the state in memory, not in /tmp
web.run_app(server.app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def stripe(name: str, cfg: AdapterConfig) -> tuple[ConformanceReport, str]:
    _need("localstripe", "localstripe")
    _need("stripe", "effectgate[stripe]")
    port, secret = _port(), "sk_test_" + secrets.token_hex(12)
    url = f"http://127.0.0.1:{port}"
    pay = _action(cfg, "payment", "create_payment")

    def make(at: str) -> Adapter:
        # localstripe has no search endpoint and no server-side created filter.
        return _adapter(name, cfg, endpoint=at, probe_via="list", server_created_filter=False)

    class Driver(_Driver):
        venue = "localstripe"

        def request(self, key: str) -> OutboundRequest:
            body: dict[str, str | int | bool] = {
                "amount": 700,
                "currency": "usd",
                "payment_method": "pm_card_visa",
            }
            return OutboundRequest(key, pay, body)

        def refused_request(self, key: str) -> OutboundRequest | None:
            body: dict[str, str | int | bool] = {
                "amount": 700,
                "currency": "usd",
                "payment_method": "pm_does_not_exist",
            }
            return OutboundRequest(key, pay, body)

        def direct_effect(self) -> str | None:
            import stripe as lib

            client = lib.StripeClient(secret, base_addresses={"api": url}, max_network_retries=0)
            params: Any = {
                "amount": 5,
                "currency": "usd",
                "confirm": True,
                "payment_method": "pm_card_visa",
            }
            return str(client.v1.payment_intents.create(params=params).id)

    with _env(secret), _subprocess([sys.executable, "-c", _LOCALSTRIPE, str(port)], url):
        report = run_conformance(make(url), Driver(make, secret), horizon=2.0)
    return report, "localstripe on loopback (probe_via = list, server_created_filter = false)"


_AMI = "ami-03cf127a"  # one of moto's built-in images in us-east-1


def aws(name: str, cfg: AdapterConfig) -> tuple[ConformanceReport, str]:
    _need("moto.server", "moto[server]")
    _need("boto3", "effectgate[aws]")
    port, secret = _port(), secrets.token_hex(20)
    url = f"http://127.0.0.1:{port}"
    run = _action(cfg, "run", "run_instance")
    keys = {"region": "us-east-1", "access_key_id": "AKIAVERIFYONLY"}

    def make(at: str) -> Adapter:
        return _adapter(name, cfg, endpoint=at, **keys)

    class Driver(_Driver):
        venue = "moto (EC2, server mode)"

        def request(self, key: str) -> OutboundRequest:
            return OutboundRequest(key, run, {"image_id": _AMI, "instance_type": "t2.micro"})

        def refused_request(self, key: str) -> OutboundRequest | None:
            body = {"image_id": "ami-0000000000000dead", "instance_type": "t2.micro"}
            return OutboundRequest(key, run, body)

        def direct_effect(self) -> str | None:
            out = _ec2().run_instances(
                ImageId=_AMI, InstanceType="t2.micro", MinCount=1, MaxCount=1
            )
            return str(out["Instances"][0]["InstanceId"])

    def _ec2() -> Any:
        import boto3

        return boto3.client(
            "ec2",
            region_name="us-east-1",
            endpoint_url=url,
            aws_access_key_id=keys["access_key_id"],
            aws_secret_access_key=secret,
        )

    # Without AMI validation moto accepts any image id, so nothing could be a provable refusal.
    env = {**os.environ, "MOTO_ENABLE_AMI_VALIDATION": "true"}
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _env(secret), _subprocess(argv, url + "/moto-api/", env):
        _ec2().describe_images(ImageIds=[_AMI])  # moto loads its images on first use: not timed
        report = run_conformance(make(url), Driver(make, secret), horizon=2.0)
    return report, "moto's EC2 server mode on loopback (region us-east-1)"


def email(name: str, cfg: AdapterConfig) -> tuple[ConformanceReport, str]:
    _need("aiosmtpd", "aiosmtpd")
    from aiosmtpd.controller import Controller

    port = _port()
    accepted: list[Message] = []
    lock = threading.Lock()

    class Relay:
        async def handle_RCPT(
            self, server: Any, session: Any, envelope: Any, address: str, options: Any
        ) -> str:
            if address.startswith("refuse-"):
                return "550 no such user"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            with lock:
                accepted.append(message_from_bytes(envelope.original_content or envelope.content))
            return "250 accepted"

    def make(at: str) -> Adapter:
        # The unreachable adapter gets the discard port; the relay has no TLS and no login.
        where = 9 if at.endswith(":9") else port
        return _adapter(name, cfg, host="127.0.0.1", port=where, starttls=False, username=None)

    send = next(iter(cfg.options.get("actions") or ("send_email",)))

    class Driver(_Driver):
        venue = "aiosmtpd relay"

        def request(self, key: str) -> OutboundRequest:
            body = {"to": "ops@example.test", "subject": "kit", "body": "hello"}
            return OutboundRequest(key, str(send), body)

        def refused_request(self, key: str) -> OutboundRequest | None:
            body = {"to": "refuse-me@example.test", "subject": "kit", "body": "hello"}
            return OutboundRequest(key, str(send), body)

        def delivered(self, key: str) -> int | None:
            with lock:
                return sum(1 for m in accepted if m.get("X-Effectgate-Operation-Key") == key)

        def secrets(self) -> list[str]:
            return []

    relay = Controller(Relay(), hostname="127.0.0.1", port=port)
    relay.start()
    try:
        report = run_conformance(make("relay"), Driver(make, ""), horizon=1.0)
    finally:
        relay.stop()
    return report, "an aiosmtpd relay on loopback (no TLS, no login)"


@contextmanager
def _env(secret: str) -> Iterator[None]:
    """The throwaway credential, in this process's environment while the kit runs."""
    before = os.environ.get(_ENV)
    os.environ[_ENV] = secret
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = before


SANDBOXES: dict[str, Callable[[str, AdapterConfig], tuple[ConformanceReport, str]]] = {
    "stripe": stripe,
    "aws": aws,
    "email": email,
}
