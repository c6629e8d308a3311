"""Mutations of the gate's side of the boundary: what is dispatched, when, and under which
controls, policy and approvals. Each replaces one named production function or method for a
run (see :mod:`effectgate._sim.mutations`); the comment on each says what the bug is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from effectgate._core.states import State
from effectgate._execute.adapter import Outcome
from effectgate._sim.actor import Mutation
from effectgate.store.base import check_path

__all__ = ["GATE"]

F = Callable[..., Any]


def _replay_sends(state: State) -> Callable[[F], F]:
    """A replay of an existing row in ``state`` calls the venue again."""

    def replace(original: F) -> F:
        def _replay_redispatches(self: Any, row: Any) -> bool:
            return bool(row.state is state)

        return _replay_redispatches

    return replace


def _send_before_commit(original: F) -> F:
    # A held or approved row is sent without first committing validated -> submitted.
    def _dispatch(
        self: Any, scope: str, operation_id: str, correlation_id: Any, dispatcher: Any = None
    ) -> Any:
        row = self._row(scope, operation_id)
        if row.state is State.VALIDATED:
            return self._call(row), None
        return original(self, scope, operation_id, correlation_id, dispatcher)

    return _dispatch


def _no_fingerprint_check(original: F) -> F:
    # The same id with another payload comes back as a replay of the first.
    def journal(
        self: Any, new: Any, path: Any, *, now: float, audit: Any = None, guard: Any = None
    ) -> Any:
        check_path(path)
        return self._journal(new, list(path), now, audit, guard)

    return journal


def _controls_without(flag: str) -> Callable[[F], F]:
    """The dispatching transaction's verdict reads the class's controls with ``flag`` off."""

    def replace(original: F) -> F:
        def dispatch_verdict(tx: Any, ctl: Any, guard: Any, **kw: Any) -> Any:
            return original(tx, dataclasses.replace(ctl, **{flag: False}), guard, **kw)

        return dispatch_verdict

    return replace


def _approval_any_payload(original: F) -> F:
    # An approval releases the row whatever payload it names.
    def check_approval(row: Any, request: Any, **kw: Any) -> Any:
        if row is not None:
            kw["fingerprint"] = row.fingerprint
        return original(row, request, **kw)

    return check_approval


def _policy_without(field: str) -> Callable[[F], F]:
    """The value policy decides as if ``field`` (its ceiling or its approval line) were unset."""

    def replace(original: F) -> F:
        def decide(self: Any, action_class: Any, effect: Any) -> Any:
            return original(dataclasses.replace(self, **{field: None}), action_class, effect)

        return decide

    return replace


def _unknown_as_failed(original: F) -> F:
    # A call that ended without an answer (timeout, lost reply) is settled failed.
    def journal_receipt(store: Any, now: float, row: Any, receipt: Any, request: Any) -> Any:
        if receipt.outcome is Outcome.UNKNOWN:
            return store.transition(
                row.scope,
                row.operation_id,
                State.SUBMITTED,
                State.FAILED,
                now=now,
                detail="no answer from the venue",
                audit={"receipt": "unknown, taken as failed"},
                current=row,
            )
        return original(store, now, row, receipt, request)

    return journal_receipt


class _RetryOnce:
    """An adapter that calls ``execute`` a second time when the first raised."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def execute(self, request: Any, *, timeout: float) -> Any:
        try:
            return self.inner.execute(request, timeout=timeout)
        except Exception:
            return self.inner.execute(request, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _retry_lost_reply(original: F) -> F:
    # A mutation retried automatically after a lost reply (invariant 9).
    def call_once(store: Any, clock: Any, adapter: Any, timeout: float, row: Any) -> Any:
        return original(store, clock, _RetryOnce(adapter), timeout, row)

    return call_once


_EX = "effectgate._execute.executor"
_J = "effectgate.store._journal"

GATE: tuple[Mutation, ...] = (
    Mutation(
        "redispatch_uncertain",
        "1,7 at_most_one_dispatch",
        f"{_EX}:Gate._replay_redispatches",
        _replay_sends(State.SUBMITTED),
    ),
    Mutation(
        "redispatch_failed",
        "1,7 at_most_one_dispatch",
        f"{_EX}:Gate._replay_redispatches",
        _replay_sends(State.FAILED),
    ),
    Mutation(
        "redispatch_shadowed",
        "3 journalled_before_dispatch",
        f"{_EX}:Gate._replay_redispatches",
        _replay_sends(State.SHADOWED),
    ),
    Mutation(
        "dispatch_before_journal_commit",
        "3 journalled_before_dispatch",
        f"{_EX}:Gate._dispatch",
        _send_before_commit,
    ),
    Mutation(
        "key_reuse_without_fingerprint",
        "2 changed_payload_refused",
        "effectgate.store._ledger:SQLStore.journal",
        _no_fingerprint_check,
    ),
    Mutation(
        "kill_switch_ignored",
        "7 no_dispatch_while_held",
        f"{_J}:dispatch_verdict",
        _controls_without("killed"),
    ),
    Mutation(
        "open_breaker_ignored",
        "7 no_dispatch_while_held",
        f"{_J}:dispatch_verdict",
        _controls_without("breaker_open"),
    ),
    Mutation(
        "shadow_mode_ignored",
        "7 no_dispatch_while_held",
        f"{_J}:dispatch_verdict",
        _controls_without("shadow"),
    ),
    Mutation(
        "approval_of_another_payload",
        "2 stale_approval_refused",
        f"{_J}:check_approval",
        _approval_any_payload,
    ),
    Mutation(
        "approval_line_ignored",
        "6 dispatched_as_authorised",
        "effectgate._core.policy:LimitPolicy.decide",
        _policy_without("approve_above"),
    ),
    Mutation(
        "value_ceiling_ignored",
        "6 dispatched_as_authorised",
        "effectgate._core.policy:LimitPolicy.decide",
        _policy_without("max_value"),
    ),
    Mutation(
        "unknown_outcome_as_failed",
        # A row failed without proof is also one a continuation may retry: the continuations
        # actor's check (9) often sees that first.
        "3,9 failed_only_with_proof",
        "effectgate._execute.call:journal_receipt",
        _unknown_as_failed,
    ),
    Mutation(
        "retry_after_lost_reply", "1 at_most_one_dispatch", f"{_EX}:call_once", _retry_lost_reply
    ),
)
