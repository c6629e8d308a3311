"""What several actors build the same way: an order class of their own, and an executor of
their own on the world's ledger."""

from __future__ import annotations

from typing import Any

from effectgate._core.intent import ActionClass, EffectClass, IntentBase
from effectgate._execute.executor import Gate

__all__ = ["order_class", "process_gate"]


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
