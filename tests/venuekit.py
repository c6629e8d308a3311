"""Local stand-ins for the real venues, on loopback only, one per test module.

localstripe (a stateful fake Stripe) and moto's EC2 (server mode) run as subprocesses; an
aiosmtpd relay runs in a thread and keeps every message it accepted. Each offers ``reset()`` so
every test starts from an empty venue (a sweep lists the whole account: another test's effects
would be orphans). What each stand-in really does (key honoured? listing order?) is measured in
tests/test_venue_kit.py and written down in docs/adapters.md.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def need(module: str) -> None:
    """Import ``module`` or skip (locally) / fail (under CI=true): the [test] extra has it."""
    try:
        __import__(module)
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"CI=true but {module} is not installed (pip install -e '.[test]'): {exc}")
        pytest.skip(f"{module} not installed: pip install -e '.[test]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not start within 60s")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    reset_path: str
    reset_method: str

    def reset(self) -> None:
        req = urllib.request.Request(self.url + self.reset_path, method=self.reset_method)
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# localstripe's own start() listens on every interface and pickles its state to
# /tmp/localstripe.pickle on every write; this launcher binds loopback and keeps state in memory.
_LOCALSTRIPE = """
import sys
from aiohttp import web
from localstripe import resources, server
resources.store.dump_to_disk = lambda: None
web.run_app(server.app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def start_localstripe() -> Server:
    need("localstripe")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCALSTRIPE, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    _wait(url + "/v1/customers", proc, "localstripe")
    return Server(url, proc, "/_config/data", "DELETE")


def start_moto() -> Server:
    need("moto.server")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Without it moto accepts any AMI id, so nothing could be a provable refusal.
        env={**os.environ, "MOTO_ENABLE_AMI_VALIDATION": "true"},
    )
    url = f"http://127.0.0.1:{port}"
    _wait(url + "/moto-api/", proc, "moto")
    return Server(url, proc, "/moto-api/reset", "POST")


@dataclass
class Mailbox:
    """What the aiosmtpd relay accepted: the far end of the email venue."""

    host: str
    port: int
    messages: list[Message] = field(default_factory=list)
    controller: Any = None
    #: Test hook: refuse every recipient (550) while set.
    refuse: bool = False

    def count(self, operation_key: str) -> int:
        return sum(1 for m in self.messages if m.get("X-Effectgate-Operation-Key") == operation_key)

    def reset(self) -> None:
        self.messages.clear()
        self.refuse = False


def start_smtp() -> Mailbox:
    need("aiosmtpd")
    from aiosmtpd.controller import Controller

    box = Mailbox("127.0.0.1", free_port())
    lock = threading.Lock()

    class Handler:
        async def handle_RCPT(
            self, server: Any, session: Any, envelope: Any, address: str, options: Any
        ) -> str:
            if box.refuse or address.startswith("refuse-"):
                return "550 no such user"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            with lock:
                box.messages.append(
                    message_from_bytes(envelope.original_content or envelope.content)
                )
            return "250 accepted"

    box.controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    box.controller.start()
    return box


def stop_smtp(box: Mailbox) -> None:
    box.controller.stop()


# --- action classes and a gate per venue ------------------------------------------------------

from typing import Annotated, Literal  # noqa: E402

from pydantic import Field  # noqa: E402

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler  # noqa: E402
from effectgate._core.intent import ActionClass, AsciiPattern, EffectClass, IntentBase, Registry  # noqa: E402
from effectgate._core.venue import VenueContract  # noqa: E402
from effectgate._execute.adapter import Adapter  # noqa: E402
from effectgate.store.roles import Store  # noqa: E402


class CreatePayment(IntentBase):
    action: Literal["create_payment"]
    amount: Annotated[int, Field(gt=0, le=10_000_000)]
    currency: Literal["usd", "eur"]
    payment_method: Annotated[str, AsciiPattern(r"^pm_[A-Za-z0-9_]{1,60}$")]


class RunInstance(IntentBase):
    action: Literal["run_instance"]
    image_id: Annotated[str, AsciiPattern(r"^ami-[0-9a-f]{8,17}$")]
    instance_type: Literal["t2.micro", "t3.micro"]


class SendEmail(IntentBase):
    action: Literal["send_email"]
    to: Annotated[str, AsciiPattern(r"^[A-Za-z0-9._+-]{1,64}@[A-Za-z0-9.-]{1,190}$")]
    subject: Annotated[str, Field(min_length=1, max_length=200)]
    body: Annotated[str, Field(min_length=1, max_length=10_000)]


def venue_class(
    name: str, model: type[IntentBase], adapter: str, horizon: float, venue: VenueContract
) -> ActionClass:
    return ActionClass(
        name=name,
        model=model,
        adapter=adapter,
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=horizon,
        key_retention=86400.0,
        venue=venue,
    )


@dataclass
class Rig:
    gate: Gate
    rec: Reconciler
    clock: Any


class Offset:
    """Real time (the venue stamps real times) plus a shift a test can advance."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift

    def advance(self, seconds: float) -> None:
        self.shift += seconds


def rig(store: Store, adapter: Adapter, cls: ActionClass, clock: Offset | None = None) -> Rig:
    clock = clock or Offset()
    registry = Registry([cls])
    adapters = {cls.adapter: adapter}
    gate = Gate(
        store=store,
        registry=registry,
        adapters=adapters,
        policy=PolicySet({cls.name: LimitPolicy(None)}),
        clock=clock,
    )
    rec = Reconciler(store=store, registry=registry, adapters=adapters, clock=clock)
    return Rig(gate, rec, clock)


def audit_text(store: Store) -> str:
    return "\n".join(repr(e) for e in store.iter_audit())


# --- conformance-kit drivers: direct access to each stand-in ----------------------------------

from effectgate._execute.adapter import OutboundRequest  # noqa: E402


class StripeDriver:
    venue = "localstripe"

    def __init__(self, url: str, secret: str, make: Any) -> None:
        self.url, self._secret, self._make = url, secret, make

    def request(self, operation_key: str) -> OutboundRequest:
        return OutboundRequest(
            operation_key,
            "create_payment",
            {"amount": 700, "currency": "usd", "payment_method": "pm_card_visa"},
        )

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        return OutboundRequest(
            operation_key,
            "create_payment",
            {"amount": 700, "currency": "usd", "payment_method": "pm_does_not_exist"},
        )

    def unreachable(self) -> Adapter:
        return self._make("http://127.0.0.1:9")  # type: ignore[no-any-return]

    def direct_effect(self) -> str | None:
        import stripe

        client = stripe.StripeClient(
            self._secret, base_addresses={"api": self.url}, max_network_retries=0
        )
        pi: Any = client.v1.payment_intents.create(
            params={
                "amount": 5,
                "currency": "usd",
                "confirm": True,
                "payment_method": "pm_card_visa",
            }
        )
        return str(pi.id)

    def delivered(self, operation_key: str) -> int | None:
        return None

    def secrets(self) -> list[str]:
        return [self._secret]


class Ec2Driver:
    venue = "moto (EC2, server mode)"
    ami = "ami-03cf127a"  # one of moto's built-in images (us-east-1)

    def __init__(self, url: str, secret: str, make: Any) -> None:
        self.url, self._secret, self._make = url, secret, make

    def request(self, operation_key: str) -> OutboundRequest:
        return OutboundRequest(
            operation_key, "run_instance", {"image_id": self.ami, "instance_type": "t2.micro"}
        )

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        return OutboundRequest(
            operation_key,
            "run_instance",
            {"image_id": "ami-0000000000000dead", "instance_type": "t2.micro"},
        )

    def unreachable(self) -> Adapter:
        return self._make("http://127.0.0.1:9")  # type: ignore[no-any-return]

    def direct_effect(self) -> str | None:
        import boto3

        ec2: Any = boto3.client(
            "ec2",
            region_name="us-east-1",
            endpoint_url=self.url,
            aws_access_key_id="AKIATESTONLY",
            aws_secret_access_key=self._secret,
        )
        out = ec2.run_instances(ImageId=self.ami, InstanceType="t2.micro", MinCount=1, MaxCount=1)
        return str(out["Instances"][0]["InstanceId"])

    def delivered(self, operation_key: str) -> int | None:
        return None

    def secrets(self) -> list[str]:
        return [self._secret]


class EmailDriver:
    venue = "aiosmtpd relay"

    def __init__(self, box: Mailbox, make: Any) -> None:
        self.box, self._make = box, make

    def request(self, operation_key: str) -> OutboundRequest:
        return OutboundRequest(
            operation_key,
            "send_email",
            {"to": "ops@example.test", "subject": "kit", "body": "hello"},
        )

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        # The relay refuses every refuse-* recipient with 550 (see start_smtp).
        return OutboundRequest(
            operation_key,
            "send_email",
            {"to": "refuse-me@example.test", "subject": "kit", "body": "hello"},
        )

    def unreachable(self) -> Adapter:
        return self._make(9)  # type: ignore[no-any-return]

    def direct_effect(self) -> str | None:
        return None

    def delivered(self, operation_key: str) -> int | None:
        return self.box.count(operation_key)

    def secrets(self) -> list[str]:
        return []


class PaperDriver:
    """The paper venue through the kit: it honours the key, so exactly-once may be claimed.
    Build the venue with ``max_quantity`` (e.g. 1000) so it has a provable refusal."""

    venue = "paper"

    def __init__(
        self, paper: Any, secret: str = "", unreachable: Any = None, pointed_at: Any = None
    ) -> None:
        self.paper = paper
        self._secret = secret
        self._unreachable = unreachable
        self._pointed_at = pointed_at

    def pointed_at(self, url: str) -> Adapter | None:
        return None if self._pointed_at is None else self._pointed_at(url)  # type: ignore[no-any-return]

    def request(self, operation_key: str) -> OutboundRequest:
        return OutboundRequest(
            operation_key,
            "submit_order",
            {
                "instrument": "XYZ-PERP",
                "side": "buy",
                "order_type": "limit",
                "quantity": "1",
                "limit_price": "10",
            },
        )

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        return OutboundRequest(
            operation_key,
            "submit_order",
            {
                "instrument": "XYZ-PERP",
                "side": "buy",
                "order_type": "limit",
                "quantity": "1000000",
                "limit_price": "10",
            },
        )

    def unreachable(self) -> Adapter:
        from effectgate.adapters.paper import PaperAdapter, PaperVenue

        if self._unreachable is not None:
            return self._unreachable()  # type: ignore[no-any-return]

        dead = PaperVenue()
        dead.fail_next(10, after_apply=False)
        return PaperAdapter(dead)

    def direct_effect(self) -> str | None:
        return str(self.paper.inject_record("outside-no-scope"))

    def delivered(self, operation_key: str) -> int | None:
        return None

    def secrets(self) -> list[str]:
        return [self._secret] if self._secret else []
