"""Policy: may this intent proceed, and at which oversight tier. Pure and deny by default.

A policy sees the action class and the parsed intent's *effect* fields only; the rationale and
other audit fields never reach it, so they cannot change a decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from effectgate._core.frozen import quick_init
from effectgate._core.intent import ActionClass, Intent, Tier, tier_rank

__all__ = ["Decision", "LimitPolicy", "Policy", "PolicySet", "effective_tier"]


@quick_init
@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    tier: Tier
    reason: str
    policy_version: str


class Policy(Protocol):
    """Anything with a version and a pure ``decide``."""

    @property
    def version(self) -> str: ...

    def decide(
        self, action_class: ActionClass, effect: Mapping[str, str | int | bool]
    ) -> Decision: ...


def effective_tier(floor: Tier, asked: Tier) -> Tier:
    """The stricter of the class's floor and the policy's tier: nothing lowers a floor."""
    if floor is asked:
        return floor
    return floor if tier_rank(floor) >= tier_rank(asked) else asked


@dataclass(frozen=True)
class LimitPolicy:
    """A value ceiling per action on the class's value measure (e.g. notional).

    ``max_value``: the ceiling; ``None`` for a class with no value axis (e.g. cancellations).
    ``approve_above``: values above it (and within the ceiling) need one approver.
    ``allowed_targets``: when set, the class's target field must be one of these.
    A value axis the class cannot measure (no ``value_of``, or ``value_of`` returns ``None``
    for this effect, as for a market order with no price) is a refusal: a ceiling that cannot
    be checked is not a ceiling.
    """

    max_value: Decimal | None = None
    version: str = "limit-1"
    approve_above: Decimal | None = None
    allowed_targets: frozenset[str] | None = None

    def decide(self, action_class: ActionClass, effect: Mapping[str, str | int | bool]) -> Decision:
        floor = action_class.tier_floor
        if self.allowed_targets is not None and action_class.target_field:
            target = effect.get(action_class.target_field)
            if target not in self.allowed_targets:
                return Decision(
                    False, floor, f"target {target!r} is not on the allowlist", self.version
                )
        if self.max_value is None and self.approve_above is None:
            return Decision(True, floor, "no value axis; allowed", self.version)
        value = action_class.value_of(effect) if action_class.value_of is not None else None
        if value is None:
            return Decision(
                False,
                floor,
                f"the value of this {action_class.name} cannot be "
                "measured, so its value limits cannot be checked (deny by default)",
                self.version,
            )
        if self.max_value is not None and value > self.max_value:
            return Decision(
                False, floor, f"value {value} over limit {self.max_value}", self.version
            )
        if self.approve_above is not None and value > self.approve_above:
            return Decision(
                True,
                effective_tier(floor, Tier.APPROVE),
                f"value {value} above {self.approve_above} needs approval",
                self.version,
            )
        within = f"within limit {self.max_value}" if self.max_value is not None else "no ceiling"
        return Decision(True, floor, f"value {value} {within}", self.version)


class PolicySet:
    """Policies by action class. A class with no policy cannot run (deny by default)."""

    version = "policyset-1"

    def __init__(self, policies: Mapping[str, Policy] | None = None) -> None:
        self._policies = dict(policies or {})

    def set(self, action: str, policy: Policy) -> None:
        self._policies[action] = policy

    def get(self, action: str) -> Policy | None:
        """The policy of ``action`` (None: none, so it is denied)."""
        return self._policies.get(action)

    def decide(self, action_class: ActionClass, intent: Intent) -> Decision:
        return self.decide_effect(action_class, intent.effect)

    def decide_effect(
        self, action_class: ActionClass, effect: Mapping[str, str | int | bool]
    ) -> Decision:
        """:meth:`decide` on an effect alone (a recorded one, replayed: docs/authority.md)."""
        policy = self._policies.get(action_class.name)
        if policy is None:
            return Decision(
                False,
                action_class.tier_floor,
                f"no policy for action class {action_class.name!r} (deny by default)",
                "none",
            )
        decision = policy.decide(action_class, effect)
        # The floor applies whatever the policy said: a policy can raise a tier, never lower it.
        tier = effective_tier(action_class.tier_floor, decision.tier)
        if tier is not decision.tier:
            decision = Decision(decision.allowed, tier, decision.reason, decision.policy_version)
        return decision
