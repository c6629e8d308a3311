"""Which operation id a proposal journals under: the caller's, or one the boundary mints.

A class with ``operation_ids = "caller"`` (the default) journals under the id its proposer
sends; ids in the boundary's namespaces (``minted:``, ``proposal:``) are refused, so no caller
can claim one. A class with ``operation_ids = "minted"`` treats that id as a *request key*, bound
durably to what the boundary gives the proposal, so the same key with the same payload always
names the same proposal (no second action from a proposer that lost its id) and the same key
with another payload is refused (:class:`~effectgate.errors.RequestKeyConflict`, invariant 2).
What it is given depends on the decision: one that lets the action run now mints an unguessable
``minted:`` operation id; one that does not (it waits for approval, or policy refused it) gives
a ``proposal:`` handle, under which nothing is ever dispatched. The approval that completes
mints the operation id then, and the store hands the proposal over to it in the approving
transaction (:mod:`effectgate.store._handover`): a token minted at approval, never a payload
hash, and never for a proposal refused or denied. An id or handle the boundary returned may be
sent again in place of the key. docs/service.md, "Operation ids".
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import NoReturn

from effectgate._core.effects import (
    MINTED_PREFIX,
    PROPOSAL_PREFIX,
    is_minted_id,
    is_proposal_handle,
)
from effectgate._core.intent import ActionClass, Intent, Tier
from effectgate._core.policy import Decision
from effectgate._execute.predispatch import Admission
from effectgate.errors import IntentError, RequestKeyConflict
from effectgate.store.roles import Store

__all__ = ["mint", "operation_id_for", "proposal_handle"]

#: 128 random bits, hex: inside the operation-id alphabet, and no one can guess another's.
_TOKEN_BYTES = 16


def mint() -> str:
    """A fresh operation id in the minted namespace."""
    return MINTED_PREFIX + secrets.token_hex(_TOKEN_BYTES)


def proposal_handle() -> str:
    """A fresh handle for a proposal no decision let run yet (never an operation id)."""
    return PROPOSAL_PREFIX + secrets.token_hex(_TOKEN_BYTES)


def operation_id_for(
    store: Store,
    now: Callable[[], float],
    ac: ActionClass,
    parsed: Intent,
    decision: Decision,
    scope: str,
    given: str,
    admission: Admission | None,
) -> str:
    """The operation id (or proposal handle) to journal ``parsed`` under, given the id the
    caller sent and the policy's ``decision``.

    A continuation's id is the boundary's own already (``admission``); a refusal writes only
    its audit line (a conflicting key's is the store's)."""
    if admission is not None:
        return given
    reserved = is_minted_id(given) or is_proposal_handle(given)
    if ac.operation_ids == "caller":
        if reserved:
            _refuse(
                store,
                now,
                ac,
                scope,
                given,
                f"operation ids starting with {MINTED_PREFIX!r} or {PROPOSAL_PREFIX!r} are "
                f'effectgate\'s for classes with operation_ids = "minted"; {ac.name} takes '
                "the caller's id",
                "reserved_operation_id",
            )
        return given
    if reserved:
        # A retry under the id the boundary returned: the row must be this class's own.
        row = store.get(scope, given)
        if row is None or row.action != ac.name:
            _refuse(
                store,
                now,
                ac,
                scope,
                given,
                f"no {ac.name} operation or proposal {given!r} was given out in scope "
                f"{scope!r}; send your request key to propose",
                "unknown_minted_operation",
            )
        return given
    # Minted only at the decision that lets the action run; else at its approval, or never.
    runs = decision.allowed and decision.tier is Tier.VALIDATE
    fresh = mint() if runs else proposal_handle()
    bound, fingerprint = store.bind_request_key(
        scope, ac.name, given, fingerprint=parsed.fingerprint, operation_id=fresh, now=now()
    )
    if fingerprint != parsed.fingerprint:
        raise RequestKeyConflict(
            f"request key {given!r} was used for another {ac.name} proposal (operation "
            f"{bound!r}); a different action needs a new request key",
            request_key=given,
            operation_id=bound,
            stored=fingerprint,
            offered=parsed.fingerprint,
        )
    return bound


def _refuse(
    store: Store,
    now: Callable[[], float],
    ac: ActionClass,
    scope: str,
    given: str,
    message: str,
    reason: str,
) -> NoReturn:
    exc = IntentError(message, field="operation_id", reason=reason)
    store.append_audit(
        "intent_refused",
        {"action": ac.name, "error": exc.to_dict()},
        now=now(),
        scope=scope,
        operation_id=given,
    )
    raise exc
