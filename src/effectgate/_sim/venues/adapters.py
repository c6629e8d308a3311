"""Adapters over the simulated venues of :mod:`effectgate._sim.venues.models`.

Each declares what an effectgate adapter declares: how its venue is listed (``listing``,
``listing_lookback``) and, as ``contract``, the :class:`~effectgate._core.venue.VenueContract`
its action class must carry (docs/adapters.md): ``honours_key = "true"`` only where the venue
deduplicates by the key (the window and token venues, and the lagging one), ``"false"`` where it
cannot (mail, keyless), so effectgate claims no more than at-most-once dispatch with
reconciliation there and relies on the sweep to report every duplicate.

Outcomes follow the real adapters: a refusal is ``not_applied`` with the venue's refusal as
proof; a lost request or reply, and a parameter mismatch under a known key (Stripe's
idempotency error, EC2's ``IdempotentParameterMismatch``: the first request may have landed),
raise :class:`~effectgate.errors.AdapterError` (unknown: the reconciler settles it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    Listing,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    refusal,
    unkeyed,
)
from effectgate._sim.venues import models
from effectgate.adapters import email as _email
from effectgate.errors import AdapterError

__all__ = [
    "KeylessAdapter",
    "LaggingAdapter",
    "MailAdapter",
    "SimAdapter",
    "TokenAdapter",
    "WindowAdapter",
]

#: Time-window venues keep listing everything the simulation made (a run spans a few days).
LOOKBACK = 30 * 86_400.0
_HONOURED = VenueContract(honours_key=KeyHonour.HONOURED, read_view=ReadView.LAGGING)
_IGNORED = VenueContract(honours_key=KeyHonour.IGNORED, read_view=ReadView.LAGGING)


class SimAdapter(Adapter):
    """Shared: deliver, probe and list against one :class:`~models.SimVenue`."""

    contract = _HONOURED
    #: A time-window listing's order: newest first (Stripe, a mailbox) or oldest first (EC2).
    newest_first = False

    def __init__(self, venue: models.SimVenue) -> None:
        self.venue = venue

    def tag(self, operation_key: str) -> str:
        """What the request carries to the venue in place of (or as) the key."""
        return operation_key

    def key_of(self, effect: models.Effect) -> str:
        """The operation key the adapter reads back from a record (the sweep's key)."""
        return effect.tag

    def deliver(self, request: OutboundRequest) -> Receipt:
        """Send ``request`` to the venue once (also the network's redelivery of a copy)."""
        try:
            made = self.venue.deliver(
                request.operation_key, self.tag(request.operation_key), request.effect
            )
        except models.Refused as exc:
            return Receipt(Outcome.NOT_APPLIED, proof=refusal(f"venue refused: {exc}"))
        except (ConnectionError, models.ParameterMismatch) as exc:
            raise AdapterError(f"{self.name}: outcome unknown: {exc}") from None
        return Receipt(Outcome.APPLIED, venue_id=made.venue_id)

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        call_budget(timeout)
        return self.deliver(request)

    def _visible(self) -> list[models.Effect]:
        self.venue.listings += 1
        return self.venue.visible()

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        call_budget(timeout)
        return [e.venue_id for e in self._visible() if self.key_of(e) == operation_key]

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        call_budget(timeout)
        every = sorted(VenueRecord(self.key_of(e), e.venue_id) for e in self._visible())
        return [r for r in every if after is None or r > after][:limit]

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        call_budget(timeout)
        shown = self._visible()  # creation order; the reconciler sorts the window itself
        for e in reversed(shown) if self.newest_first else shown:
            if start <= e.created_at <= end:
                yield VenueRecord(self.key_of(e), e.venue_id)


class WindowAdapter(SimAdapter):
    """Stripe-like: the key as ``Idempotency-Key`` and in the metadata; listed by time."""

    name = "sim-window"
    listing = Listing.TIME_WINDOW
    listing_lookback = LOOKBACK

    newest_first = True  # as Stripe lists


def client_token(operation_key: str) -> str:
    """EC2's ClientToken as :func:`effectgate.adapters.aws.client_token` derives it (that module
    needs ``boto3``, an extra the simulator must not require)."""
    if len(operation_key) <= 64 and operation_key.isascii():
        return operation_key
    return "eg-" + hashlib.sha256(operation_key.encode("utf-8")).hexdigest()[:61]


class TokenAdapter(SimAdapter):
    """EC2-like: a client token per key; the instance tagged with the key; listed by time."""

    name = "sim-token"
    listing = Listing.TIME_WINDOW
    listing_lookback = LOOKBACK

    def tag(self, operation_key: str) -> str:
        return client_token(operation_key)


class MailAdapter(SimAdapter):
    """Email-like: no key; the Message-ID carries it (:func:`effectgate.adapters.email.
    message_id`), and the mailbox listing is read back through it."""

    name = "sim-mail"
    listing = Listing.TIME_WINDOW
    listing_lookback = LOOKBACK
    contract = _IGNORED
    domain = "sim.example"
    newest_first = True  # as a mailbox lists

    def tag(self, operation_key: str) -> str:
        return _email.message_id(operation_key, self.domain)

    def key_of(self, effect: models.Effect) -> str:
        # Looked up on the module at each call, so a planted bug there reaches the sweep.
        key = _email.key_of_message_id(effect.tag)
        return unkeyed(effect.venue_id) if key is None else key


class KeylessAdapter(SimAdapter):
    """A venue that ignores keys: the key is a reference field it lists by."""

    name = "sim-keyless"
    contract = _IGNORED


class LaggingAdapter(SimAdapter):
    """A venue that honours the key but whose listing is eventually consistent."""

    name = "sim-lagging"


class UpstreamLink:
    """An in-memory stand-in for the MCP gateway's :class:`~effectgate._doors.gateway._upstream.
    UpstreamLink`: an upstream MCP server with a ``charge`` tool that honours an
    ``idempotency_key`` argument (for :data:`~models.KEY_WINDOW`) and a ``list_charges`` read
    tool, over a :class:`~models.WindowVenue`. Calls answer at once, on the caller's thread."""

    def __init__(self, venue: models.WindowVenue) -> None:
        from effectgate._doors.gateway._upstream import UpstreamSpec

        self.venue = venue
        self.spec = UpstreamSpec(name="sim-upstream", command="sim")

    def call(self, tool: str, arguments: Any, timeout: float, guard: Any = None) -> Any:
        import mcp_types as types

        if guard is not None:
            guard()
        if tool == "list_charges":
            shown = self.venue_listing()
            items = [{"key": e.tag, "id": e.venue_id} for e in shown]
            return types.CallToolResult(content=[], structured_content={"items": items})
        args = dict(arguments)
        key = str(args.pop("idempotency_key"))
        try:
            made = self.venue.deliver(key, key, args)
        except models.Refused as exc:
            text = types.TextContent(type="text", text=f"refused: {exc}")
            return types.CallToolResult(content=[text], is_error=True)
        return types.CallToolResult(content=[], structured_content={"id": made.venue_id})

    def venue_listing(self) -> list[models.Effect]:
        self.venue.listings += 1
        return self.venue.visible()


def upstream_adapter(venue: models.WindowVenue) -> Adapter:
    """The gateway's real :class:`~effectgate._doors.gateway._adapter.UpstreamAdapter` for a
    governed tool ``charge``, in front of :class:`UpstreamLink` (needs the ``server`` extra)."""
    from effectgate._doors.gateway._adapter import ReadTools, ToolBinding
    from effectgate._doors.gateway._adapter import UpstreamAdapter as Real

    reads = ReadTools(list_tool="list_charges", items_field="items", key_field="key", id_field="id")
    binding = ToolBinding(
        tool="charge",
        key_argument="idempotency_key",
        number_fields=frozenset({"amount"}),
        id_field="id",
        reads=reads,
    )
    return Real(UpstreamLink(venue), binding, "sim-gateway")  # type: ignore[arg-type]
