"""The retention role: legal holds, anchoring records, and the prune (issues 20, 41), written
once over :class:`StoreHooks`.

A prune removes, per audit lane (SQLite has one, PostgreSQL sixteen), a *prefix* of the lane
up to its anchored head (:mod:`effectgate.store._prune` says which), together with the rows and
approval records of the operations it covers. Entries still in force that are not about an
operation do not stop it: they are carried in the prune's checkpoint, a chained
``audit_pruned`` entry written in the same transaction
(:mod:`effectgate._core.prune_checkpoint`), which also states every pruned lane's start. Each
lane's start ``(seq, hash)`` is also the lane's ``audit_checkpoints`` row, from which the chain
then verifies.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from effectgate._core.prune_checkpoint import checkpoint_detail
from effectgate._core.retention import LegalHold, PruneReport
from effectgate.errors import ConfigError, ControlError, OperationNotFound
from effectgate.store._hooks import StoreHooks
from effectgate.store._prune import (
    Carry,
    cut_lane,
    has_live_continuation,
    prunable_operation,
    record_passed_heads,
)
from effectgate.store._tx import SharedTx
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX

__all__ = [
    "LegalHold",
    "PruneReport",
    "RetentionRoles",
    "has_live_continuation",
    "prunable_operation",
]


def _actor(by: str) -> None:
    if (
        not isinstance(by, str)
        or not IDENTITY_PATTERN.fullmatch(by)
        or by.startswith(SYSTEM_PREFIX)
    ):
        raise ControlError(f"{by!r} is not an operator's name")


def _reason(reason: str) -> None:
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 2000:
        raise ControlError("a reason is required (at most 2000 characters)")


_HOLD_COLUMNS = (
    "hold_id, scope, operation_id, placed_by, reason, placed_at, released_at, released_by"
)


def _hold(r: Sequence[Any]) -> LegalHold:
    return LegalHold(
        str(r[0]),
        str(r[1]),
        None if r[2] is None else str(r[2]),
        str(r[3]),
        str(r[4]),
        float(r[5]),
        None if r[6] is None else float(r[6]),
        None if r[7] is None else str(r[7]),
    )


class RetentionRoles(StoreHooks):
    """Legal holds, audit checkpoints, and the prune."""

    def place_hold(
        self, scope: str, operation_id: str | None, *, by: str, reason: str, now: float
    ) -> LegalHold:
        """Hold a whole scope (``operation_id`` None) or one operation: prune never crosses it."""
        _actor(by)
        _reason(reason)
        if not isinstance(scope, str) or not scope:
            raise ControlError("a hold needs a scope")
        hold = LegalHold(uuid.uuid4().hex[:16], scope, operation_id, by, reason, now)

        def work(tx: SharedTx, _: object) -> LegalHold:
            tx.write(
                f"INSERT INTO legal_holds ({_HOLD_COLUMNS}) VALUES (?,?,?,?,?,?,NULL,NULL)",
                (hold.hold_id, scope, operation_id, by, reason, now),
            )
            tx.audit("legal_hold_placed", {**hold.to_dict(), "by": by}, now)
            return hold

        return self._run(work, "place_hold")

    def release_hold(self, hold_id: str, *, by: str, reason: str, now: float) -> LegalHold:
        """Release an active hold (audited); :class:`OperationNotFound` if there is none."""
        _actor(by)
        _reason(reason)

        def work(tx: SharedTx, _: object) -> LegalHold:
            rows = tx.rows(
                f"SELECT {_HOLD_COLUMNS} FROM legal_holds "
                "WHERE hold_id = ? AND released_at IS NULL",
                (hold_id,),
            )
            if not rows:
                raise OperationNotFound(f"no active legal hold {hold_id!r}")
            tx.write(
                "UPDATE legal_holds SET released_at = ?, released_by = ? WHERE hold_id = ?",
                (now, by, hold_id),
            )
            tx.audit("legal_hold_released", {"hold_id": hold_id, "by": by, "reason": reason}, now)
            held = _hold(rows[0])
            return LegalHold(**{**held.to_dict(), "released_at": now, "released_by": by})  # type: ignore[arg-type]

        return self._run(work, "release_hold")

    def record_anchor(
        self, checkpoint: Mapping[str, Any], locations: Sequence[str], *, by: str, now: float
    ) -> None:
        """Record an anchoring in the chain itself (``audit_anchored``): the checkpoint's digest
        and heads and where it was written, so the log says when it was last anchored and a
        deleted anchoring entry is itself a break in the chain."""
        if not isinstance(by, str) or not IDENTITY_PATTERN.fullmatch(by):
            raise ControlError(f"{by!r} is not a principal's name")
        detail = {
            "digest": checkpoint.get("digest"),
            "heads": checkpoint.get("heads"),
            "label": checkpoint.get("label"),
            "locations": [str(w) for w in locations],
            "by": by,
        }

        def work(tx: SharedTx, _: object) -> None:
            tx.audit("audit_anchored", detail, now)

        self._run(work, "record_anchor")

    def list_holds(self, *, active_only: bool = True) -> list[LegalHold]:
        where = "WHERE released_at IS NULL " if active_only else ""
        return [
            _hold(r)
            for r in self._rows(
                f"SELECT {_HOLD_COLUMNS} FROM legal_holds {where}ORDER BY placed_at, hold_id",
                (),
                "list_holds",
            )
        ]

    def pruned_operation(self, scope: str, operation_id: str) -> tuple[str, str | None] | None:
        """``(final state, venue id)`` of an operation a prune removed, None if none did."""
        rows = self._rows(
            "SELECT state, venue_id FROM pruned_operations WHERE scope = ? AND operation_id = ?",
            (scope, operation_id),
            "pruned_operation",
        )
        if not rows:
            return None
        return str(rows[0][0]), None if rows[0][1] is None else str(rows[0][1])

    def audit_starts(self) -> dict[int, tuple[int, str]]:
        """Per pruned lane, the last removed entry ``(seq, hash)``: the checkpoint the lane's
        first remaining entry must follow."""
        return {
            int(lane): (int(seq), str(h))
            for lane, seq, h in self._rows(
                "SELECT lane, seq, hash FROM audit_checkpoints", (), "audit_starts"
            )
        }

    def prune_audit(
        self,
        *,
        before: float,
        now: float,
        by: str,
        anchored: Mapping[int, tuple[int, str]],
        min_age: Mapping[str, float],
        key: bytes | None = None,
    ) -> PruneReport:
        """Cut each lane (module docstring) up to its anchored head and write the checkpoint,
        signed with ``key`` (the anchor key) when given.

        ``anchored``: the heads of a checkpoint just written to the anchors; a lane with no
        anchored head is not pruned, and one whose anchored entry is not in the log refuses
        the whole prune (:class:`ConfigError`).
        """
        _actor(by)

        def work(tx: SharedTx, _: object) -> PruneReport:
            report = PruneReport()
            starts = {
                int(lane): (int(seq), str(h))
                for lane, seq, h in tx.rows("SELECT lane, seq, hash FROM audit_checkpoints", ())
            }
            carry = Carry()
            for lane, (head_seq, head_hash) in sorted(anchored.items()):
                found = tx.rows(
                    "SELECT hash FROM audit_log WHERE seq = ? AND lane = ?", (head_seq, lane)
                )
                if not found or str(found[0][0]) != head_hash:
                    raise ConfigError(
                        f"lane {lane}: the anchored head seq {head_seq} is not in the log; "
                        "nothing was pruned (run `effectgate audit anchor --verify`)"
                    )
                after = starts.get(lane, (0, ""))[0]
                cut_lane(
                    tx,
                    lane,
                    after,
                    head_seq,
                    before=before,
                    now=now,
                    min_age=min_age,
                    report=report,
                    carry=carry,
                )
            if not report.cuts:
                return report
            for lane, (seq, h) in report.cuts.items():
                if lane in starts:
                    tx.write(
                        "UPDATE audit_checkpoints SET seq = ?, hash = ?, pruned_at = ? "
                        "WHERE lane = ?",
                        (seq, h, now, lane),
                    )
                else:
                    tx.write(
                        "INSERT INTO audit_checkpoints (lane, seq, hash, pruned_at) "
                        "VALUES (?,?,?,?)",
                        (lane, seq, h, now),
                    )
            record_passed_heads(tx, report.cuts, starts, carry)
            report.carried = len(carry.carried)
            detail = checkpoint_detail(
                report.to_dict(),
                by=by,
                before=before,
                starts={**starts, **report.cuts},
                carried=carry.carried,
                anchored=carry.anchored,
                previous=carry.previous,
                key=key,
            )
            tx.audit("audit_pruned", detail, now)
            return report

        return self._run(work, "prune_audit")
