"""The intake stages of :meth:`Gate.submit`, in order: admit the ids, parse, decide, plan, journal.

Each is a function over small values (the registry, the policy, a :class:`Plan`) that returns a
value or raises a refusal; none imports the gate. A refusal changes nothing but the audit log.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from effectgate._core.controls import ApprovalRules, BreakerConfig, DispatchGuard
from effectgate._core.effects import CONTINUATION_PREFIX, is_continuation_id
from effectgate._core.intent import ActionClass, Intent, Registry, Tier
from effectgate._core.policy import Decision, PolicySet
from effectgate._core.states import State
from effectgate._execute.predispatch import ADMITTING, Admission, at_least
from effectgate.errors import CommitOutcomeUnknown, IntentError, UnknownActionClass
from effectgate.store.base import (
    IDENTITY_PATTERN,
    SYSTEM_PREFIX,
    Journal,
    NewOperation,
    validate_identity,
)
from effectgate.store.roles import Store

__all__ = [
    "Plan",
    "admission_for",
    "decide",
    "journal",
    "new_operation",
    "parse",
    "plan",
    "submit_guard",
]

log = logging.getLogger("effectgate.executor")

RawIntent = bytes | str | Mapping[str, object]
JournalFn = Callable[..., Journal]


def admission_for(operation_id: str) -> Admission | None:
    """The continuation admission this submit runs under (None for an agent's own proposal).

    Continuation ids are reserved: every agent-facing door (HTTP, MCP, gateway, the Python API)
    submits through the gate, so refusing them here refuses them everywhere."""
    admission = ADMITTING.get()
    if admission is not None and admission.operation_id != operation_id:
        admission = None
    if is_continuation_id(operation_id) and admission is None:
        raise IntentError(
            f"operation ids starting with {CONTINUATION_PREFIX!r} are reserved for "
            "continuations (docs/continuations.md)",
            field="operation_id",
            reason="reserved_operation_id",
        )
    return admission


def parse(
    registry: Registry,
    store: Store,
    now: Callable[[], float],
    action: str,
    operation_id: str,
    intent: RawIntent,
    scope: str,
) -> Intent:
    """Strict parse of the ids and the intent; a refusal is audited (body digest, not body)."""
    try:
        validate_identity(scope, operation_id)
        return registry.parse(action, intent)
    except (IntentError, UnknownActionClass) as exc:
        raw = intent if isinstance(intent, bytes) else str(intent).encode("utf-8", "replace")
        store.append_audit(
            "intent_refused",
            {
                "action": action if isinstance(action, str) else repr(action),
                "error": exc.to_dict(),
                "body_sha256": hashlib.sha256(raw).hexdigest(),
                "body_bytes": len(raw),
            },
            now=now(),
            scope=scope if isinstance(scope, str) else None,
            operation_id=operation_id if isinstance(operation_id, str) else None,
        )
        raise


def check_principal(principal: str | None) -> None:
    """Refuse a submitter name that is malformed or claims the system's prefix."""
    if principal is not None and (
        not IDENTITY_PATTERN.fullmatch(principal) or principal.startswith(SYSTEM_PREFIX)
    ):
        raise IntentError(
            f"principal {principal!r} must match {IDENTITY_PATTERN.pattern} "
            f"and not start with {SYSTEM_PREFIX!r}",
            field="principal",
            reason="invalid_principal",
        )


def decide(
    policy: PolicySet, ac: ActionClass, parsed: Intent, admission: Admission | None
) -> Decision:
    """The policy's decision; a continuation never runs at a lower tier than its admission."""
    decision = policy.decide(ac, parsed)
    return at_least(decision, Tier(admission.min_tier)) if admission is not None else decision


@dataclass(slots=True)
class Plan:
    """What the journal stage writes: the row, the states it passes in one transaction, and the
    audit facts of the proposal."""

    action_class: ActionClass
    new: NewOperation
    path: list[State]
    provenance: dict[str, object]


def new_operation(
    ac: ActionClass, parsed: Intent, decision: Decision, scope: str, operation_id: str
) -> NewOperation:
    """The row a submit of ``parsed`` under ``decision`` journals (evaluate reads it unwritten)."""
    return NewOperation(
        scope=scope,
        operation_id=operation_id,
        action=ac.name,
        fingerprint=parsed.fingerprint,
        intent=parsed.snapshot,
        effect=parsed.effect,
        tier=decision.tier.value,
        reason=decision.reason,
        policy_version=decision.policy_version,
    )


def plan(
    ac: ActionClass,
    parsed: Intent,
    decision: Decision,
    *,
    scope: str,
    operation_id: str,
    principal: str | None,
    send_now: bool,
    dispatcher: str,
) -> Plan:
    """The row to journal: ``send_now`` takes an automatic row to ``submitted`` in the same
    transaction (the floor of two commits per action)."""
    new = new_operation(ac, parsed, decision, scope, operation_id)
    path = _path_for(decision, send_now)
    facts = _provenance(parsed, decision, principal)
    if path[-1] is State.SUBMITTED:
        # Who dispatched: a continuation excludes the original's dispatcher.
        facts["dispatcher"] = dispatcher
    return Plan(ac, new, path, facts)


def submit_guard(
    ac: ActionClass,
    effect: Mapping[str, str | int | bool],
    correlation_id: str | None,
    *,
    breakers: Mapping[str, BreakerConfig],
    approvals: ApprovalRules,
    dispatch: bool = True,
) -> DispatchGuard:
    """What the store checks in the dispatching transaction, from the class and config.

    ``dispatch``: the caller wants the row sent, so completing its approvals releases it
    to the standing dispatcher (``propose()`` leaves it to its caller)."""
    target = effect.get(ac.target_field) if ac.target_field else None
    breaker = breakers.get(ac.name)
    # The signals' inputs are computed only for a breaker that reads them (the hot path).
    repeats = breaker is not None and breaker.max_repeats is not None
    targets = breaker is not None and breaker.max_new_targets is not None
    return DispatchGuard(
        action=ac.name,
        value=ac.value_of(effect) if ac.value_of else None,
        target=str(target) if target is not None else None,
        breaker=breaker,
        correlation_id=correlation_id,
        approvals_required=approvals.multi_approvers,
        approval_ttl=approvals.ttl,
        dispatch_on_approval=dispatch,
        repeat_key=ac.repeat_key.of(effect) if repeats and ac.repeat_key is not None else None,
        watched=ac.watched_targets(effect) if targets else (),
    )


def journal(
    write: JournalFn,
    store: Store,
    clock: Callable[[], float],
    p: Plan,
    guard: Callable[[], DispatchGuard],
) -> tuple[Journal, float] | None:
    """Journal the plan: ``(what the store did, when)``, or None when the
    commit's outcome is unknown and a row is visible (never dispatch on a guess)."""
    for attempt in (1, 2):
        g = guard()
        now = clock()
        try:
            return write(p.new, p.path, now=now, guard=g, audit=p.provenance), now
        except CommitOutcomeUnknown:
            # Journal again only when no row is visible: the unique index decides. If the
            # lost commit did land (even later), this insert conflicts and replays, and
            # nothing is sent; if it did not, this one is the journal (invariant 1).
            if attempt == 2 or store.get(p.new.scope, p.new.operation_id) is not None:
                return None
            log.warning(
                "journal commit for %s:%s was indeterminate and left no row; journalling again",
                p.new.scope,
                p.new.operation_id,
            )
    return None  # pragma: no cover - the loop returns on its second attempt


def _path_for(decision: Decision, dispatch: bool) -> list[State]:
    if not decision.allowed:
        return [State.PROPOSED, State.REJECTED]
    if decision.tier is not Tier.VALIDATE:
        return [State.PROPOSED, State.AWAITING_APPROVAL]
    if dispatch:
        # proposed -> validated -> submitted in ONE durable transaction: the floor of two
        # commits per action (this one, then the receipt).
        return [State.PROPOSED, State.VALIDATED, State.SUBMITTED]
    return [State.PROPOSED, State.VALIDATED]


def _provenance(parsed: Intent, decision: Decision, principal: str | None) -> dict[str, object]:
    """The audit facts of a proposal beyond the snapshot: who, from what, and what was decided."""
    by = parsed.audit.get("proposed_by")
    # A parsed intent's nested objects are dicts; the ABC check is the slow path for the rest.
    by = by if type(by) is dict or isinstance(by, Mapping) else {}
    digests = parsed.audit.get("tool_output_digests")
    return {
        "principal": principal,
        "model": by.get("model"),
        "harness_version": by.get("harness_version"),
        "context_digest": parsed.audit.get("context_digest"),
        "tool_output_digests": list(digests) if isinstance(digests, list | tuple) else [],
        "decision": {
            "allowed": decision.allowed,
            "tier": decision.tier.value,
            "reason": decision.reason,
            "policy_version": decision.policy_version,
        },
    }
