"""The doors: an agent proposes through the HTTP door's ASGI app and through the MCP door, in
process, no sockets.

The actor adds a class of its own, ``door_charge`` (a money field ``amount``, a decimal sent as
a string), on its own venue (``sim-door``, a lagging-venue model with no lag), and builds a
:class:`~effectgate._service.Service` over the world's ledger and clock (a fourth executor;
rebuilt after a crash). The HTTP app (``create_app``) and the MCP server (``build_server``) are
built once per Python process over :class:`_Current`, which points at the running seed's
service: building the FastAPI app costs ~0.3 s, more than a seed. Requests go through
``httpx.ASGITransport``; MCP calls, one in four through the SDK's in-memory ``Client``
(``mode="auto"``: its direct in-process dispatch; ~50 ms a call, as each new session lists the
tools to validate the result), the others to the server's tool handler (``_call``, wrapped as
the server's ``call_tool`` wraps it). Each runs to completion per step on a fresh event loop
(``asyncio.run`` / ``anyio.run``); the gate runs in the door's worker thread, awaited, so nothing
interleaves. The service's rate limiter is rebuilt on the world's clock (it reads
``time.monotonic`` by default).

Steps: ``http-propose`` and ``mcp-propose``: a valid charge (new, a retry, or a changed payload
under a used id) or a hostile one: duplicate JSON keys, ``NaN``, a float in the money field,
an unknown field (MCP: a float, ``NaN``, an integer amount, an unknown field). Checked: a
hostile body is refused (4xx / ``isError``) and changes nothing but the audit log (no row under
its id, no new row, nothing sent); a valid one answers with the ledger's state; a changed
payload under a used id is refused (invariant 2); every request the door's gate sent found its
row ``submitted`` and no key twice (1, 3); no float ever reached the venue (6).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any, Literal

import anyio

from effectgate._core.intent import ActionClass, IntentBase, PositiveDecimal, Registry
from effectgate._evidence.invariants import Violation
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.venues import adapters as va
from effectgate._sim.venues import models
from effectgate.errors import EffectgateError

__all__ = ["DOOR_ACTION", "Doors"]

DOOR_ACTION, ADAPTER, SCOPE = "door_charge", "sim-door", "door"
#: The share of MCP calls made through the SDK's client rather than to the tool handler.
SDK_SHARE = 0.25
#: The agent's bearer token in the simulated config (a fixed test value, not a credential).
TOKEN = "sim-door-agent-token"  # noqa: S105


class DoorCharge(IntentBase):
    """A charge proposed through a door."""

    account: Literal["acct-1", "acct-2"]
    amount: PositiveDecimal
    currency: Literal["usd", "eur"]


_CONFIG = f'''
[service]
host = "127.0.0.1"
[store]
url = "sqlite:///:memory:"
[adapters.{ADAPTER}]
kind = "paper"
[classes.{DOOR_ACTION}]
schema = "{__name__}:DoorCharge"
adapter = "{ADAPTER}"
effect_class = "non_idempotent_mutation"
visibility_horizon = 60
key_retention = 86400
decimal_fields = ["amount"]
[policies.{DOOR_ACTION}]
[tokens.sim-agent]
role = "agent"
scope = "{SCOPE}"
sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
'''

_GOOD = '{"intent_version":"1","action":"door_charge","account":"acct-1",'
#: HTTP bodies the strict parse must refuse, by name (raw text: JSON libraries cannot write them).
HOSTILE_HTTP: tuple[tuple[str, str], ...] = (
    ("duplicate-key", _GOOD + '"amount":"5.00","amount":"500.00","currency":"usd"}'),
    ("nan", _GOOD + '"amount":NaN,"currency":"usd"}'),
    ("float-amount", _GOOD + '"amount":12.5,"currency":"usd"}'),
    ("unknown-field", _GOOD + '"amount":"5.00","currency":"usd","memo":"x"}'),
)
#: MCP tool arguments the door must refuse (an SDK client sends Python values as they are).
HOSTILE_MCP: tuple[tuple[str, dict[str, object]], ...] = (
    ("float-amount", {"amount": 12.5}),
    ("nan", {"amount": float("nan")}),
    ("int-amount", {"amount": 5}),
    ("unknown-field", {"amount": "5.00", "memo": "x"}),
)


def _round(hostile: tuple[tuple[str, Any], ...], rng: random.Random) -> list[tuple[str, Any]]:
    """One hostile round: the float in the money field (the case that matters most) and one
    other drawn from the rest."""
    rest = [h for h in hostile if h[0] != "float-amount"]
    return [next(h for h in hostile if h[0] == "float-amount"), rest[rng.randrange(len(rest))]]


class _Current:
    """The service of the seed now running, for the app and server built once per process
    (attribute reads go to it; ``tokens`` is read once at build, so it forwards too)."""

    service: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.service, name)

    @property
    def tokens(self) -> Any:
        return _Forward(self, "tokens")


class _Forward:
    def __init__(self, owner: _Current, attr: str) -> None:
        self._owner, self._attr = owner, attr

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(self._owner.service, self._attr), name)


_CURRENT = _Current()


class _Result:
    """A tool's error result, as the server's ``call_tool`` builds it from a refusal."""

    def __init__(self, is_error: bool, structured_content: dict[str, Any]) -> None:
        self.is_error, self.structured_content = is_error, structured_content


_BUILT: dict[str, Any] = {}


def _config() -> Any:
    if "config" not in _BUILT:
        from effectgate._service import parse_config

        _BUILT["config"] = parse_config(_CONFIG, "sim-doors.toml")
    return _BUILT["config"]


def _app() -> Any:
    if "app" not in _BUILT:
        from effectgate._doors.http.app import create_app

        _BUILT["app"] = create_app(_CURRENT, mcp_http=False)  # type: ignore[arg-type]
    return _BUILT["app"]


def _mcp() -> Any:
    if "mcp" not in _BUILT:
        from effectgate._core.principals import Principal
        from effectgate._doors.mcp.server import build_server

        who = Principal("sim-agent", "agent", SCOPE)  # type: ignore[arg-type]
        _BUILT["mcp"] = build_server(_CURRENT, who)  # type: ignore[arg-type]
        _BUILT["principal"] = who
    return _BUILT["mcp"]


class Doors:
    """The ``http-propose`` and ``mcp-propose`` steps and their checks."""

    name = "doors"

    def __init__(self) -> None:
        self.venue: models.LaggingVenue | None = None
        self.witness: checks.Witness | None = None
        self.store: Any = None
        self.built_for: Any = None
        self.serial = 0
        self.sent: list[tuple[str, str]] = []  # (operation id, amount)
        self.checked = 0
        self.keys: set[str] = set()
        self.step_violations: list[Violation] = []

    def steps(self) -> Steps:
        return (("http-propose", 1), ("mcp-propose", 1))

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store
        if self.witness is None:
            self.venue = models.LaggingVenue(spec.clock)
            self.witness = checks.Witness(_DoorAdapter(self.venue), lambda: self.store)
        if DOOR_ACTION not in spec.registry.names():
            door: ActionClass = _config().registry.get(DOOR_ACTION)
            spec.registry = Registry([*(spec.registry.get(n) for n in spec.registry.names()), door])
        from effectgate._core.policy import LimitPolicy

        spec.policies[DOOR_ACTION] = LimitPolicy()
        spec.adapters[ADAPTER] = self.witness

    def _service(self, world: Any) -> Any:
        if self.built_for is not world.store and self.witness is not None:
            from effectgate._service import Service
            from effectgate._service._auth import RateLimiter

            svc = Service(
                _config(), store=world.store, adapters={ADAPTER: self.witness}, clock=world.clock
            )
            settings = svc.config.service
            svc.limiter = RateLimiter(settings.rate_limit, clock=world.clock)
            _CURRENT.service, self.built_for = svc, world.store
        return _CURRENT.service

    # --- steps --------------------------------------------------------------------------

    def _pick(self, rng: random.Random) -> tuple[str, str, str]:
        """(kind, operation id, amount): a new charge, a retry, or a changed payload."""
        pick = rng.random()
        if self.sent and pick < 0.2:
            return ("retry", *self.sent[rng.randrange(len(self.sent))])
        if self.sent and pick < 0.3:
            op_id, amount = self.sent[rng.randrange(len(self.sent))]
            return "conflict", op_id, f"{amount}1"
        self.serial += 1
        op_id, amount = f"dr-{self.serial:04d}", f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}"
        return "new", op_id, amount

    def _new_id(self) -> str:
        self.serial += 1
        return f"dr-{self.serial:04d}"

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        self._service(world)
        hostile = rng.random() < 0.5
        rows_before = sum(world.store.count_by_state().values())
        sent_before = len(self.witness.requests) if self.witness else 0
        if kind == "http-propose":
            if hostile:
                out = []
                for name, body in _round(HOSTILE_HTTP, rng):
                    op_id = self._new_id()
                    status, code = self._post(op_id, body.encode())
                    refused = status >= 400
                    self._refused(world, f"http {name}", op_id, refused, rows_before, sent_before)
                    out.append(f"{op_id} {name} -> {status} {code}")
                return "; ".join(out)
            what, op_id, amount = self._pick(rng)
            body = _GOOD + f'"amount":"{amount}","currency":"usd"}}'
            status, code = self._post(op_id, body.encode())
        else:
            if hostile:
                out = []
                for name, extra in _round(HOSTILE_MCP, rng):
                    op_id = self._new_id()
                    sdk = rng.random() < SDK_SHARE
                    error, code = self._call(op_id, {"amount": "1.00", **extra}, sdk=sdk)
                    self._refused(world, f"mcp {name}", op_id, error, rows_before, sent_before)
                    out.append(f"{op_id} {name} -> error={error} {code}")
                return "; ".join(out)
            what, op_id, amount = self._pick(rng)
            error, code = self._call(op_id, {"amount": amount}, sdk=rng.random() < SDK_SHARE)
            status = 422 if error and code == "idempotency_conflict" else 400 if error else 200
        if what == "new":
            self.sent.append((op_id, amount))
        if what == "conflict" and code != "idempotency_conflict":
            self.step_violations.append(
                Violation(2, f"{SCOPE}:{op_id}: a changed payload through a door answered {code}")
            )
        return f"{op_id} {what} {amount} -> {status} {code}"

    def _refused(
        self, world: Any, name: str, op_id: str, refused: bool, rows: int, sent: int
    ) -> None:
        """A hostile body is refused and changes nothing but the audit log."""
        changed = (
            world.store.get(SCOPE, op_id) is not None
            or sum(world.store.count_by_state().values()) != rows
            or (self.witness is not None and len(self.witness.requests) != sent)
        )
        if not refused or changed:
            self.step_violations.append(
                Violation(
                    6, f"{SCOPE}:{op_id}: a hostile body ({name}) was accepted or changed state"
                )
            )

    def _post(self, op_id: str, body: bytes) -> tuple[int, str]:
        import httpx

        headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Idempotency-Key": op_id,
            "Content-Type": "application/json",
        }

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=_app())
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return await client.post(
                    f"/v1/actions/{DOOR_ACTION}", content=body, headers=headers
                )

        response = asyncio.run(go())
        doc = response.json()
        return response.status_code, str(doc.get("code") or doc.get("state"))

    def _call(self, op_id: str, extra: dict[str, object], *, sdk: bool) -> tuple[bool, str]:
        """One tool call: through the SDK's in-memory client (``sdk``: ~50 ms, as the client
        lists the tools to validate the result's schema in every new session), or to the
        server's tool handler directly (a few ms)."""
        from mcp import Client

        args = {
            "operation_id": op_id,
            "intent_version": "1",
            "action": DOOR_ACTION,
            "account": "acct-1",  # as the HTTP body: a retry may come through either door
            "currency": "usd",
            **extra,
        }

        async def through_the_sdk() -> Any:
            async with Client(_mcp(), mode="auto") as client:
                return await client.call_tool(DOOR_ACTION, args)

        async def to_the_handler() -> Any:
            from mcp_types import CallToolRequestParams

            from effectgate._doors._shared.models import problem_for
            from effectgate._doors.mcp.server import _call

            _mcp()  # the server and its principal, built once per process
            params = CallToolRequestParams(name=DOOR_ACTION, arguments=args)
            try:  # what the server's call_tool does around it
                return await _call(_CURRENT, _BUILT["principal"], params)  # type: ignore[arg-type]
            except EffectgateError as exc:
                return _Result(True, problem_for(exc)[1])

        result = anyio.run(through_the_sdk if sdk else to_the_handler)
        out = result.structured_content or {}
        return bool(result.is_error), str(out.get("code") or out.get("state"))

    # --- the checks ---------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.witness is None:
            return found
        new = self.witness.requests[self.checked :]
        found += checks.journalled_before_dispatch(new, self.witness.states[self.checked :])
        self.checked = len(self.witness.requests)
        for r in new:
            if r.operation_key in self.keys:
                found.append(Violation(1, f"{r.operation_key} was dispatched twice"))
            self.keys.add(r.operation_key)
            if any(isinstance(v, float) for v in r.effect.values()):
                found.append(Violation(6, f"{r.operation_key} reached the venue with a float"))
        return found


class _DoorAdapter(va.LaggingAdapter):
    """The door class's venue: honours the key, lists at once."""

    name = ADAPTER
