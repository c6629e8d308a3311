"""The authority checks just before dispatch: stages of the pre-dispatch pipeline.

* :func:`grant_authoriser` — the default authoriser (the grant axis): the acting principal (the
  one the gate journalled from the authenticated credential, never from the body) must hold a
  live grant, whole chain live, covering the action on every axis, its budget read from the
  record of dispatched value. Policy is the other axis; it decided at journal time, and both
  must allow: the stricter wins.
* :func:`approver_revocation_check` — approvals by a principal revoked since they were given
  stop counting: the row goes back for a new approval round.

Each is a :data:`~effectgate._execute.predispatch.Stage`: it reads, never writes, and returns a
:class:`~effectgate._execute.predispatch.Refusal` or None. :func:`run_stages` and
:func:`apply_refusal` are the small local wiring this branch tests them through; issue 15's
pipeline runs them in its fixed order (authorisation, preconditions, speculation, dispatch).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.grants import grant_refusal
from effectgate._execute.break_glass import BreakGlassUses
from effectgate._execute.predispatch import DispatchContext, Refusal, Stage
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = [
    "Revoked",
    "acting_principal",
    "approver_revocation_check",
    "approver_role_check",
    "dispatched_micros",
    "grant_authoriser",
]

#: Whether a principal name is revoked now (the revocation feed; see service/_revocation.py).
Revoked = Callable[[str], bool]


def _never(_: str) -> bool:
    return False


def acting_principal(store: Store, entry: Operation) -> str | None:
    """Who proposed ``entry``: the principal the gate recorded, from the credential, in the
    journal entry of the row (None: it was proposed without one, e.g. embedded)."""
    for e in store.audit_entries(scope=entry.scope, operation_id=entry.operation_id, limit=20):
        if e.kind != "transition":
            continue
        detail = json.loads(e.detail_text)
        if "decision" in detail:  # the journal entry: it carries the provenance
            name = detail.get("principal")
            return name if isinstance(name, str) else None
    return None


def dispatched_micros(store: Store, holder: str, actions: frozenset[str], since: float) -> int:
    """The value dispatched under ``holder`` in ``actions`` since ``since``, in micros.

    The grant budget's one read of the record of dispatched value, the same record the
    envelope's windows and a plan's value dimension read (store/_value_record.py)."""
    return store.dispatched_micros(holder, actions, since)


def _value_and_target(ctx: DispatchContext) -> tuple[Decimal | None, str | None]:
    cls = ctx.action_class
    effect = ctx.entry.effect
    value = cls.value_of(effect) if cls.value_of is not None else None
    target = None
    if cls.target_field is not None and cls.target_field in effect:
        target = str(effect[cls.target_field])
    return value, target


def grant_authoriser(
    *, environment: str, revoked: Revoked = _never, uses: BreakGlassUses | None = None
) -> Stage:
    """The grant axis, for a gate whose grants are on (off: do not wire it). ``uses``: where the
    covering grant is noted, so a dispatch under a break-glass grant is audited and alerted
    (:mod:`effectgate._execute.break_glass`; its checks must be on the same pipeline)."""

    def authorise(ctx: DispatchContext) -> Refusal | None:
        if uses is not None:
            uses.note(ctx.entry.op_key, None)
        who = ctx.proposer or acting_principal(ctx.store, ctx.entry)
        if who is None:
            return Refusal("reject", "grant_missing", "no principal proposed this action")
        if revoked(who):
            return Refusal("reject", "principal_revoked", f"principal {who!r} is revoked")
        value, target = _value_and_target(ctx)
        reasons: list[tuple[str, str]] = []
        for grant in ctx.store.live_grants_for(who, ctx.now):
            if revoked(grant.created_by):
                reasons.append(("grant_revoked", f"grant {grant.grant_id}'s creator is revoked"))
                continue
            used = 0
            if grant.spec.budget is not None:
                used = dispatched_micros(ctx.store, who, grant.spec.actions, grant.created_at)
            why = grant_refusal(
                grant,
                action=ctx.entry.action,
                scope=ctx.entry.scope,
                target=target,
                value=value,
                environment=environment,
                now=ctx.now,
                used_micros=used,
            )
            if why is None:
                if uses is not None:
                    uses.note(ctx.entry.op_key, grant)
                return None
            reasons.append(why)
        if not reasons:
            return Refusal("reject", "grant_missing", f"{who!r} holds no live grant")
        # The first grant's code; every grant's reason, so the operator sees why none covered.
        return Refusal("reject", reasons[0][0], "; ".join(r for _, r in reasons)[:1000])

    return authorise


def approver_revocation_check(revoked: Revoked) -> Stage:
    """Approvals given by a principal revoked since stop counting: ask again."""

    def check(ctx: DispatchContext) -> Refusal | None:
        gone = sorted(
            a.approver
            for a in ctx.store.list_approvals(ctx.entry.scope, ctx.entry.operation_id)
            if a.verdict == "approve" and revoked(a.approver)
        )
        if gone:
            return Refusal(
                "reapprove", "approver_revoked", f"approver(s) revoked since: {', '.join(gone)}"
            )
        return None

    return check


def approver_role_check(roles: ApproverRoles) -> Stage:
    """Approvals by a principal who no longer holds an approver role of the class stop
    counting: ask again. A role is held by config membership now, or by the roles the
    approver's verified credential asserted when approving (kept with the approval)."""

    def check(ctx: DispatchContext) -> Refusal | None:
        out = sorted(
            a.approver
            for a in ctx.store.list_approvals(ctx.entry.scope, ctx.entry.operation_id)
            if a.verdict == "approve" and not roles.entitled(ctx.entry.action, a.approver, a.roles)
        )
        if out:
            return Refusal(
                "reapprove", "approver_not_entitled", f"no longer entitled: {', '.join(out)}"
            )
        return None

    return check
