"""What several actors build the same way: an order class of their own, an executor of
their own on the world's ledger, and a tap on their venue."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Generic, TypeVar

from effectgate._core.intent import ActionClass, EffectClass, IntentBase
from effectgate._execute.adapter import Adapter, OutboundRequest, Receipt
from effectgate._execute.executor import Gate
from effectgate.adapters._counting import CountingAdapter

__all__ = ["Tap", "order_class", "process_gate", "quantity_value"]

T = TypeVar("T")


def quantity_value(effect: Mapping[str, Any]) -> Decimal:
    """An order's value as an actor's class measures it: its quantity."""
    return Decimal(str(effect["quantity"]))


def order_class(
    name: str,
    model: type[IntentBase],
    adapter: str,
    *,
    horizon: float = 60.0,
    retention: float = 86400.0,
    **more: Any,
) -> ActionClass:
    """An actor's order class: a second send is a second order, targeted by instrument."""
    return ActionClass(
        name=name,
        model=model,
        adapter=adapter,
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=horizon,
        key_retention=retention,
        target_field="instrument",
        **more,
    )


class Tap(CountingAdapter, Generic[T]):
    """Notes, as each request reaches the venue, what ``note`` says of the world then."""

    def __init__(self, inner: Adapter, note: Callable[[OutboundRequest], T]) -> None:
        super().__init__(inner)
        self.note = note
        self.seen: list[tuple[OutboundRequest, T]] = []

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        self.seen.append((request, self.note(request)))
        return super().execute(request, timeout=timeout)


def process_gate(world: Any, process_id: str, **kwargs: Any) -> Gate:
    """An executor of the actor's own on the world's current ledger connection, classes,
    adapters, policy and clock (``kwargs``: its pipeline, or another policy)."""
    return Gate(
        **{
            "store": world.store,
            "registry": world.registry,
            "adapters": world.adapters,
            "policy": world.policy,
            "clock": world.clock,
            "process_id": process_id,
            **kwargs,
        }
    )
