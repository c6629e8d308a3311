"""A simulated upstream MCP tool behind the gateway actor (:mod:`effectgate._sim.actors.gateway`).

:class:`UpstreamTool` is the world's side: a ``charge`` tool that honours its
``idempotency_key`` argument (a key seen before answers the first effect's id) and a
``list_charges`` read tool listing every effect with its key. It keeps its ground truth: every
effect with the key it was made under, and every ``charge`` call per key. One fault may be
armed for the next call (:data:`FAULTS`); what it does is the upstream's or the network's
doing, never the boundary's. :class:`ToolLink` stands where the gateway's
:class:`~effectgate._doors.gateway._upstream.UpstreamLink` stands: it answers on the caller's
thread, in memory (needs the ``mcp`` package for its result type).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["FAULTS", "TOOL_SCHEMA", "ToolLink", "UpstreamTool"]

#: ``lose``: applied, the reply lost (the connection broke); ``timeout``: no answer in time,
#: not applied; ``slow``: applied, answered after the timeout; ``twice``: the upstream's own
#: retry applied it twice (two effects under one key; it answers the first).
FAULTS = ("lose", "timeout", "slow", "twice")

#: The ``charge`` tool's ``inputSchema`` as the upstream lists it (the gateway pins its digest).
TOOL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "account": {"type": "string", "enum": ["acct-1", "acct-2"]},
        "amount": {"type": "number"},
        "currency": {"type": "string", "enum": ["usd", "eur"]},
        "idempotency_key": {"type": "string"},
    },
    "required": ["account", "amount", "currency", "idempotency_key"],
}


class UpstreamTool:
    """The upstream's ground truth and its faults."""

    def __init__(self, on_call: Callable[[str], None]) -> None:
        #: Called with the key of every ``charge`` call as it arrives (before it applies).
        self.on_call = on_call
        self.effects: list[tuple[str, str, dict[str, Any]]] = []  # (key, id, arguments)
        self.calls: Counter[str] = Counter()
        self.fault: str | None = None
        self.fired: Counter[str] = Counter()  # faults that reached a call, by kind
        self.listings = 0

    def effects_for(self, key: str) -> list[str]:
        return [vid for k, vid, _ in self.effects if k == key]

    def charge(self, arguments: Mapping[str, Any]) -> dict[str, Any] | str:
        """The tool's answer (a result object, or an error text); raises for a lost reply."""
        args = dict(arguments)
        key = str(args.pop("idempotency_key", ""))
        self.on_call(key)
        self.calls[key] += 1
        fault, self.fault = self.fault, None
        if fault is not None:
            self.fired[fault] += 1
        if fault == "timeout":
            raise TimeoutError("upstream: no answer in time")
        known = [(vid, a) for k, vid, a in self.effects if k == key]
        if known:
            vid, first = known[0]
            return {"id": vid} if first == args else "the key was used with other arguments"
        made = self._apply(key, args)
        if fault == "twice":
            self._apply(key, args)
        if fault == "lose":
            raise ConnectionResetError("upstream: the connection broke before the reply")
        if fault == "slow":
            raise TimeoutError("upstream: answered after the timeout")
        return {"id": made}

    def _apply(self, key: str, args: dict[str, Any]) -> str:
        vid = f"ch-{len(self.effects) + 1:04d}"
        self.effects.append((key, vid, args))
        return vid

    def listing(self) -> list[dict[str, str]]:
        self.listings += 1
        return [{"key": k, "id": vid} for k, vid, _ in self.effects]


class ToolLink:
    """The gateway's link to :class:`UpstreamTool`, in memory."""

    def __init__(self, tool: UpstreamTool) -> None:
        from effectgate._doors.gateway._upstream import UpstreamSpec

        self.tool = tool
        self.spec = UpstreamSpec(name="sim-upstream", command="sim-upstream")

    def call(
        self, name: str, arguments: Mapping[str, Any], timeout: float, guard: Any = None
    ) -> Any:
        import mcp_types as types

        if guard is not None:
            guard()
        if name == "list_charges":
            items = self.tool.listing()
            return types.CallToolResult(content=[], structured_content={"items": items})
        answer = self.tool.charge(arguments)
        if isinstance(answer, str):
            text = types.TextContent(type="text", text=answer)
            return types.CallToolResult(content=[text], is_error=True)
        return types.CallToolResult(content=[], structured_content=answer)
