"""Budgets as values (pure, no I/O): one run's limits and usage, and the saturating arithmetic
of resource vectors that a plan's shared account is built from (:mod:`._core.reservations`).

A **run budget** bounds one run across its steps and resumptions: model steps, tokens, tool
calls and a deadline. Zero means the limit is disabled; a negative limit is refused (it can
never mean "unlimited" by accident). Tool slots are checked apart from model steps, so a run
can still answer after its last tool call. Token usage that is missing or invalid is charged
pessimistically: it consumes the rest of the allowance and never resets it. Usage a provider
reports is never clamped: one call may run past the allowance, and the overrun is kept.

A :class:`Resources` vector holds explicit non-negative allowances in seven dimensions: the
seed's six and ``value_micros``, the summed declared value of a run's effects (optional: a
plan bounds it only when it says so). Unlike a run budget's limits, zero there permits
nothing. Sums saturate at :data:`INT64_MAX` and report the overflow; an overflowed sum forbids
admission instead of wrapping.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from effectgate.errors import InvalidBudget

__all__ = [
    "DIMENSIONS",
    "INT64_MAX",
    "VALUE",
    "Resources",
    "RunBudget",
    "RunBudgetState",
    "RunUsage",
    "charge_tokens",
    "check_step",
    "check_tool",
    "output_limit",
    "saturating_add",
    "total",
]

#: Every stored amount fits a signed 64-bit column; sums saturate here.
INT64_MAX = 2**63 - 1
#: A plan account's dimensions, in the order reports list them. ``value_micros`` (the summed
#: declared value of the effects of the runs a reservation admits) is the optional seventh.
DIMENSIONS = ("steps", "tokens", "tool_calls", "fan_out", "replans", "money_micros", "value_micros")
#: The optional dimension, left out of the canonical form while zero (see :meth:`to_dict`).
VALUE = "value_micros"


def _amount(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidBudget(f"{name} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise InvalidBudget(f"{name} is negative ({value}): a limit is never negative")
    if value > INT64_MAX:
        raise InvalidBudget(f"{name} is past the 64-bit range ({value})")
    return value


def _time(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidBudget(f"{name} must be a finite time in seconds")
    if value < 0:
        raise InvalidBudget(f"{name} is negative")
    return float(value)


def saturating_add(a: int, b: int) -> tuple[int, bool]:
    """``a + b`` capped at :data:`INT64_MAX`; the flag says it was capped."""
    total = a + b
    return (INT64_MAX, True) if total > INT64_MAX else (total, False)


@dataclass(frozen=True, slots=True)
class Resources:
    """Non-negative amounts in the dimensions of a plan account (money and value in micro-units)."""

    steps: int = 0
    tokens: int = 0
    tool_calls: int = 0
    fan_out: int = 0
    replans: int = 0
    money_micros: int = 0
    value_micros: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            _amount(getattr(self, f.name), f.name)

    @classmethod
    def from_dict(cls, data: object, *, name: str = "resources") -> Resources:
        if not isinstance(data, dict):
            raise InvalidBudget(f"{name} must be an object of the dimensions {DIMENSIONS}")
        unknown = set(data) - set(DIMENSIONS)
        if unknown:
            raise InvalidBudget(f"{name} has unknown dimensions {sorted(unknown)}")
        return cls(**{k: _amount(v, f"{name}.{k}") for k, v in data.items()})

    def to_dict(self) -> dict[str, int]:
        """The amounts by name. A zero ``value_micros`` is left out, so the digests of requests
        and policies written before the seventh dimension existed stay what they were."""
        out = asdict(self)
        if not out[VALUE]:
            del out[VALUE]
        return out

    def add(self, other: Resources) -> tuple[Resources, bool]:
        """The sum, each dimension saturated; the flag says some dimension overflowed."""
        out: dict[str, int] = {}
        overflow = False
        for d in DIMENSIONS:
            out[d], over = saturating_add(getattr(self, d), getattr(other, d))
            overflow = overflow or over
        return Resources(**out), overflow

    def max(self, other: Resources) -> Resources:
        return Resources(**{d: max(getattr(self, d), getattr(other, d)) for d in DIMENSIONS})

    def covers(self, other: Resources, *, skip: frozenset[str] = frozenset()) -> bool:
        """Every dimension (but ``skip``) of ``other`` is within this one's."""
        return all(getattr(other, d) <= getattr(self, d) for d in DIMENSIONS if d not in skip)

    def first_short(
        self, used: Resources, want: Resources, *, skip: frozenset[str] = frozenset()
    ) -> str | None:
        """The first dimension where ``used + want`` passes this limit, or overflows; None:
        the allocation fits. No arithmetic here can wrap."""
        for d in DIMENSIONS:
            if d in skip:
                continue
            total, over = saturating_add(getattr(used, d), getattr(want, d))
            if over or total > getattr(self, d):
                return d
        return None

    def with_fan_out(self) -> Resources:
        """Every reservation holds at least one fan-out slot."""
        return self if self.fan_out >= 1 else replace(self, fan_out=1)


def total(items: list[Resources]) -> tuple[Resources, bool]:
    """The saturated sum of ``items``; the flag says some dimension overflowed."""
    acc, overflow = Resources(), False
    for r in items:
        acc, over = acc.add(r)
        overflow = overflow or over
    return acc, overflow


# --- one run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunBudget:
    """One run's limits; zero disables a limit, ``deadline`` None has none."""

    max_steps: int = 0
    max_tokens: int = 0
    max_tool_calls: int = 0
    deadline: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "max_tool_calls"):
            _amount(getattr(self, name), name)
        object.__setattr__(self, "deadline", _time(self.deadline, "deadline"))

    @classmethod
    def from_dict(cls, data: object) -> RunBudget:
        if not isinstance(data, dict):
            raise InvalidBudget("a run budget must be an object")
        unknown = set(data) - {"max_steps", "max_tokens", "max_tool_calls", "deadline"}
        if unknown:
            raise InvalidBudget(f"a run budget has unknown fields {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RunUsage:
    """Cumulative usage of one run. ``tokens`` includes pessimistic charges for missing usage;
    ``reported_tokens`` keeps what providers reported, unclamped; ``estimated`` marks a run
    whose token count holds at least one pessimistic charge."""

    steps: int = 0
    tokens: int = 0
    reported_tokens: int = 0
    tool_calls: int = 0
    estimated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RunBudgetState:
    """A run's limits and cumulative usage, as stored."""

    scope: str
    run_id: str
    budget: RunBudget
    usage: RunUsage

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "run_id": self.run_id,
            "budget": self.budget.to_dict(),
            "usage": self.usage.to_dict(),
        }


def _past(budget: RunBudget, now: float) -> bool:
    return budget.deadline is not None and now >= budget.deadline


def check_step(budget: RunBudget, usage: RunUsage, now: float) -> str | None:
    """The limit that stops another model step (``deadline``, ``steps``, ``tokens``), or None."""
    if _past(budget, now):
        return "deadline"
    if budget.max_steps and usage.steps >= budget.max_steps:
        return "steps"
    if budget.max_tokens and usage.tokens >= budget.max_tokens:
        return "tokens"
    return None


def check_tool(budget: RunBudget, usage: RunUsage, now: float) -> str | None:
    """The limit that stops another tool call (``deadline``, ``tool_calls``), or None. Tool
    slots are apart from steps and tokens: a run out of tools can still answer."""
    if _past(budget, now):
        return "deadline"
    if budget.max_tool_calls and usage.tool_calls >= budget.max_tool_calls:
        return "tool_calls"
    return None


def output_limit(budget: RunBudget, configured: int, usage: RunUsage) -> int:
    """The provider's per-call output cap narrowed to the tokens that remain (0 disables the
    cap when ``configured`` is 0 and no token limit is set)."""
    configured = _amount(configured, "configured output limit")
    if not budget.max_tokens:
        return configured
    remaining = max(budget.max_tokens - usage.tokens, 0)
    return remaining if configured == 0 else min(configured, remaining)


def charge_tokens(usage: RunUsage, reported: object, budget: RunBudget) -> RunUsage:
    """Charge one model call's reported token usage. A valid count is kept exactly (it may
    pass the allowance: never hidden or clamped). A missing or invalid one consumes the rest
    of a configured allowance and marks the usage estimated; it never lowers what is charged."""
    valid = (
        isinstance(reported, int) and not isinstance(reported, bool) and 0 <= reported <= INT64_MAX
    )
    if valid:
        n = int(reported)  # type: ignore[call-overload]
        tokens, _ = saturating_add(usage.tokens, n)
        seen, _ = saturating_add(usage.reported_tokens, n)
        return replace(usage, tokens=tokens, reported_tokens=seen)
    tokens = max(usage.tokens, budget.max_tokens) if budget.max_tokens else usage.tokens
    return replace(usage, tokens=tokens, estimated=True)
