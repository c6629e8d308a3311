"""The hand-over at approval: a minted-id class's proposal becomes an operation only when its
approvals complete (issue 39 item 7, docs/service.md "Operation ids: caller or minted").

A proposal the policy sent to approval is journalled under a ``proposal:`` handle, the name the
approvers answer, and nothing is ever dispatched under it. In the transaction that records the
last approval, :func:`hand_over` (written once, for both dialects):

1. moves the proposal ``awaiting_approval -> superseded`` (terminal), its detail naming the id;
2. journals the operation under the id minted at this approval, ``proposed -> validated``, with
   the proposal's intent, fingerprint and decision, and ``operation_id_minted`` naming the
   handle and the request key;
3. carries the approvals and the approval request over to it, so every later check (authority,
   preconditions, a new round) reads them under the operation's own id;
4. releases it to the standing dispatcher when its proposer asked for it to be sent;
5. rebinds the request key to the operation, so the same key again returns the operation;
6. moves a run-bound proposal's binding (``run_effects``) to the operation, so its run's budget
   still governs it at dispatch (invariant 12) and the run's journal names the effect.

All of it commits or none of it does: a crash leaves the proposal awaiting approval, or the
operation validated under its minted id; never both, never neither (invariants 1 and 3).
"""

from __future__ import annotations

from collections.abc import Mapping

from effectgate._core.runs import RunCallRef
from effectgate._core.states import State
from effectgate.store import _journal as j
from effectgate.store._tx import SharedTx
from effectgate.store.base import NewOperation, Operation, dumps

__all__ = ["hand_over"]

_APPROVAL_COLUMNS = (
    "approver, verdict, fingerprint, reason, at, roles, precondition, precondition_at"
)
_REQUEST_COLUMNS = "fingerprint, required, expires_at, proposers, dispatch_on_approval"


def hand_over(
    tx: SharedTx,
    proposal: Operation,
    minted: str,
    now: float,
    done: Mapping[str, object],
    release: bool,
) -> Operation:
    """The operation ``minted`` that ``proposal`` (its approvals complete, ``done``) becomes."""
    scope, handle = proposal.scope, proposal.operation_id
    j.move_locked(
        tx,
        proposal,
        State.SUPERSEDED,
        now,
        f"approved; continues as operation {minted}",
        {**done, "operation_id": minted},
    )
    new = NewOperation(
        scope=scope,
        operation_id=minted,
        action=proposal.action,
        fingerprint=proposal.fingerprint,
        intent=proposal.intent,
        effect=proposal.effect,
        # A journalled proposal always carries its decision; "" only satisfies the type.
        tier=proposal.tier or "",
        reason=proposal.reason or "",
        policy_version=proposal.policy_version or "",
    )
    keys = tx.rows(
        "UPDATE request_keys SET operation_id = ? WHERE scope = ? AND operation_id = ? "
        "RETURNING request_key",
        (minted, scope, handle),
    )
    # A run-bound proposal's binding moves with it: the run's budget (deadline, value) is
    # checked at dispatch under the operation's id, and a re-proposal names the same call.
    bound = tx.rows(
        "UPDATE run_effects SET operation_id = ? WHERE scope = ? AND operation_id = ? "
        "RETURNING run_id, slot, call_id",
        (minted, scope, handle),
    )
    tx.audit(
        "operation_id_minted",
        {
            "action": proposal.action,
            "request_key": str(keys[0][0]) if keys else None,
            "fingerprint": proposal.fingerprint,
            "proposal": handle,
            "run_call": RunCallRef(*(str(v) for v in bound[0])).to_dict() if bound else None,
        },
        now,
        scope,
        minted,
    )
    intent = dumps(proposal.intent)
    path = [State.PROPOSED, State.VALIDATED]
    audit = {**done, "proposal": handle}
    # The entries first: a dialect may record the last one's (seq, hash) in the row.
    for kind, detail in j.path_audit(new, path, audit, None, intent_text=intent, now=now):
        tx.audit(kind, detail, now, scope, minted)
    tx.insert_row(new, State.VALIDATED, None, now, intent)
    tx.write(
        f"INSERT INTO approvals (scope, operation_id, {_APPROVAL_COLUMNS}) "
        f"SELECT scope, ?, {_APPROVAL_COLUMNS} FROM approvals "
        "WHERE scope = ? AND operation_id = ?",
        (minted, scope, handle),
    )
    tx.write(
        f"INSERT INTO approval_requests (scope, operation_id, {_REQUEST_COLUMNS}) "
        f"SELECT scope, ?, {_REQUEST_COLUMNS} FROM approval_requests "
        "WHERE scope = ? AND operation_id = ?",
        (minted, scope, handle),
    )
    if release:
        tx.write(
            "UPDATE operations SET released_at = ? WHERE scope = ? AND operation_id = ?",
            (now, scope, minted),
        )
    return new.journalled(State.VALIDATED, now)
