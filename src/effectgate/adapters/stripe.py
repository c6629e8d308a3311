"""The Stripe adapter (``effectgate[stripe]``): payment intents and refunds (official library).

The operation key goes to Stripe twice: as the ``Idempotency-Key`` of the create call (Stripe
returns the first result for a repeated key within its retention, at least 24 hours), and in the
object's metadata (``effectgate_operation_key``), which is how the reconciler finds the object
again after the key is pruned. Stripe lists by creation time, never by metadata, so this adapter
lists by time window (``listing = time_window``): every payment intent and refund in the account
created in the window, effectgate's or not, so a payment made outside the boundary is an orphan.

``probe`` uses Stripe's search API by default. Search is eventually consistent (Stripe documents
data as usually searchable within a minute and lagging longer during outages): the visibility
horizon of a class on this adapter must cover that lag. Stand-ins without search (localstripe)
use ``probe_via = "list"``, which scans the lookback window instead.

Outcomes: a 400/401/402/403/404 answer is a provable refusal (``not_applied`` with the error code
as proof); a connection error, timeout, 5xx, 429 or an idempotency conflict raises
:class:`~effectgate.errors.AdapterError` (unknown: the reconciler settles it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import requests
import stripe

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    Listing,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    check_call_timeout,
    refusal,
    unkeyed,
    within,
    within_each,
)
from effectgate.adapters._credentials import Secret, load_secret, scrub
from effectgate.errors import AdapterError, ConfigError

__all__ = ["KEY_FIELD", "StripeAdapter"]

#: The metadata field carrying the operation key on every object this adapter creates.
KEY_FIELD = "effectgate_operation_key"

_OPERATIONS = ("payment", "refund")
#: Payment intents in these states moved no money and never will: not an effect.
_NO_EFFECT = frozenset({"requires_payment_method", "canceled"})
_REFUSALS = (
    stripe.CardError,
    stripe.InvalidRequestError,
    stripe.AuthenticationError,
    stripe.PermissionError,
)


class StripeAdapter(Adapter):
    """Creates payment intents (confirmed at once) and refunds; lists both by time window.

    ``operations`` maps each action class name to ``"payment"`` or ``"refund"``. A payment's
    effect fields are ``amount`` (integer minor units), ``currency`` and ``payment_method``; a
    refund's are ``payment_intent`` and optionally ``amount``.
    """

    name = "stripe"
    listing = Listing.TIME_WINDOW

    def __init__(
        self,
        *,
        credential_env: str | None = None,
        credential_file: str | None = None,
        credential_hook: str | None = None,
        endpoint: str | None = None,
        operations: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        listing_lookback: float = 86400.0,
        probe_via: str = "search",
        server_created_filter: bool = True,
    ) -> None:
        self._secret: Secret = load_secret(
            "stripe", env=credential_env, file=credential_file, hook=credential_hook
        )
        self._ops = dict(operations or {"create_payment": "payment", "refund_payment": "refund"})
        for action, op in self._ops.items():
            if op not in _OPERATIONS:
                raise ConfigError(
                    f"stripe: operation {op!r} of {action!r} is not one of {_OPERATIONS}"
                )
        self._timeout = check_call_timeout(timeout, "stripe: timeout")
        if not listing_lookback > 0:
            raise ConfigError("stripe: listing_lookback must be positive")
        if probe_via not in ("search", "list"):
            raise ConfigError('stripe: probe_via must be "search" or "list"')
        self.listing_lookback = self._lookback = float(listing_lookback)
        self._probe_via = probe_via
        self._created_filter = server_created_filter
        bases: dict[str, str] = {"api": endpoint} if endpoint else {}
        # trust_env off: no proxy or netrc from the environment changes where the key goes.
        session = requests.Session()
        session.trust_env = False
        self._client = stripe.StripeClient(
            self._secret.reveal(),
            base_addresses=bases,  # type: ignore[arg-type]
            max_network_retries=0,  # effectgate never retries a mutation (invariant 9)
            http_client=stripe.RequestsClient(timeout=float(timeout), session=session),
        )

    def __repr__(self) -> str:
        return f"StripeAdapter(operations={self._ops!r})"

    # --- execute --------------------------------------------------------------------------

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        op = self._ops.get(request.action)
        if op is None:
            raise AdapterError(f"stripe: no operation configured for action {request.action!r}")
        key = request.operation_key
        options: dict[str, Any] = {"idempotency_key": key}
        meta = {KEY_FIELD: key}
        try:
            if op == "payment":
                create: Any = self._client.v1.payment_intents.create
                obj: Any = create(
                    params={
                        "amount": _int(request.effect, "amount"),
                        "currency": str(request.effect["currency"]).lower(),
                        "payment_method": str(request.effect["payment_method"]),
                        "confirm": True,
                        "payment_method_types": ["card"],
                        "metadata": meta,
                    },
                    options=options,
                )
            else:
                params: dict[str, Any] = {
                    "payment_intent": str(request.effect["payment_intent"]),
                    "metadata": meta,
                }
                if "amount" in request.effect:
                    params["amount"] = _int(request.effect, "amount")
                obj = self._client.v1.refunds.create(params=params, options=options)  # type: ignore[arg-type]
        except stripe.IdempotencyError as exc:
            # The key is known to Stripe with other parameters: the first call may have landed.
            raise AdapterError(f"stripe: idempotency conflict: {self._text(exc)}") from None
        except _REFUSALS as exc:
            code = getattr(exc, "code", None) or type(exc).__name__
            status = getattr(exc, "http_status", None)
            return Receipt(
                Outcome.NOT_APPLIED,
                proof=refusal(f"stripe {status} {code}: {self._text(exc)}"[:500]),
            )
        except stripe.StripeError as exc:
            raise AdapterError(
                f"stripe: outcome unknown: {type(exc).__name__}: {self._text(exc)}"
            ) from None
        if op == "payment" and obj.status in _NO_EFFECT:
            return Receipt(
                Outcome.NOT_APPLIED,
                proof=refusal(
                    f"stripe payment_intent {obj.id} {obj.status}", reference=str(obj.id)
                ),
            )
        return Receipt(Outcome.APPLIED, venue_id=str(obj.id), detail={"status": str(obj.status)})

    # --- reading --------------------------------------------------------------------------

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        # The SDK's client takes its timeout once, per HTTP request; the probe as a whole
        # (several pages) is bounded here.
        budget = call_budget(timeout, self._timeout)
        return within(budget, lambda: self._probe(operation_key), "stripe: probe")

    def _probe(self, operation_key: str) -> list[str]:
        try:
            if self._probe_via == "search":
                query = f"metadata['{KEY_FIELD}']:'{_quote(operation_key)}'"
                ids = [
                    str(o.id)
                    for o in self._client.v1.payment_intents.search(
                        params={"query": query}
                    ).auto_paging_iter()
                    if o.status not in _NO_EFFECT
                ]
                # Refunds have no search API: scan the window for them.
                ids += [
                    r.venue_id
                    for r in self._refunds(time.time() - self._lookback, time.time())
                    if r.operation_key == operation_key
                ]
                return sorted(ids)
            now = time.time()
            return sorted(
                r.venue_id
                for r in self._window(now - self._lookback, now + 1)
                if r.operation_key == operation_key
            )
        except stripe.StripeError as exc:
            raise AdapterError(
                f"stripe: probe failed: {type(exc).__name__}: {self._text(exc)}"
            ) from None

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        raise AdapterError("stripe lists by time window, not by key: use window_records()")

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        budget = call_budget(timeout, self._timeout)
        return within_each(budget, self._window(start, end), "stripe: listing")

    def _window(self, start: float, end: float) -> Iterator[VenueRecord]:
        try:
            yield from self._payments(start, end)
            yield from self._refunds(start, end)
        except stripe.StripeError as exc:
            raise AdapterError(
                f"stripe: listing failed: {type(exc).__name__}: {self._text(exc)}"
            ) from None

    def _list_params(self, start: float, end: float) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": 100}
        if self._created_filter:
            params["created"] = {"gte": int(start), "lte": int(end) + 1}
        return params

    def _payments(self, start: float, end: float) -> Iterator[VenueRecord]:
        pages = self._list(self._client.v1.payment_intents, self._list_params(start, end))
        for o in pages.auto_paging_iter():
            if start <= o.created <= end + 1 and o.status not in _NO_EFFECT:
                yield _record(o)

    def _refunds(self, start: float, end: float) -> Iterator[VenueRecord]:
        pages = self._list(self._client.v1.refunds, self._list_params(start, end))
        for o in pages.auto_paging_iter():
            if start <= o.created <= end + 1 and o.status not in ("failed", "canceled"):
                yield _record(o)

    @staticmethod
    def _list(service: Any, params: dict[str, Any]) -> Any:
        return service.list(params=params)

    def _text(self, exc: BaseException) -> str:
        return scrub(str(getattr(exc, "user_message", None) or exc), self._secret)

    def close(self) -> None:
        return None


def _record(obj: Any) -> VenueRecord:
    meta = obj.metadata.to_dict() if obj.metadata is not None else {}
    key = meta.get(KEY_FIELD)
    return VenueRecord(str(key) if key else unkeyed(str(obj.id)), str(obj.id))


def _int(effect: Mapping[str, str | int | bool], name: str) -> int:
    value = effect[name]
    if isinstance(value, bool) or not str(value).isdigit():
        raise AdapterError(f"stripe: {name} must be a whole number of minor units")
    return int(value)


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
