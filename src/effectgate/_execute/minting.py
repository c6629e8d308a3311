"""Which operation id a proposal journals under: the caller's, or one the boundary mints.

A class with ``operation_ids = "caller"`` (the default) journals under the id its proposer
sends; ids in the minted namespace are refused, so no caller can claim one. A class with
``operation_ids = "minted"`` treats that id as a *request key*: at the decision (after the
policy, before the journal) the boundary mints an unguessable ``minted:`` id and binds the key to
it durably, so the same key with the same payload always names the same operation (no second
action from a proposer that lost its id), and the same key with another payload is refused
(:class:`~effectgate.errors.RequestKeyConflict`, invariant 2). A minted id the boundary returned
may be sent again in place of the key: the row's own retry. docs/service.md, "Operation ids".
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import NoReturn

from effectgate._core.effects import MINTED_PREFIX, is_minted_id
from effectgate._core.intent import ActionClass, Intent
from effectgate._execute.predispatch import Admission
from effectgate.errors import IntentError, RequestKeyConflict
from effectgate.store.roles import Store

__all__ = ["mint", "operation_id_for"]

#: 128 random bits, hex: inside the operation-id alphabet, and no one can guess another's.
_TOKEN_BYTES = 16


def mint() -> str:
    """A fresh operation id in the minted namespace."""
    return MINTED_PREFIX + secrets.token_hex(_TOKEN_BYTES)


def operation_id_for(
    store: Store,
    now: Callable[[], float],
    ac: ActionClass,
    parsed: Intent,
    scope: str,
    given: str,
    admission: Admission | None,
) -> str:
    """The operation id to journal ``parsed`` under, given the id the caller sent.

    A continuation's id is the boundary's own already (``admission``); a refusal writes only
    its audit line (a conflicting key's is the store's)."""
    if admission is not None:
        return given
    if ac.operation_ids == "caller":
        if is_minted_id(given):
            _refuse(
                store,
                now,
                ac,
                scope,
                given,
                f"operation ids starting with {MINTED_PREFIX!r} are minted by effectgate for "
                f'classes with operation_ids = "minted"; {ac.name} takes the caller\'s id',
                "reserved_operation_id",
            )
        return given
    if is_minted_id(given):
        # A retry under the id the boundary returned: the row must be this class's own.
        row = store.get(scope, given)
        if row is None or row.action != ac.name:
            _refuse(
                store,
                now,
                ac,
                scope,
                given,
                f"no {ac.name} operation {given!r} was minted in scope {scope!r}; send your "
                "request key to propose",
                "unknown_minted_operation",
            )
        return given
    bound, fingerprint = store.bind_request_key(
        scope, ac.name, given, fingerprint=parsed.fingerprint, operation_id=mint(), now=now()
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
