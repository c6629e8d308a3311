"""Reference action classes for the paper venue: submit an order, cancel an order.

They double as the worked example of how to declare an action class: a strict intent model
(effect fields only; the audit fields come from :class:`~effectgate._core.intent.IntentBase`),
ASCII identifiers, decimal strings, and the venue facts (horizon, key retention).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Literal, Self

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from effectgate._core.intent import (
    ActionClass,
    AsciiPattern,
    EffectClass,
    IntentBase,
    PositiveDecimal,
    Registry,
)

__all__ = [
    "EXAMPLE_ORDER",
    "AccountId",
    "CancelOrder",
    "InstrumentId",
    "OrderRef",
    "StrategyId",
    "SubmitOrder",
    "cancel_order_class",
    "default_registry",
    "notional",
    "submit_order_class",
]

#: Venue symbols: upper-case ASCII, e.g. "XYZ-PERP". A Cyrillic or fullwidth look-alike fails.
InstrumentId = Annotated[str, AsciiPattern(r"^[A-Z0-9][A-Z0-9._-]{0,31}$", max_length=32)]
AccountId = Annotated[str, AsciiPattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]
StrategyId = Annotated[str, AsciiPattern(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
#: A venue order id or an effectgate operation id.
OrderRef = Annotated[str, AsciiPattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", max_length=128)]


class SubmitOrder(IntentBase):
    """Place an order. ``limit_price`` is required for limit orders and refused for market ones."""

    action: Literal["submit_order"]
    instrument: InstrumentId
    side: Literal["buy", "sell"]
    order_type: Literal["limit", "market"]
    quantity: PositiveDecimal
    limit_price: PositiveDecimal | None = None
    account: AccountId | None = None
    # Sent to the venue as the order's strategy tag, so it is an effect field.
    strategy_id: StrategyId | None = None

    @model_validator(mode="after")
    def _price_matches_order_type(self) -> Self:
        # ctx["field"] lets the registry name the field for an object-level rule.
        if self.order_type == "limit" and self.limit_price is None:
            raise PydanticCustomError(
                "missing", "limit_price is required for a limit order", {"field": "limit_price"}
            )
        if self.order_type == "market" and self.limit_price is not None:
            raise PydanticCustomError(
                "not_allowed",
                "limit_price must be absent for a market order",
                {"field": "limit_price"},
            )
        return self


class CancelOrder(IntentBase):
    """Cancel one order, named by the venue's id or the operation id that placed it."""

    action: Literal["cancel_order"]
    instrument: InstrumentId
    order_ref: OrderRef


def notional(effect: Mapping[str, str | int | bool]) -> Decimal | None:
    """The value measure of a canonical ``submit_order`` effect: ``quantity * limit_price``.

    A market order carries no price at proposal time, so its value is unknown (``None``) and a
    policy with a value ceiling refuses it: an unmeasurable order is never under a limit.
    """
    price = effect.get("limit_price")
    if price is None:
        return None
    return Decimal(str(effect["quantity"])) * Decimal(str(price))


def submit_order_class(
    adapter: str = "paper", visibility_horizon: float = 60.0, key_retention: float = 86400.0
) -> ActionClass:
    """``submit_order``: non-idempotent (a second send is a second order), valued by notional."""
    return ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter=adapter,
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=visibility_horizon,
        key_retention=key_retention,
        value_of=notional,
        target_field="instrument",
    )


def cancel_order_class(
    adapter: str = "paper", visibility_horizon: float = 60.0, key_retention: float = 86400.0
) -> ActionClass:
    """``cancel_order``: idempotent (cancelling twice leaves the order cancelled once)."""
    return ActionClass(
        name="cancel_order",
        model=CancelOrder,
        adapter=adapter,
        effect_class=EffectClass.IDEMPOTENT_MUTATION,
        visibility_horizon=visibility_horizon,
        key_retention=key_retention,
        target_field="instrument",
    )


def default_registry(adapter: str = "paper") -> Registry:
    """A registry holding both reference classes, bound to ``adapter``."""
    return Registry([submit_order_class(adapter), cancel_order_class(adapter)])


#: The seed's example intent (with a well-formed context digest).
EXAMPLE_ORDER: dict[str, object] = {
    "intent_version": "1",
    "action": "submit_order",
    "instrument": "XYZ-PERP",
    "side": "buy",
    "order_type": "limit",
    "quantity": "4",
    "limit_price": "100.00",
    "strategy_id": "st-114",
    "rationale": "free text, for the audit record only, never parsed by the executor",
    "context_digest": "sha256:" + "3f" * 32,
    "proposed_by": {"model": "example-model", "harness_version": "0.1", "session": "s-1"},
}
