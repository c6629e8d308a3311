"""The adapter of a governed upstream tool: the upstream call is the venue call.

It fits the adapter protocol (``execute``/``probe``/``records``) like any venue's adapter, so
the executor journals before it and the standing reconciler enumerates the upstream through it.

* ``execute`` sends the validated effect fields (never the audit fields, never anything else the
  agent wrote) as the upstream tool's arguments, with the operation key in the argument the
  config names (``key_argument``). The upstream's answer is the receipt: a result is
  ``applied``; an error result, a timeout or a broken connection after the request left is
  ``unknown`` (the row stays uncertain for the reconciler), never ``failed``.
* ``probe`` and ``records`` call the upstream's own read tools named in the config (a lookup by
  key and a listing), and find the operation key and the upstream's id in their results. A
  governed tool without them has no read view: it lists by ``probe`` only, and ``probe``
  raises (the upstream cannot answer) rather than return an empty list a reconciler could read
  as absence; the class declares ``read_view = "none"`` (its uncertain rows go to the
  operator's queue).
* The conformance kit names this adapter ``mcp-upstream`` (:attr:`UpstreamAdapter.kind`): a
  tool's ``[tools.NAME.venue] conformance_report`` is a report of that adapter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import mcp_types as types

from effectgate._doors.gateway._upstream import CallRefused, UpstreamLink
from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    UNKEYED_PREFIX,
    Adapter,
    Listing,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    not_sent,
    unkeyed,
)
from effectgate.errors import AdapterError

__all__ = ["UNKEYED_PREFIX", "ReadTools", "ToolBinding", "UpstreamAdapter", "result_text"]


@dataclass(frozen=True)
class ReadTools:
    """The upstream's read tools for one governed tool, and where the key and id are."""

    list_tool: str
    #: Field of the listing's structured result holding the array of records.
    items_field: str
    key_field: str
    id_field: str
    list_arguments: Mapping[str, Any] = field(default_factory=dict)
    lookup_tool: str | None = None
    #: The lookup's argument that takes the operation key.
    lookup_argument: str | None = None
    #: Field of the lookup's structured result holding its array (default: ``items_field``).
    lookup_items_field: str | None = None


@dataclass(frozen=True)
class ToolBinding:
    """How one governed tool maps onto its upstream tool."""

    tool: str
    key_argument: str | None = None
    #: Decimal fields the upstream takes as JSON numbers (sent only when exactly representable).
    number_fields: frozenset[str] = frozenset()
    #: Field of the call's structured result holding the upstream's id for the effect.
    id_field: str | None = None
    reads: ReadTools | None = None


class UpstreamAdapter(Adapter):
    """The executor's view of one governed upstream tool."""

    #: What a conformance report of this adapter names (``name`` is the governed tool's).
    kind = "mcp-upstream"

    def __init__(
        self,
        link: UpstreamLink,
        binding: ToolBinding,
        name: str,
        held: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._link = link
        self.binding = binding
        self.name = name
        self._held = held
        # No read tools, no read view: nothing to list, and probe cannot answer.
        self.listing = Listing.PROBE if binding.reads is None else Listing.KEY_ORDER

    def _guard(self) -> None:
        if self._held(self.name):
            raise CallRefused(self.name)

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        args: dict[str, Any] = {}
        for key, value in request.effect.items():
            if key == "action":
                continue
            if key in self.binding.number_fields and isinstance(value, str):
                number = _exact_number(value)
                if number is None:
                    # Nothing was sent: the gateway's own refusal is the proof.
                    return Receipt(
                        Outcome.NOT_APPLIED,
                        proof=not_sent(
                            f"gateway: {key}={value} has no exact JSON number form; not sent"
                        ),
                    )
                args[key] = number
            else:
                args[key] = value
        if self.binding.key_argument is not None:
            args[self.binding.key_argument] = request.operation_key
        try:
            result = self._link.call(self.binding.tool, args, timeout, self._guard)
        except CallRefused:
            # Checked after (re)connecting, before sending: the upstream's schema drifted.
            return Receipt(
                Outcome.NOT_APPLIED,
                proof=not_sent(
                    "gateway: the upstream's schema no longer matches its pin; not sent"
                ),
            )
        except TimeoutError:
            return Receipt(
                Outcome.UNKNOWN,
                detail={"error": f"upstream {self._link.spec.name} did not answer in {timeout:g}s"},
            )
        except Exception as exc:
            why = exc.message if isinstance(exc, AdapterError) else type(exc).__name__
            return Receipt(
                Outcome.UNKNOWN,
                detail={"error": f"upstream {self._link.spec.name} call broke off ({why})"[:300]},
            )
        digest = hashlib.sha256(result_text(result).encode()).hexdigest()
        if result.is_error:
            # The request left: an error result does not prove the effect did not happen.
            return Receipt(
                Outcome.UNKNOWN,
                detail={
                    "error": f"upstream tool error: {result_text(result)[:200]}",
                    "result_sha256": digest,
                },
            )
        venue_id = None
        if self.binding.id_field is not None:
            found = structured(result).get(self.binding.id_field)
            venue_id = str(found) if isinstance(found, str | int) and found != "" else None
            if venue_id is None:
                return Receipt(
                    Outcome.UNKNOWN,
                    detail={
                        "error": f"upstream result has no {self.binding.id_field!r}",
                        "result_sha256": digest,
                    },
                )
        return Receipt(
            Outcome.APPLIED,
            venue_id=venue_id or request.operation_key,
            detail={"result_sha256": digest},
        )

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        budget = call_budget(timeout, self._link.spec.timeout)
        reads = self.binding.reads
        if reads is None:
            raise AdapterError(
                f"upstream {self._link.spec.name}: {self.name} has no read tools (no read "
                "view); an operator settles its uncertain rows"
            )
        if reads.lookup_tool is None or reads.lookup_argument is None:
            return [r.venue_id for r in self._all(budget) if r.operation_key == operation_key]
        result = self._read(reads.lookup_tool, {reads.lookup_argument: operation_key}, budget)
        items = _items(result, reads.lookup_items_field or reads.items_field, reads.lookup_tool)
        return sorted(
            rec.venue_id for rec in _records(items, reads) if rec.operation_key == operation_key
        )

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        # MCP listings have no agreed key order or cursor: the listing is read whole and
        # sorted here (bounded by what the upstream returns in one answer).
        rows = self._all(call_budget(timeout, self._link.spec.timeout))
        if after is not None:
            rows = [r for r in rows if r > after]
        return rows[:limit]

    def _all(self, budget: float) -> list[VenueRecord]:
        reads = self.binding.reads
        if reads is None:
            return []
        result = self._read(reads.list_tool, dict(reads.list_arguments), budget)
        return sorted(_records(_items(result, reads.items_field, reads.list_tool), reads))

    def _read(self, tool: str, args: dict[str, Any], budget: float) -> types.CallToolResult:
        try:
            result = self._link.call(tool, args, budget)
        except AdapterError:
            raise
        except Exception as exc:
            raise AdapterError(
                f"upstream {self._link.spec.name}: {tool} failed ({type(exc).__name__})"
            ) from None
        if result.is_error:
            raise AdapterError(
                f"upstream {self._link.spec.name}: {tool} answered an error: "
                f"{result_text(result)[:200]}"
            )
        return result


def result_text(result: types.CallToolResult) -> str:
    """The result's text content (joined), or its structured content as JSON."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if texts:
        return "\n".join(texts)
    return json.dumps(result.structured_content, sort_keys=True, default=str)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The result's structured content, or its text read as one JSON object (many servers
    answer JSON as text only), or an empty dict."""
    if isinstance(result.structured_content, dict):
        return result.structured_content
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if len(texts) == 1:
        try:
            data = json.loads(texts[0])
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def _items(result: types.CallToolResult, items_field: str, tool: str) -> list[Any]:
    items = structured(result).get(items_field)
    if not isinstance(items, list):
        raise AdapterError(f"{tool}: its structured result has no array {items_field!r}")
    return items


def _records(items: list[Any], reads: ReadTools) -> list[VenueRecord]:
    out: list[VenueRecord] = []
    for item in items:
        if not isinstance(item, dict):
            raise AdapterError(f"{reads.list_tool}: a listed record is not an object")
        vid = item.get(reads.id_field)
        if not isinstance(vid, str | int) or isinstance(vid, bool) or vid == "":
            raise AdapterError(f"{reads.list_tool}: a listed record has no {reads.id_field!r}")
        key = item.get(reads.key_field)
        if not isinstance(key, str) or not key:
            # An effect made without an operation key was made outside the boundary.
            key = unkeyed(str(vid))
        out.append(VenueRecord(key, str(vid)))
    return out


def _exact_number(text: str) -> int | float | None:
    value = Decimal(text)
    if value == value.to_integral_value():
        return int(value)
    as_float = float(value)
    return as_float if Decimal(repr(as_float)) == value else None
