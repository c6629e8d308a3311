"""The MCP gateway: an agent calls a governed upstream tool through the gateway's tool handler,
in process, in front of a simulated upstream (:mod:`effectgate._sim.venues.upstream`).

The gateway's config (``parse_gateway``) is bound (``bind``) to the upstream's listing, as
:class:`~effectgate._doors.gateway.Gateway` does after connecting; the governed tool
``gw_charge`` is the real :class:`~effectgate._doors.gateway._adapter.UpstreamAdapter` over a
:class:`~effectgate._sim.venues.upstream.ToolLink`, and a :class:`~effectgate._service.Service`
runs over the world's ledger and clock (rebuilt after a crash; scope ``gateway``). Calls go to
the gateway's handler (``_server._call``, its refusals wrapped as ``call_tool`` wraps them) on a
fresh event loop; one in ten through the SDK's in-memory ``Client`` and the real
``build_gateway_server`` (built once per process over :data:`_GW`, which the running seed fills).

Steps: ``gw-call``: a charge (new, a retry, or a changed amount under a used id), the upstream
sometimes losing the reply, timing out (applied or not) or applying it twice; ``gw-hostile``: a
float amount and one other hostile call (``NaN``, an unknown field, the key argument sent by the
agent, a duplicate key marked by the transport, a malformed operation id).

Checked: at most one upstream call per operation key, each while its row was ``submitted``
(invariants 1, 3); after every sweep that listed the upstream, every key it holds twice is a
``duplicate-effect`` (5); no row is ``failed`` (other than a write-off) while the upstream holds
its effect (3); a hostile call is refused and changes nothing but the audit (6); a changed
payload under a used id is ``idempotency_conflict`` (2).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from typing import Any

import anyio

from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._evidence.invariants import Violation, duplicates_reported
from effectgate._sim import checks
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.venues.upstream import FAULTS, TOOL_SCHEMA, ToolLink, UpstreamTool
from effectgate.errors import EffectgateError

__all__ = ["GatewayActor"]

TOOL, SCOPE, OPERATOR = "gw_charge", "gateway", "sim-gateway-operator"
SDK_SHARE = 0.1
#: The agent's bearer token in the simulated config (a fixed test value, not a credential).
TOKEN = "sim-gateway-agent-token"  # noqa: S105


def _toml(pin: str) -> str:
    return f'''
[gateway]
operation_id = "argument"
schema_check_interval = 0
[store]
url = "sqlite:///:memory:"
[upstreams.sim]
command = "sim-upstream"
[tools.{TOOL}]
upstream = "sim"
tool = "charge"
schema_sha256 = "{pin}"
effect_class = "non_idempotent_mutation"
visibility_horizon = 60
key_retention = 86400
key_argument = "idempotency_key"
id_field = "id"
[tools.{TOOL}.fields.amount]
format = "positive-decimal"
[tools.{TOOL}.venue]
honours_key = "true"
read_view = "lagging"
[tools.{TOOL}.reads]
list_tool = "list_charges"
items_field = "items"
key_field = "key"
id_field = "id"
[policies.{TOOL}]
[tokens.sim-gw-agent]
role = "agent"
scope = "{SCOPE}"
sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
'''


class _SimGateway:
    """What the gateway's handler reads of a :class:`Gateway` (its links are the world's)."""

    def __init__(self) -> None:
        self.service: Any = None
        self.cfg: Any = None
        self.links: dict[str, Any] = {}
        self.passthrough: dict[str, Any] = {}

    def held(self) -> dict[str, tuple[str, str]]:
        return {}

    def is_held(self, name: str) -> bool:
        return False


_GW = _SimGateway()
_BUILT: dict[str, Any] = {}


def _bound() -> Any:
    """The config bound to the upstream's listing (once per process: it is the same each time)."""
    if "bound" not in _BUILT:
        import mcp_types as types

        from effectgate._doors.gateway._config import bind, parse_gateway, schema_digest

        cfg = parse_gateway(_toml(schema_digest(TOOL_SCHEMA)), "sim-gateway.toml")
        listing = [
            types.Tool(name="charge", input_schema=dict(TOOL_SCHEMA)),
            types.Tool(name="list_charges", input_schema={"type": "object"}),
        ]
        _BUILT["cfg"], _BUILT["bound"] = cfg, bind(cfg, {"sim": listing})
    return _BUILT["bound"]


def _server() -> Any:
    if "server" not in _BUILT:
        from effectgate._core.principals import Principal
        from effectgate._doors.gateway._server import build_gateway_server

        who = Principal("sim-gw-agent", "agent", SCOPE)  # type: ignore[arg-type]
        _BUILT["principal"] = who
        _BUILT["server"] = build_gateway_server(_GW, who)  # type: ignore[arg-type]
    return _BUILT["server"]


class _Result:
    def __init__(self, is_error: bool, structured_content: dict[str, Any]) -> None:
        self.is_error, self.structured_content = is_error, structured_content


class GatewayActor:
    """The ``gw-call`` and ``gw-hostile`` steps and their checks."""

    name = "gateway"

    def __init__(self) -> None:
        self.upstream = UpstreamTool(self._arrived)
        self.adapter: Any = None
        self.store: Any = None
        self.built_for: Any = None
        self.serial = 0
        self.sent: list[tuple[str, str]] = []  # (operation id, amount)
        self.arrivals: list[tuple[str, str]] = []  # (key, its row's state on arrival)
        self.checked = 0
        self.listed = 0
        self.calls = 0
        self.step_violations: list[Violation] = []

    def steps(self) -> Steps:
        return (("gw-call", 6), ("gw-hostile", 2))

    def counters(self) -> dict[str, int]:
        return {f"fault:upstream_{k}": n for k, n in sorted(self.upstream.fired.items())}

    def _arrived(self, key: str) -> None:
        scope, _, op_id = key.partition(":")
        row = self.store.get(scope, op_id) if self.store is not None else None
        self.arrivals.append((key, "none" if row is None else row.state.value))

    def configure(self, spec: ProcessSpec) -> None:
        self.store = spec.store
        bound = _bound()
        if self.adapter is None:  # the upstream is outside the process: it outlives crashes
            from effectgate._doors.gateway._adapter import UpstreamAdapter

            link = ToolLink(self.upstream)
            self.adapter = UpstreamAdapter(link, bound.bindings[TOOL], TOOL)  # type: ignore[arg-type]
        if TOOL not in spec.registry.names():
            ac = bound.service.registry.get(TOOL)
            spec.registry = Registry([*(spec.registry.get(n) for n in spec.registry.names()), ac])
        from effectgate._core.policy import LimitPolicy

        spec.policies[TOOL] = LimitPolicy()
        spec.adapters[TOOL] = self.adapter

    def _service(self, world: Any) -> None:
        if self.built_for is world.store and _GW.service is not None:
            return
        from effectgate._service import Service
        from effectgate._service._auth import RateLimiter

        bound = _bound()
        svc = Service(bound.service, adapters={TOOL: self.adapter}, store=world.store,
                      clock=world.clock)  # fmt: skip
        svc.limiter = RateLimiter(svc.config.service.rate_limit, clock=world.clock)
        _GW.service, _GW.cfg, self.built_for = svc, _BUILT["cfg"], world.store

    # --- steps --------------------------------------------------------------------------

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        self._service(world)
        if kind == "gw-hostile":
            return self._hostile(world, rng)
        if rng.random() < 0.05:
            c = world.operator.reset_breaker(TOOL, operator=OPERATOR)
            return f"{TOOL} breaker reset: breaker_open={c.breaker_open}"
        pick = rng.random()
        fault = None
        if self.sent and pick < 0.2:
            what, (op_id, amount) = "retry", self.sent[rng.randrange(len(self.sent))]
        elif self.sent and pick < 0.3:
            op_id, amount = self.sent[rng.randrange(len(self.sent))]
            what, amount = "conflict", f"{amount}1"
        else:
            self.serial += 1
            what, op_id = "new", f"gw-{self.serial:04d}"
            amount = f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}"
            fault = rng.choice(FAULTS) if rng.random() < 0.4 else None
            self.sent.append((op_id, amount))
        known = world.store.get(SCOPE, op_id) is not None
        self.upstream.fault = fault
        try:
            error, code = self._call({"operation_id": op_id, **_charge(amount)}, rng)
        finally:
            self.upstream.fault = None  # a fault the call never reached the upstream with
        if what == "conflict" and known and code != "idempotency_conflict":
            self.step_violations.append(
                Violation(2, f"{SCOPE}:{op_id}: a changed payload through the gateway: {code}")
            )
        return f"{op_id} {what} {amount} fault={fault} -> error={error} {code}"

    def _hostile(self, world: Any, rng: random.Random) -> str:
        rest = ("nan", "unknown-field", "key-argument", "duplicate-key", "bad-id")
        out = []
        for name in ("float-amount", rest[rng.randrange(len(rest))]):
            self.serial += 1
            op_id = f"gw-{self.serial:04d}"
            args: dict[str, Any] = {"operation_id": op_id, **_charge("1.00")}
            meta: dict[str, Any] = {}
            if name == "float-amount":
                args["amount"] = 12.5
            elif name == "nan":
                args["amount"] = float("nan")
            elif name == "unknown-field":
                args["memo"] = "x"
            elif name == "key-argument":
                args["idempotency_key"] = f"{SCOPE}:gw-0001"
            elif name == "duplicate-key":
                from effectgate._doors._shared.mcp_screen import REFUSED_META

                meta[REFUSED_META] = "amount"
            else:
                op_id = args["operation_id"] = f"gw {self.serial:04d}"
            rows = sum(world.store.count_by_state().values())
            calls = sum(self.upstream.calls.values())
            error, code = self._call(args, rng, meta=meta, sdk_ok=not meta)
            changed = (
                (name != "bad-id" and world.store.get(SCOPE, op_id) is not None)
                or sum(world.store.count_by_state().values()) != rows
                or sum(self.upstream.calls.values()) != calls
            )
            if not error or changed:
                self.step_violations.append(
                    Violation(6, f"{SCOPE}:{op_id}: a hostile call ({name}) was accepted or "
                              "changed state")
                )  # fmt: skip
            out.append(f"{op_id} {name} -> error={error} {code}")
        return "; ".join(out)

    def _call(
        self,
        args: dict[str, Any],
        rng: random.Random,
        *,
        meta: dict[str, Any] | None = None,
        sdk_ok: bool = True,
    ) -> tuple[bool, str]:
        """One tool call: to the handler, or (sometimes) through the SDK's client."""
        sdk = rng.random() < SDK_SHARE and sdk_ok

        async def through_the_sdk() -> Any:
            from mcp import Client

            async with Client(_server(), mode="auto") as client:
                return await client.call_tool(TOOL, args)

        async def to_the_handler() -> Any:
            from mcp_types import CallToolRequestParams

            from effectgate._doors._shared.models import problem_for
            from effectgate._doors.gateway._server import _call

            _server()
            params = CallToolRequestParams.model_validate(
                {"name": TOOL, "arguments": args, "_meta": meta or None}
            )
            try:  # what the server's call_tool does around it
                return await _call(_GW, _BUILT["principal"], params)  # type: ignore[arg-type]
            except EffectgateError as exc:
                return _Result(True, problem_for(exc)[1])

        result = anyio.run(through_the_sdk if sdk else to_the_handler)
        out = result.structured_content or {}
        return bool(result.is_error), str(out.get("code") or out.get("state"))

    # --- the checks ---------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        self.calls += 1
        new, self.checked = self.arrivals[self.checked :], len(self.arrivals)
        for key, state in new:
            if state != State.SUBMITTED.value:
                found.append(Violation(3, f"{key} reached the upstream while its row was {state}"))
            if self.upstream.calls[key] == 2:
                found.append(Violation(1, f"{key} reached the upstream twice"))
        up = self.upstream
        if (up.listings != self.listed and world.last_pass_swept) or final:
            self.listed = up.listings
            twice = Counter(k for k, _, _ in up.effects)
            found += duplicates_reported(
                world.store, [k for k, n in twice.items() for _ in range(n) if n > 1]
            )
        if final or self.calls % 10 == 0:
            for row in world.store.list_operations(state=State.FAILED, scope=SCOPE, limit=10**6):
                if not (row.detail or "").startswith(checks.WRITE_OFF) and up.effects_for(
                    row.op_key
                ):
                    found.append(Violation(3, f"{row.op_key} is failed but the upstream holds it"))
        return found


def _charge(amount: str) -> dict[str, Any]:
    return {"account": "acct-1", "amount": amount, "currency": "usd"}
