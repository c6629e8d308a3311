"""Mutations of the operator's actions the operator actor drives
(:mod:`effectgate._sim.actors.operator`): quarantine, governed policy versions, the kill switch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from effectgate._sim.actor import Mutation

__all__ = ["OPERATOR"]

F = Callable[..., Any]


def _follower_never_swaps(original: F) -> F:
    # The follower notes the new active version but the gate keeps deciding under the old one.
    def refresh(self: Any) -> bool:
        active = self.store.active_policy()
        if active is None or active.policy_hash == self.active_hash:
            return False
        first = self.active_hash is None
        self.active_hash = active.policy_hash
        return bool(first and original(self))

    return refresh


def _take_over_records_nothing(original: F) -> F:
    # An operator's take-over answers the row but never moves it: it stays dispatchable.
    def take_over(self: Any, scope: str, operation_id: str, *, by: str, reason: str) -> Any:
        return self.store.get(scope, operation_id)

    return take_over


def _stale_version(original: F) -> F:
    # The policy a document describes keeps the old version label: decisions under it record
    # a version that was not active.
    def policy_set(document: Any, registry: Any) -> Any:
        policies = original(document, registry)
        for name in registry.names():
            found = policies.get(name)
            if found is not None:
                policies.set(name, dataclasses.replace(found, version="limit-1"))
        return policies

    return policy_set


def _kill_unrecorded(original: F) -> F:
    # The kill command answers the class's controls but never writes the switch.
    def kill(self: Any, action: str, *, operator: str, reason: str | None = None) -> Any:
        return self.store.controls(action)

    return kill


OPERATOR: tuple[Mutation, ...] = (
    Mutation(
        "follower_keeps_old_policy",
        "6 decided_under_recorded_version",
        "effectgate._service._policy_gov:PolicyFollower.refresh",
        _follower_never_swaps,
    ),
    Mutation(
        "take_over_records_nothing",
        "10 quarantined_dispatched_only_after_release",
        "effectgate._execute.quarantine:QuarantineService.take_over",
        _take_over_records_nothing,
    ),
    Mutation(
        "policy_version_stale",
        "6 decided_under_recorded_version",
        "effectgate._service._policy_gov:policy_set",
        _stale_version,
    ),
    Mutation(
        "kill_switch_unrecorded",
        "7 kill_mid_dispatch_holds",
        "effectgate._execute.operator:Operator.kill",
        _kill_unrecorded,
    ),
)
