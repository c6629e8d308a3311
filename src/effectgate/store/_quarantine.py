"""The quarantine role: the operators' queue, its resolutions, and a new approval round,
written once over :class:`StoreHooks`.

A row enters the queue from any non-terminal state with the full record of why (for a key
divergence: both keys, both speculation records, the attempt) in its audit entry, and leaves it
only by an operator's :class:`~effectgate._core.resolution.Resolution` (invariant 10), planned by
:func:`~effectgate._core.resolution.plan_resolution` and applied here with its audit entry in one
transaction. Where the row came from and whether it was ever dispatched are read from the
ledger itself (the audit trail and ``submitted_at``), so a row quarantined by any path (the
reconciler's duplicate effect, a venue without a read view, a divergence) is resolved the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from effectgate._core.resolution import Resolution, plan_resolution
from effectgate._core.states import State
from effectgate.errors import ControlError, OperationNotFound, ResolutionRefused, StaleState
from effectgate.store import _sql as sql
from effectgate.store._hooks import Hold, StoreHooks, scoped
from effectgate.store._journal import move_locked
from effectgate.store._tx import SharedTx
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX, Operation, credential_marker

__all__ = ["QuarantineRoles"]


def _found(row: Operation | None, scope: str, operation_id: str) -> Operation:
    if row is None:
        raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
    return row


class QuarantineRoles(StoreHooks):
    """Entering and leaving the operators' queue; a new approval round."""

    def quarantine(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        *,
        kind: str,
        reason: str,
        record: Mapping[str, object],
        by: str,
        now: float,
    ) -> Operation:
        """``expected -> quarantined`` with the full record in its audit entry (one
        transaction). :class:`StaleState` if the row is no longer ``expected``."""

        def work(tx: SharedTx, row: Operation | None) -> Operation:
            row = _found(row, scope, operation_id)
            if row.state is not expected:
                raise StaleState(
                    f"operation {operation_id!r} is {row.state.value!r}, not {expected.value!r}"
                )
            return move_locked(
                tx,
                row,
                State.QUARANTINED,
                now,
                reason,
                {"by": by, "quarantine": kind, "record": dict(record)},
            )

        return self._run(
            work,
            f"quarantine {scope}:{operation_id}",
            Hold(key=(scope, operation_id), row=(scope, operation_id)),
        )

    def resolve_quarantine(
        self,
        scope: str,
        operation_id: str,
        resolution: Resolution,
        *,
        now: float,
        approval_ttl: float | None = None,
    ) -> Operation:
        """Apply an operator's resolution to a quarantined row (see the module docstring).

        A release back to ``awaiting_approval`` opens a new approval round expiring
        ``approval_ttl`` from now (None: the round it had, whose expiry may have passed).
        :class:`ResolutionRefused` when the row is not quarantined or the resolution may not
        apply to it; nothing is written then.
        """
        if approval_ttl is not None and not approval_ttl > 0:
            raise ResolutionRefused("approval_ttl must be positive")
        by = resolution.by
        if (
            not isinstance(by, str)
            or not IDENTITY_PATTERN.fullmatch(by)
            or by.startswith(SYSTEM_PREFIX)
        ):
            # A resolution is a human's: never a system actor, never a malformed name.
            raise ResolutionRefused(
                f"resolved by {by!r}: must match {IDENTITY_PATTERN.pattern} and not "
                f"start with {SYSTEM_PREFIX!r}"
            )

        def work(tx: SharedTx, row: Operation | None) -> Operation:
            row = _found(row, scope, operation_id)
            target = plan_resolution(
                row.state,
                quarantined_from=_quarantined_from(tx, scope, operation_id),
                dispatched=row.submitted_at is not None,
                resolution=resolution,
            )
            event: dict[str, object] = {
                "by": by,
                "resolution": resolution.to_dict(),
                **credential_marker(by),
            }
            fresh_round = target is State.AWAITING_APPROVAL and approval_ttl is not None
            if fresh_round and approval_ttl is not None:
                event["approval_round"] = "new"
                event["earlier_approvals"] = _earlier_approvals(tx, scope, operation_id)
                event["expires_at"] = now + approval_ttl
            moved = move_locked(tx, row, target, now, resolution.reason, event)
            if fresh_round and approval_ttl is not None:
                _open_round(tx, row, None, now + approval_ttl)
            if resolution.venue_id is not None:
                tx.write(
                    "UPDATE operations SET venue_id = ? WHERE scope = ? AND operation_id = ?",
                    (resolution.venue_id, scope, operation_id),
                )
                moved = replace(moved, venue_id=resolution.venue_id)
            return moved

        return self._run(
            work,
            f"resolve {scope}:{operation_id}",
            Hold(key=(scope, operation_id), row=(scope, operation_id)),
        )

    def reopen_approval(
        self,
        scope: str,
        operation_id: str,
        *,
        reason: str,
        required: int,
        ttl: float,
        by: str,
        now: float,
    ) -> Operation:
        """``validated -> awaiting_approval``: a new approval round. Earlier approvals no longer
        count (they stay in the audit trail, listed in this round's entry), the same approvers
        may approve again, and the round has its own expiry (``now + ttl``)."""
        if isinstance(required, bool) or not isinstance(required, int) or required < 1:
            raise ControlError("a new approval round needs required >= 1", field="required")
        if not ttl > 0:
            raise ControlError("a new approval round needs ttl > 0", field="ttl")

        def work(tx: SharedTx, row: Operation | None) -> Operation:
            row = _found(row, scope, operation_id)
            if row.state is not State.VALIDATED:
                raise StaleState(f"operation {operation_id!r} is {row.state.value!r}")
            earlier = _earlier_approvals(tx, scope, operation_id)
            moved = move_locked(
                tx,
                row,
                State.AWAITING_APPROVAL,
                now,
                reason,
                {
                    "by": by,
                    "approval_round": "new",
                    "earlier_approvals": earlier,
                    "expires_at": now + ttl,
                },
            )
            _open_round(tx, row, required, now + ttl)
            return moved

        return self._run(
            work,
            f"approval round {scope}:{operation_id}",
            Hold(key=(scope, operation_id), row=(scope, operation_id)),
        )

    def list_quarantined(self, scope: str | None = None, *, limit: int = 1000) -> list[Operation]:
        """The queue: quarantined rows, oldest in the queue first."""
        clause, args = scoped("op_key", scope)
        where = f"{clause} AND state = 'quarantined'" if clause else "WHERE state = 'quarantined'"
        return [
            sql.operation_from_row(r)
            for r in self._rows(
                f"SELECT {sql.OP_COLUMNS} FROM operations {where} "
                "ORDER BY updated_at, op_key LIMIT ?",
                (*args, limit),
                "list_quarantined",
            )
        ]

    def quarantine_summary(self) -> tuple[int, float | None]:
        """``(rows in the queue, when the oldest entered it)`` for the metric and the alert."""
        rows = self._rows(
            "SELECT count(*), min(updated_at) FROM operations WHERE state = 'quarantined'",
            (),
            "quarantine_summary",
        )
        count, oldest = rows[0] if rows else (0, None)
        return int(count or 0), None if oldest is None else float(oldest)

    def quarantined_from(self, scope: str, operation_id: str) -> State | None:
        """The state the row last entered the queue from (None: not recorded)."""
        return _from_trail(
            self._rows(_TRAIL, sql.op_entries_args(scope, operation_id), "quarantined_from")
        )


_TRANSITIONS = sql.op_entries("seq, detail", " AND a.kind = 'transition'")
_TRAIL = f"SELECT detail FROM ({_TRANSITIONS}) t ORDER BY seq DESC"


def _quarantined_from(tx: SharedTx, scope: str, operation_id: str) -> State | None:
    return _from_trail(tx.rows(_TRAIL, sql.op_entries_args(scope, operation_id)))


def _from_trail(rows: Sequence[Sequence[Any]]) -> State | None:
    for (text,) in rows:
        detail = json.loads(text) if isinstance(text, str) else {}
        if isinstance(detail, dict) and detail.get("state") == State.QUARANTINED.value:
            try:
                return State(str(detail.get("from")))
            except ValueError:
                return None
    return None


def _earlier_approvals(tx: SharedTx, scope: str, operation_id: str) -> list[dict[str, object]]:
    return [
        {"approver": str(a), "verdict": str(v), "at": float(t)}
        for a, v, t in tx.rows(
            "SELECT approver, verdict, at FROM approvals WHERE scope = ? AND operation_id = ?",
            (scope, operation_id),
        )
    ]


def _open_round(tx: SharedTx, row: Operation, required: int | None, expires_at: float) -> None:
    """A new approval round for ``row``: earlier approvals void, its own expiry; ``required``
    None keeps the round's count."""
    scope, operation_id = row.scope, row.operation_id
    tx.write("DELETE FROM approvals WHERE scope = ? AND operation_id = ?", (scope, operation_id))
    updated = tx.rows(
        "UPDATE approval_requests SET required = coalesce(?, required), expires_at = ?, "
        "fingerprint = ? WHERE scope = ? AND operation_id = ? RETURNING 1",
        (required, expires_at, row.fingerprint, scope, operation_id),
    )
    if not updated:
        tx.write(
            "INSERT INTO approval_requests (scope, operation_id, fingerprint, required, "
            "expires_at, proposers, dispatch_on_approval) VALUES (?,?,?,?,?,?,?)",
            (scope, operation_id, row.fingerprint, required or 1, expires_at, "[]", False),
        )
    tx.write(
        "UPDATE operations SET released_at = NULL WHERE scope = ? AND operation_id = ?",
        (scope, operation_id),
    )
