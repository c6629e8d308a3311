"""A run admitted under a plan reservation, and the plan's value dimension, as values (pure).

A run **admitted under a leaf reservation** gets its run budget from the leaf's allocation
(steps, tokens, tool calls, deadline), so what the run may use is what the leaf holds; settling
the run settles the leaf from the run's stored usage (:func:`run_settlement`).

The **value dimension** (``value_micros``, the optional seventh) is charged at dispatch: the
summed declared value of the run's dispatched effects, read from the one record of dispatched
value (``dispatch_log``), must stay within the leaf's allocation. A class with no value measure
cannot be charged, so it is refused wherever the plan bounds value (deny by default, as the
envelope's exposure axis does).
"""

from __future__ import annotations

from dataclasses import dataclass

from effectgate._core.budgets import VALUE, Resources, RunBudget, RunUsage, saturating_add
from effectgate._core.plan_values import ReservationKind, ReservationRequest, Settlement
from effectgate.errors import InvalidBudget

__all__ = [
    "LeafValue",
    "RunLink",
    "ValueCharge",
    "run_budget_for",
    "run_settlement",
    "value_charge",
]


@dataclass(frozen=True, slots=True)
class RunLink:
    """A run's place in a plan: the leaf reservation it was admitted under."""

    scope: str
    run_id: str
    plan_id: str
    reservation_id: str
    settled_at: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "run_id": self.run_id,
            "plan_id": self.plan_id,
            "reservation_id": self.reservation_id,
            "settled_at": self.settled_at,
        }


def run_budget_for(request: ReservationRequest) -> RunBudget:
    """The run budget a leaf's allocation gives its run. A run budget's zero means no limit
    but a plan's zero permits nothing, so a leaf that allocates no steps, tokens or tool calls
    cannot carry a run (refused, naming the dimensions)."""
    if request.kind is not ReservationKind.LEAF:
        raise InvalidBudget(
            f"reservation {request.reservation_id!r} is a branch: a run spends a leaf"
        )
    a = request.allocation
    zero = [d for d in ("steps", "tokens", "tool_calls") if not getattr(a, d)]
    if zero:
        raise InvalidBudget(
            f"leaf {request.reservation_id!r} allocates no {', '.join(zero)}: a run's zero "
            "limit would mean unlimited, so the leaf cannot carry a run"
        )
    return RunBudget(
        max_steps=a.steps,
        max_tokens=a.tokens,
        max_tool_calls=a.tool_calls,
        deadline=request.deadline,
    )


@dataclass(frozen=True, slots=True)
class LeafValue:
    """The value dimension of the leaf a run was admitted under, as a dispatch would meet it:
    the leaf's value allocation and what its run has dispatched, in micros (evaluate's quote)."""

    plan_id: str
    reservation_id: str
    allocation: int
    spent: int
    settled: bool
    value_bound: bool


@dataclass(frozen=True, slots=True)
class ValueCharge:
    """The value check's answer: ``refused`` names why (None: the charge fits); ``spent`` is
    the run's dispatched value including this effect when it fits."""

    spent: int
    refused: str | None = None


def value_charge(*, value: int | None, spent: int, allocation: int) -> ValueCharge:
    """Whether one more effect of declared ``value`` (micros; None: the class has no value
    measure) fits a leaf allocating ``allocation`` whose runs have dispatched ``spent``.
    Sums saturate: an overflowed sum never fits."""
    if value is None:
        return ValueCharge(
            spent, "the action class declares no value measure, so the value cannot be charged"
        )
    after, over = saturating_add(spent, value)
    if over or after > allocation:
        return ValueCharge(
            spent, f"dispatched value {spent} + {value} would pass the leaf's {allocation}"
        )
    return ValueCharge(after)


def run_settlement(
    request: ReservationRequest,
    usage: RunUsage,
    *,
    value: int,
    value_bound: bool,
    receipt: str | None = None,
) -> Settlement:
    """The leaf's settlement from its run's stored usage. Steps and tool calls are known. Tokens
    are known unless some call's usage was missing (then they keep the larger of the allocation
    and what was charged). Value is known where the plan bounds it (every effect of the run was
    measured and recorded at dispatch); fan-out, replans and money are not the run's to report,
    so they keep their allocation."""
    known = {"steps", "tool_calls"}
    minimum = Resources()
    if usage.estimated:
        minimum = Resources(tokens=usage.tokens)
    else:
        known.add("tokens")
    if value_bound:
        known.add(VALUE)
    spent = Resources(
        steps=usage.steps,
        tokens=usage.tokens,
        tool_calls=usage.tool_calls,
        value_micros=value if value_bound else 0,
    )
    return Settlement(
        request.reservation_id,
        request.digest(),
        usage=spent,
        known=frozenset(known),
        minimum=minimum,
        receipt=receipt,
    )
