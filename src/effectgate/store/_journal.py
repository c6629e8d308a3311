"""Journalling and dispatching inside a store's transaction, written once for every dialect.

A new row walks its path (:func:`journal_new`), a ``validated`` row is sent, shadowed or held
(:func:`dispatch_row`), a held row moves (:func:`move_locked`): each applies the controls of
:mod:`effectgate.store._guard` in the same transaction and returns what happened as a value (a
:class:`~effectgate.store.base.Journal`). The path's audit entries and the approval rules an
answer must pass are built here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from effectgate._core.controls import ClassControls, DispatchGuard, Verdict, VerdictKind
from effectgate._core.intent import Tier
from effectgate._core.receipts import dispatch_id
from effectgate._core.states import State, check_transition
from effectgate.errors import (
    ApprovalFingerprintMismatch,
    DispatchRefused,
    NotAwaitingApproval,
    OperationNotFound,
    SelfApproval,
    StaleState,
)
from effectgate.store._guard import (
    SEND,
    dispatch_verdict,
    mark_held,
    observe_proposal,
    shadow_request,
)
from effectgate.store._op_sql import N_OP, PROBE, SELECT_WITH_CONTROLS
from effectgate.store._sql import INSERT_REQUEST, controls_from_row, operation_from_row
from effectgate.store._tx import SharedTx
from effectgate.store.base import (
    AdmissionCheck,
    Journal,
    NewOperation,
    Operation,
    RawJSON,
    dumps,
    moved,
    transition_event,
)

__all__ = [
    "PlainJournal",
    "approval_request_args",
    "check_approval",
    "dispatch_row",
    "guard_new_row",
    "journal_locked",
    "journal_new",
    "move_locked",
    "path_audit",
    "plain_done",
    "plain_journal",
    "plain_passes",
    "write_plain",
]


def guard_new_row(
    tx: SharedTx, new: NewOperation, path: list[State], guard: DispatchGuard | None, *, now: float
) -> tuple[NewOperation, list[State], Verdict | None, tuple[str, ...]]:
    """Apply the controls to a row being journalled: the path it really takes, the dispatch
    verdict (None when the path does not end in ``submitted``) and the breaker signals tripped.

    The envelope's per-action axes can turn an allowed proposal into ``rejected`` (the reason
    names the axis); the breaker observes every proposal; and a path ending in ``submitted``
    meets the shadow flag, kill switch, breaker and windows, in this transaction.
    """
    ctl: ClassControls | None = None
    tripped: tuple[str, ...] = ()
    if guard is not None:
        if path[-1] is not State.REJECTED:
            env = tx.controls(new.action).envelope
            breach = env.per_action_breach(guard.value, guard.target)
            if breach:
                new = replace(
                    new,
                    reason=f"envelope: {breach}",
                    policy_version=f"{new.policy_version}+envelope-{env.version}",
                )
                path = [State.PROPOSED, State.REJECTED]
        ctl, tripped = observe_proposal(
            tx,
            guard,
            op_key=new.op_key,
            fingerprint=new.fingerprint,
            rejected=path[-1] is State.REJECTED,
            now=now,
        )
    verdict: Verdict | None = None
    if path[-1] is State.SUBMITTED:
        verdict = dispatch_verdict(
            tx, ctl or tx.controls(new.action), guard, now=now, op_key=new.op_key
        )
        if verdict.kind is VerdictKind.SHADOW:
            path = [*path[:-1], State.SHADOWED]
            _record_shadow(tx, new, guard, shadow_request(new.op_key, new.action, new.effect), now)
        elif verdict.held:
            path = path[:-1]
    elif path[-1] in _WOULD_NOT_ACT and (ctl or tx.controls(new.action)).shadow:
        # In shadow mode a refused or unapproved proposal is the agent not acting: the
        # report compares it with the incumbent too.
        _record_shadow(tx, new, guard, None, now, outcome=path[-1].value)
    return new, path, verdict, tripped


#: Where a proposal stops when the agent would not have acted (shadow comparisons).
_WOULD_NOT_ACT = (State.REJECTED, State.AWAITING_APPROVAL)


def _record_shadow(
    tx: SharedTx,
    new: NewOperation,
    guard: DispatchGuard | None,
    request: Mapping[str, object] | None,
    now: float,
    *,
    outcome: str = State.SHADOWED.value,
) -> None:
    tx.record_shadow(
        new.scope,
        new.operation_id,
        new.action,
        (guard.correlation_id if guard else None) or new.operation_id,
        request,
        new.fingerprint,
        now,
        outcome=outcome,
        intent=new.intent,
    )


def journal_new(
    tx: SharedTx,
    new: NewOperation,
    path: list[State],
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
) -> Journal:
    """Journal a row no one journalled before, in ``tx``: controls, audit entries, approval
    request, the row itself."""
    if guard is not None and guard.recheck is not None:
        guard.recheck(tx, now)  # before any write: a refusal rolls back an empty transaction
    new, steps, verdict, tripped = guard_new_row(tx, new, path, guard, now=now)
    held = verdict.reason if verdict is not None and verdict.held else None
    final = steps[-1]
    intent = dumps(new.intent)
    # The entries first: a dialect may record the last one's (seq, hash) in the row.
    for kind, detail in path_audit(new, steps, audit, held, intent_text=intent, now=now):
        tx.audit(kind, detail, now, new.scope, new.operation_id)
    if final is State.AWAITING_APPROVAL:
        tx.write(INSERT_REQUEST, approval_request_args(new, guard, now))
    tx.insert_row(new, final, held, now, intent)
    if verdict is not None and verdict.held:
        mark_held(tx, new.scope, new.operation_id, verdict, now)
    return Journal(new.journalled(final, now, held), True, verdict, tripped)


class PlainJournal(NamedTuple):
    """What journalling a new row writes when its class has no active control and no breaker
    watches it (:func:`plain_journal`): the row's final state, the intent as stored, its one
    audit entry, the dispatch record (``dispatch``, and the value in micros) and the approval
    request (:data:`INSERT_REQUEST` arguments, or None)."""

    final: State
    intent: str
    entry: dict[str, object]
    dispatch: bool
    value_micros: int | None
    request: tuple[Any, ...] | None


def plain_journal(
    new: NewOperation,
    path: list[State],
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
) -> PlainJournal:
    """:func:`journal_new`'s writes for a row of a class with no active control
    (:attr:`~effectgate._core.controls.ClassControls.active`) and no breaker watching it, as
    values: a dialect then writes them in as few statements as it can. The same facts, in the
    same entry, as the full path writes (no envelope to breach, no hold, no shadow)."""
    final = path[-1]
    intent = dumps(new.intent)
    entry = path_audit(new, path, audit, None, intent_text=intent, now=now)[0][1]
    sent = final is State.SUBMITTED
    return PlainJournal(
        final,
        intent,
        entry,
        sent,
        guard.value_micros if sent and guard is not None else None,
        approval_request_args(new, guard, now) if final is State.AWAITING_APPROVAL else None,
    )


def plain_passes(guard: DispatchGuard | None) -> bool:
    """Whether :func:`plain_journal` may stand for the full path under ``guard`` (the class's
    controls aside): a configured breaker records and reads its windows before deciding, and
    a token's recheck reads more than the control row (:attr:`DispatchGuard.plain`)."""
    return guard is None or guard.plain


def plain_done(new: NewOperation, plain: PlainJournal, now: float) -> Journal:
    """What journalling ``new`` by the writes of ``plain`` did."""
    return Journal(new.journalled(plain.final, now), True, SEND if plain.dispatch else None)


def write_plain(tx: SharedTx, new: NewOperation, plain: PlainJournal, now: float) -> Journal:
    """The writes of :func:`plain_journal` through ``tx``: the dispatch record, the approval
    request, the entry and the row (which a dialect may have name the entry)."""
    if plain.dispatch:
        tx.record_dispatch(new.action, now, new.op_key, plain.value_micros)
    if plain.request is not None:
        tx.write(INSERT_REQUEST, plain.request)
    tx.audit("transition", plain.entry, now, new.scope, new.operation_id)
    tx.insert_row(new, plain.final, None, now, plain.intent)
    return plain_done(new, plain, now)


def journal_locked(
    tx: SharedTx,
    new: NewOperation,
    path: list[State],
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
) -> Journal:
    """Journal ``new`` in a transaction that holds the store's only write lock (nobody inserts
    between these reads and the insert, and the controls are read under the same lock), or
    return the row journalled before (``created`` False).

    The common case first, in two scalars (:data:`~effectgate.store._op_sql.PROBE`): a new key
    of a class with no active control takes the plain writes; otherwise one read brings the row
    and the class's controls, and the full path runs on them."""
    key = (new.scope, new.operation_id, new.action)
    exists, active = tx.one(PROBE, key)
    if exists is None and not active and plain_passes(guard):
        return write_plain(tx, new, plain_journal(new, path, guard, audit, now=now), now)
    both = tx.one(SELECT_WITH_CONTROLS, key)
    if both[0] is not None:
        return Journal(operation_from_row(both[:N_OP]), False)
    tx.seed(controls_from_row(new.action, None if both[N_OP] is None else both[N_OP + 1 :]))
    return journal_new(tx, new, path, guard, audit, now=now)


def dispatch_row(
    tx: SharedTx,
    row: Operation | None,
    scope: str,
    operation_id: str,
    guard: DispatchGuard | None,
    audit: Mapping[str, object] | None,
    *,
    now: float,
    checks: Sequence[AdmissionCheck] = (),
) -> Journal:
    """``validated -> submitted`` of a row ``tx`` holds, after the controls' verdict: sent,
    shadowed instead, or left ``validated`` with the hold's reason."""
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    if row.state is not State.VALIDATED:
        raise StaleState(f"operation {operation_id!r} is {row.state.value!r}, not 'validated'")
    verdict = dispatch_verdict(tx, tx.controls(row.action), guard, now=now, op_key=row.op_key)
    if verdict.held:
        mark_held(tx, scope, operation_id, verdict, now)
        tx.audit("dispatch_held", {"reason": verdict.reason}, now, scope, operation_id)
        return Journal(replace(row, detail=verdict.reason, updated_at=now), False, verdict)
    for check in checks:
        # The pre-dispatch pipeline's in-transaction checks (docs/continuations.md): a refusal
        # rolls this transaction back; the gate then applies the refusal's move.
        refusal = check(tx, row, now)
        if refusal is not None:
            raise DispatchRefused(f"dispatch of {row.op_key} refused", refusal=refusal)
    target = State.SUBMITTED
    submitted_at: float | None = now
    if verdict.kind is VerdictKind.SHADOW:
        target, submitted_at = State.SHADOWED, None
        request = shadow_request(row.op_key, row.action, row.effect)
        tx.record_shadow(
            scope,
            operation_id,
            row.action,
            (guard.correlation_id if guard else None) or operation_id,
            request,
            row.fingerprint,
            row.created_at,  # when the agent proposed it: the report's time windows
            outcome=State.SHADOWED.value,
            intent=row.intent,
        )
        audit = {**(audit or {}), "request": request}
    if target is State.SUBMITTED:
        # Journalled with the submitted row, in its own entry (no extra statement).
        audit = {**(audit or {}), "dispatch_id": dispatch_id(scope, operation_id, now)}
    tx.audit(
        "transition",
        transition_event(State.VALIDATED, target, audit=audit),
        now,
        scope,
        operation_id,
    )
    changed = tx.cas(
        scope, operation_id, State.VALIDATED, target, now=now, submitted_at=submitted_at
    )
    if changed is None:  # unreachable: the transaction holds the row
        raise StaleState(f"operation {operation_id!r} changed under its lock")
    return Journal(moved(row, target, now, changed), False, verdict)


def move_locked(
    tx: SharedTx,
    row: Operation,
    target: State,
    now: float,
    detail: str | None,
    audit: Mapping[str, object],
) -> Operation:
    """Compare-and-set ``row.state -> target`` on a row ``tx`` holds, with its audit entry."""
    check_transition(row.state, target)
    tx.audit(
        "transition",
        transition_event(row.state, target, detail=detail, audit=audit),
        now,
        row.scope,
        row.operation_id,
    )
    changed = tx.cas(row.scope, row.operation_id, row.state, target, now=now, detail=detail)
    if changed is None:
        raise StaleState(f"operation {row.operation_id!r} moved concurrently")
    return moved(row, target, now, changed)


def approval_request_args(
    new: NewOperation, guard: DispatchGuard | None, now: float
) -> tuple[Any, ...]:
    """The approval request of a row journalled as ``awaiting_approval`` (INSERT_REQUEST)."""
    required = (
        1 if new.tier == Tier.APPROVE.value else max(2, guard.approvals_required if guard else 2)
    )
    ttl = guard.approval_ttl if guard else 86400.0
    return (
        new.scope,
        new.operation_id,
        new.fingerprint,
        required,
        now + ttl,
        dumps(list(guard.proposers) if guard else []),
        # Without a gate's guard nobody asked for it to be sent: its caller dispatches it.
        guard.dispatch_on_approval if guard else False,
    )


def path_audit(
    new: NewOperation,
    path: list[State],
    audit: Mapping[str, object] | None,
    held: str | None,
    *,
    intent_text: str | None = None,
    now: float | None = None,
) -> list[tuple[str, dict[str, object]]]:
    """The audit entries of a newly journalled row: ONE entry for the whole path, then any hold.

    The path a new row walks (``proposed -> validated -> submitted``, ``proposed -> rejected``,
    ...) is journalled by one transaction at one instant, so one chained entry carries all of
    it: ``path`` lists every state in order, ``state`` is where the row ended, and the entry
    holds the intent snapshot, the provenance and the decision. (One entry instead of one per
    step: a third of the audit writes and hashes on the hot path, the same facts.)
    ``intent_text``: the snapshot as already encoded for the row, embedded rather than encoded
    again. ``now``: the journal's instant; a row that ends ``submitted`` then carries its
    dispatch id (derived from it, as ``submitted_at`` is) in this same entry.
    """
    final = path[-1]
    key = tuple(path)
    shape = _PATH_SHAPES.get(key)
    if shape is None:
        # A handful of paths exist (check_path admits only the state table's): kept per path.
        shape = _PATH_SHAPES[key] = (
            tuple(s.value for s in path),
            any(step not in (State.PROPOSED, State.SUBMITTED) for step in path),
        )
    names, decided = shape
    detail: dict[str, object] = {
        "state": names[-1],
        "path": list(names),
        "intent": new.intent if intent_text is None else RawJSON(intent_text),
        "fingerprint": new.fingerprint,
        "action": new.action,
    }
    if audit:
        detail.update(audit)
    if decided:
        detail.update(tier=new.tier, reason=new.reason, policy_version=new.policy_version)
    if final is State.SHADOWED:
        detail["request"] = shadow_request(new.op_key, new.action, new.effect)
    elif final is State.SUBMITTED and now is not None:
        detail["dispatch_id"] = dispatch_id(new.scope, new.operation_id, now)
    out: list[tuple[str, dict[str, object]]] = [("transition", detail)]
    if held is not None:
        out.append(("dispatch_held", {"reason": held}))
    return out


#: Per journalled path: its states' names, and whether its entry carries the decision.
_PATH_SHAPES: dict[tuple[State, ...], tuple[tuple[str, ...], bool]] = {}


def check_approval(
    row: Operation | None,
    request: Sequence[Any] | None,
    *,
    scope: str,
    operation_id: str,
    approver: str,
    fingerprint: str,
) -> tuple[Operation, int, float]:
    """The rules an answer must pass before it is recorded: ``(row, required, expires_at)``.

    ``request`` is the stored approval request row (fingerprint, required, expires_at,
    proposers as JSON), or None when the row has none (one approver, no expiry). Raises
    :class:`OperationNotFound` or :class:`ApprovalError`; both dialects call it inside the
    transaction that records the answer.
    """
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    if row.state is not State.AWAITING_APPROVAL:
        raise NotAwaitingApproval(
            f"operation {operation_id!r} is {row.state.value!r}, not awaiting approval"
        )
    required, expires_at = (int(request[1]), float(request[2])) if request else (1, float("inf"))
    proposers = set(json.loads(request[3])) if request else set()
    if fingerprint != row.fingerprint:
        raise ApprovalFingerprintMismatch(
            f"the approval names payload {fingerprint[:12]} but operation "
            f"{operation_id!r} carries {row.fingerprint[:12]}: an approval releases "
            "only the exact payload it was given"
        )
    if approver in proposers:
        raise SelfApproval(
            f"{approver!r} proposed operation {operation_id!r} and cannot approve it"
        )
    return row, required, expires_at
