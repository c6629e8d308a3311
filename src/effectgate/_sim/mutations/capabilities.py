"""Mutations of the capabilities the simulator's actors drive (:mod:`effectgate._sim.actors`).
Each replaces one named production function or method for a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from effectgate._core.budgets import Resources
from effectgate._sim.actor import Mutation

__all__ = ["CAPABILITIES"]

F = Callable[..., Any]


def _admit_anything(original: F) -> F:
    # A continuation is admitted whatever its proof and whatever its original's state.
    def check_admission(kind: Any, **kw: Any) -> Any:
        return None

    return check_admission


def _retries_uncounted(original: F) -> F:
    # The class's declared number of retries is not enforced.
    def check_admission(kind: Any, **kw: Any) -> Any:
        return original(kind, **{**kw, "retries_declared": 7})

    return check_admission


def _expiry_ignored(original: F) -> F:
    # A proof is accepted after it expired.
    def check_admission(kind: Any, **kw: Any) -> Any:
        return original(kind, **{**kw, "now": float("-inf")})

    return check_admission


def _write_off_as_refusal(original: F) -> F:
    # A write-off as absent past the horizon is read as the venue's refusal.
    def _check_retry(predecessor: Any, *args: Any) -> Any:
        return original(dataclasses.replace(predecessor, detail=None), *args)

    return _check_retry


class _SendsForReal:
    """A speculator whose dry run also sends the request to the venue."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def speculate(self, request: Any, *, attempt: int, timeout: float) -> Any:
        self.inner.execute(request, timeout=timeout)
        return self.inner.speculate(request, attempt=attempt, timeout=timeout)


def _speculation_executes(original: F) -> F:
    # The speculative phase calls the venue for real, not its sandbox.
    def speculator(adapter: Any) -> Any:
        found = original(adapter)
        return None if found is None else _SendsForReal(found)

    return speculator


def _charge_the_request(original: F) -> F:
    # A leaf is charged what it asked for, not what its settlement reports it used.
    def settle_charge(request: Any, s: Any) -> Any:
        return request.allocation.with_fan_out()

    return settle_charge


def _settlement_not_final(original: F) -> F:
    # A settled reservation reads as open again, so it can be settled (refunded) twice.
    def reservation_from_row(r: Any) -> Any:
        return dataclasses.replace(original(r), charge=None)

    return reservation_from_row


_UNBOUNDED = Resources(steps=10**9, tokens=10**9, tool_calls=10**9, fan_out=10**9, replans=10**9)


def _admit_over_limit(original: F) -> F:
    # A reservation is admitted against the plan's limits without counting what is held.
    def admit(policy: Any, snapshot: Any, request: Any, now: float) -> Any:
        return original(dataclasses.replace(policy, limits=_UNBOUNDED), snapshot, request, now)

    return admit


def _revocation_unread(original: F) -> F:
    # The grants read ignores revocation: a revoked grant still authorises.
    def list_grants(self: Any, *, holder: Any = None, include_revoked: bool = False) -> Any:
        found = original(self, holder=holder, include_revoked=True)
        return [dataclasses.replace(g, revoked_at=None, revoked_by=None) for g in found]

    return list_grants


def _containment_skipped(original: F) -> F:
    # A delegation is accepted whatever it claims beyond its parent.
    def check_contained(parent: Any, child: Any, *, now: float) -> None:
        return None

    return check_contained


def _target_unchecked(original: F) -> F:
    # A grant covers any target: the target axis is not read.
    def grant_refusal(grant: Any, **kw: Any) -> Any:
        why = original(grant, **kw)
        return None if why is not None and why[0] == "grant_target" else why

    return grant_refusal


def _revocation_one_level(original: F) -> F:
    # A revocation stops at the grants named: the delegations beneath them stay live.
    def live_children(tx: Any, grant_ids: Any) -> list[str]:
        return []

    return live_children


def _bindings_unread(original: F) -> F:
    # The precondition stage reads no approval's binding: every approved row goes as it is.
    def _bound(store: Any, scope: str, operation_id: str) -> list[str | None]:
        return []

    return _bound


def _no_breach(original: F) -> F:
    # An action is never outside the envelope's per-action axes (ceiling, allowlist).
    def per_action_breach(self: Any, value: Any, target: Any) -> str | None:
        return None

    return per_action_breach


def _windows_empty(original: F) -> F:
    # The rate and exposure windows read as empty: nothing dispatched counts against them.
    def dispatch_usage(self: Any, action: str, since: float) -> tuple[int, int]:
        return 0, 0

    return dispatch_usage


def _evidence_taken(original: F) -> F:
    # A widening step's evidence is taken as it is named, not measured again.
    def verify(
        store: Any, registry: Any, action: str, axis: str, evidence: Any, *, now: float
    ) -> Any:
        return {**evidence, "verified_at": now}

    return verify


_C = "effectgate._execute.continuations"

CAPABILITIES: tuple[Mutation, ...] = (
    Mutation(
        "speculation_reaches_venue",
        "3 speculation_leaves_no_effect",
        "effectgate._execute.speculation:speculator",
        _speculation_executes,
    ),
    Mutation(
        "settle_on_request",
        "12 plan_account_exact",
        "effectgate._core.reservations:settle_charge",
        _charge_the_request,
    ),
    Mutation(
        "reservation_settled_twice",
        "12 plan_account_exact",
        "effectgate.store._plan_rows:reservation_from_row",
        _settlement_not_final,
    ),
    Mutation(
        "reservation_over_limit",
        "12 plan_account_exact",
        "effectgate.store._budgets:admit",
        _admit_over_limit,
    ),
    Mutation(
        "revoked_grant_accepted",
        "6 dispatched_under_a_live_grant",
        "effectgate.store._grants:GrantRoles.list_grants",
        _revocation_unread,
    ),
    Mutation(
        "delegation_wider_accepted",
        "6 dispatched_under_a_live_grant",
        "effectgate.store._grants:check_contained",
        _containment_skipped,
    ),
    Mutation(
        "grant_target_unchecked",
        "6 dispatched_under_a_live_grant",
        "effectgate._execute.authority:grant_refusal",
        _target_unchecked,
    ),
    Mutation(
        "revocation_not_transitive",
        "6 dispatched_under_a_live_grant",
        "effectgate.store._grants:live_children",
        _revocation_one_level,
    ),
    Mutation(
        "precondition_bindings_unread",
        "6 dispatched_as_approved_against",
        "effectgate._execute.preconditions:_bound",
        _bindings_unread,
    ),
    Mutation(
        "envelope_ceiling_ignored",
        "12 sent_within_the_envelope",
        "effectgate._core.controls:Envelope.per_action_breach",
        _no_breach,
    ),
    Mutation(
        "envelope_windows_uncounted",
        "12 sent_within_the_envelope",
        "effectgate.store._tx:SharedTx.dispatch_usage",
        _windows_empty,
    ),
    Mutation(
        "widening_evidence_unverified",
        "12 sent_within_the_envelope",
        "effectgate._execute.operator:verify_evidence",
        _evidence_taken,
    ),
    Mutation(
        "continue_without_proof",
        "9 continued_only_with_proof",
        f"{_C}:check_admission",
        _admit_anything,
    ),
    Mutation(
        "continuation_retries_uncounted",
        "9 continued_only_with_proof",
        f"{_C}:check_admission",
        _retries_uncounted,
    ),
    Mutation(
        "expired_proof_accepted",
        "9 continued_only_with_proof",
        f"{_C}:check_admission",
        _expiry_ignored,
    ),
    Mutation(
        "write_off_taken_as_proof",
        "9 continued_only_with_proof",
        "effectgate._core.continuation:_check_retry",
        _write_off_as_refusal,
    ),
)
