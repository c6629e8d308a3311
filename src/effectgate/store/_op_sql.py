"""The operations row's own statements, written once for both dialects: a new row's insert, the
compare-and-set every transition runs, the lease of uncertain rows and the journal's first reads.

A template names its parameters ``{name}``; a dialect renders it in its placeholder style
(:func:`positional`: ``?`` in the template's order, :func:`named`: psycopg's ``%(name)s``) and
adds only what is its own: SQLite's audit anchors in the row, PostgreSQL's chained-audit CTEs
and row locks. Imports only the store's records and :mod:`effectgate.store._sql`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from effectgate._core.states import State
from effectgate.store import _sql as sql
from effectgate.store.base import Move, NewOperation, Operation, dumps

__all__ = [
    "CHANGED_COLUMNS",
    "CONTROLS_ACTIVE",
    "N_OP",
    "PROBE",
    "ROW_COLUMNS",
    "ROW_SLOTS",
    "SELECT_WITH_CONTROLS",
    "Positional",
    "cas",
    "cas_on_copy",
    "cas_params",
    "lease_uncertain",
    "move_params",
    "named",
    "positional",
    "request_params",
    "row_params",
]

_SLOT = re.compile(r"\{(\w+)\}")


def positional(template: str) -> str:
    """``template`` with ``?`` placeholders: its arguments go in the order the slots appear."""
    return _SLOT.sub("?", template)


def named(template: str) -> str:
    """``template`` with psycopg's named placeholders (``%(name)s``)."""
    return _SLOT.sub(r"%(\1)s", template)


class Positional:
    """A template in ``?`` style (:func:`positional`) with the slot names its arguments are taken
    by, in order: a dialect with positional placeholders binds the named parameters the other
    one passes as they are (:func:`cas_params`, :func:`row_params`)."""

    __slots__ = ("args", "names", "text")

    def __init__(self, template: str) -> None:
        self.text = positional(template)
        self.names = tuple(_SLOT.findall(template))
        if len(self.names) < 2:
            raise ValueError("a positional statement binds two slots or more")
        #: ``params`` (a mapping holding every slot name) as the statement's arguments.
        self.args: Callable[[Mapping[str, Any]], tuple[Any, ...]] = itemgetter(*self.names)


#: A new operations row's columns (:func:`row_params` names their values).
ROW_COLUMNS = (
    "scope, operation_id, op_key, action, fingerprint, state, intent, effect, tier, reason, "
    "policy_version, detail, created_at, updated_at, submitted_at"
)


_ROW_NAMES = tuple(c.strip() for c in ROW_COLUMNS.split(","))
#: The values of :data:`ROW_COLUMNS` as template slots (:func:`row_params`'s names).
ROW_SLOTS = ", ".join("{" + name + "}" for name in _ROW_NAMES)


def row_params(
    new: NewOperation, state: State, now: float, intent_text: str, held: str | None = None
) -> dict[str, Any]:
    """The values of :data:`ROW_COLUMNS` by name for ``new`` journalled in ``state`` at ``now``
    (``held``: the row's detail, a hold's reason), and ``now``."""
    return {
        "scope": new.scope,
        "operation_id": new.operation_id,
        "op_key": new.op_key,
        "action": new.action,
        "fingerprint": new.fingerprint,
        "state": state.value,
        "intent": intent_text,
        "effect": dumps(new.effect),
        "tier": new.tier,
        "reason": new.reason,
        "policy_version": new.policy_version,
        "detail": held,
        "created_at": now,
        "updated_at": now,
        "submitted_at": now if state is State.SUBMITTED else None,
        "now": now,
    }


def cas(anchors: str = "") -> str:
    """The compare-and-set every transition runs, as a template: the row moves only from
    ``expected``, and its lease ends. ``anchors``: more assignments a dialect makes in the same
    update (SQLite's audit anchors, with slots of their own)."""
    return (
        "UPDATE operations SET state = {target}, updated_at = {now}, version = version + 1, "
        "venue_id = coalesce({venue_id}, venue_id), "
        f"detail = coalesce({{detail}}, {KEEP_DETAIL}), "
        "submitted_at = coalesce({submitted_at}, submitted_at), lease_owner = NULL, "
        f"lease_until = NULL{anchors} "
        "WHERE scope = {scope} AND operation_id = {operation_id} AND state = {expected}"
    )


#: What a compare-and-set changed, for a caller that holds the row (``base.moved``).
CHANGED_COLUMNS = "version, venue_id, detail, submitted_at"


def request_params(request: tuple[Any, ...] | None) -> dict[str, Any]:
    """An approval request (``_sql.INSERT_REQUEST``'s arguments, or None) as named parameters:
    ``approval`` whether there is one, and its columns (unused without one)."""
    return {
        "approval": request is not None,
        "required": request[3] if request else None,
        "expires_at": request[4] if request else None,
        "proposers": request[5] if request else None,
        "release": request[6] if request else None,
    }


#: What a move without a new detail keeps of the old one: a ``held:`` note says why a row
#: waits in ``validated``, and is false of it once it moves on (issue 39 item 3).
KEEP_DETAIL = "CASE WHEN substr(detail, 1, 5) = 'held:' THEN NULL ELSE detail END"


def kept_detail(detail: str | None) -> str | None:
    """:data:`KEEP_DETAIL` in Python, for a row the caller holds a copy of."""
    return None if detail is not None and detail.startswith("held:") else detail


def cas_on_copy(
    known: Operation, venue_id: str | None, detail: str | None
) -> tuple[int, str | None, str | None, float | None]:
    """What :func:`cas` (no ``submitted_at``) leaves of a row that still is the copy
    ``known``, as :data:`CHANGED_COLUMNS` (``base.moved``): no ``RETURNING`` needed."""
    return (
        known.version + 1,
        known.venue_id if venue_id is None else venue_id,
        kept_detail(known.detail) if detail is None else detail,
        known.submitted_at,
    )


def cas_params(
    scope: str,
    operation_id: str,
    expected: State,
    target: State,
    now: float,
    venue_id: str | None = None,
    detail: str | None = None,
    submitted_at: float | None = None,
) -> dict[str, Any]:
    """:data:`CAS`'s named parameters."""
    return {
        "target": target.value,
        "now": now,
        "venue_id": venue_id,
        "detail": detail,
        "submitted_at": submitted_at,
        "scope": scope,
        "operation_id": operation_id,
        "expected": expected.value,
    }


def move_params(move: Move, now: float) -> dict[str, Any]:
    """:func:`cas_params` of one move of a batch (``transition_many``)."""
    return cas_params(
        move.scope, move.operation_id, move.expected, move.target, now, move.venue_id, move.detail
    )


def lease_uncertain(lock: str = "") -> str:
    """The reconciler's claim on uncertain rows nobody leases (or whose lease ran out), in key
    order, as a template. The CTE is MATERIALIZED so the limited set is computed exactly once;
    ``lock``: what a dialect adds so concurrent claims skip each other's rows."""
    return (
        "WITH claim AS MATERIALIZED (SELECT op_key FROM operations WHERE state = 'submitted' "
        "AND (lease_until IS NULL OR lease_until < {now}) ORDER BY op_key LIMIT {limit}"
        f"{lock}) UPDATE operations SET lease_owner = {{owner}}, lease_until = {{until}} "
        "WHERE op_key IN (SELECT op_key FROM claim) AND state = 'submitted' "
        f"RETURNING {sql.ENTRY_COLUMNS}"
    )


#: ``ClassControls.active`` as SQL, over a ``class_controls`` row.
CONTROLS_ACTIVE = "killed OR breaker_open OR shadow OR envelope_version > 0"

#: The journal's common case first, in two scalars (cheaper than the join below): is the key
#: journalled already, and is any control active on the class? Arguments: scope, operation id,
#: action.
PROBE = (
    "SELECT (SELECT 1 FROM operations WHERE scope = ? AND operation_id = ?), "
    f"(SELECT {CONTROLS_ACTIVE} FROM class_controls WHERE action = ?)"
)
#: Columns of an operations row (:data:`effectgate.store._sql.OP_COLUMNS`) in
#: :data:`SELECT_WITH_CONTROLS`; the class's action and controls follow them.
N_OP = len(sql.OP_COLUMNS.split(","))
#: The journal's first read otherwise: the row if it exists and, beside it, the class's
#: controls (which the controls checks would read next), in one statement. Arguments as
#: :data:`PROBE`'s.
SELECT_WITH_CONTROLS = (
    "SELECT "
    + ", ".join(f"o.{c.strip()}" for c in sql.OP_COLUMNS.split(","))
    + ", c.action, "
    + ", ".join(f"c.{c.strip()}" for c in sql.CONTROL_COLUMNS.split(","))
    + " FROM (SELECT 1) LEFT JOIN operations o ON o.scope = ? AND o.operation_id = ? "
    "LEFT JOIN class_controls c ON c.action = ?"
)
