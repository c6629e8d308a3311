"""The retention role: legal holds, and pruning the audit chain from its start (issue 20),
written once over :class:`StoreHooks`.

A prune removes, per audit lane (SQLite has one, PostgreSQL sixteen), the longest *prefix* of
the lane whose every entry is about an operation that may go, together with those operations'
rows and approval records; it records each lane's cut ``(seq, hash)`` as the lane's checkpoint
(``audit_checkpoints``), from which the chain then verifies, and a chained ``audit_pruned``
entry naming every cut, in the same transaction. An operation may go only when
:func:`prunable_operation` says so: terminal, settled before the cut-off and past its class's
key retention and reconciler horizon, under no active legal hold, not bound to an unsealed run,
and with no live continuation (:func:`has_live_continuation`). An entry not about an operation
(controls, principals, holds, runs, prunes) may go only when it is no longer in force
(:mod:`effectgate.store._retention_rules`). The prefix stops at the first entry that may not
go, at an operation whose entries extend past the cut, and before the lane's head entry, which
is never removed; it covers only entries at or below an anchored head.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from effectgate._core.retention import LegalHold, PruneReport
from effectgate._core.states import TERMINAL, State
from effectgate.errors import ConfigError, ControlError, OperationNotFound
from effectgate.store import _sql as sql
from effectgate.store._hooks import StoreHooks
from effectgate.store._retention_rules import Superseding, entry_in_force
from effectgate.store._tx import SharedTx
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX

__all__ = [
    "LegalHold",
    "PruneReport",
    "RetentionRoles",
    "has_live_continuation",
    "prunable_operation",
]

#: At most this many entries are examined per lane and prune call (run it again for more).
PRUNE_BATCH = 5000


def has_live_continuation(tx: SharedTx, scope: str, operation_id: str) -> bool:
    """Whether the operation's continuation chain (docs/continuations.md) still has a member
    that is not terminal: the original of a live retry or compensation, or a member of such a
    chain, stays until the whole chain has settled."""
    live = ", ".join(f"'{s.value}'" for s in State if s not in TERMINAL)
    return bool(
        tx.rows(
            "SELECT 1 FROM continuations c JOIN operations o "
            "ON o.scope = c.scope AND o.operation_id = c.operation_id "
            "WHERE c.scope = ? AND c.original_id = coalesce((SELECT original_id FROM "
            "continuations WHERE scope = ? AND operation_id = ?), ?) "
            f"AND o.state IN ({live}) LIMIT 1",
            (scope, scope, operation_id, operation_id),
        )
    )


def _bound_to_unsealed_run(tx: SharedTx, scope: str, operation_id: str) -> bool:
    return bool(
        tx.rows(
            "SELECT 1 FROM run_effects e JOIN runs r ON r.scope = e.scope AND r.run_id = e.run_id "
            "WHERE e.scope = ? AND e.operation_id = ? AND r.sealed_at IS NULL",
            (scope, operation_id),
        )
    )


def _held(tx: SharedTx, scope: str, operation_id: str) -> bool:
    return bool(
        tx.rows(
            "SELECT 1 FROM legal_holds WHERE released_at IS NULL AND scope = ? "
            "AND (operation_id IS NULL OR operation_id = ?)",
            (scope, operation_id),
        )
    )


def prunable_operation(
    tx: SharedTx,
    scope: str,
    operation_id: str,
    *,
    before: float,
    now: float,
    min_age: Mapping[str, float],
) -> str | None:
    """None if the operation may be pruned, else why not (the prefix stops there)."""
    rows = tx.rows(
        "SELECT state, action, updated_at FROM operations WHERE scope = ? AND operation_id = ?",
        (scope, operation_id),
    )
    if not rows:
        return "an entry about an operation with no row"
    state, action, updated_at = State(str(rows[0][0])), str(rows[0][1]), float(rows[0][2])
    if state not in TERMINAL:
        return f"{scope}:{operation_id} is {state.value} (not terminal)"
    if updated_at >= before:
        return f"{scope}:{operation_id} settled after the cut-off"
    age = min_age.get(action)
    if age is None:
        return f"{scope}:{operation_id}: class {action!r} is not configured"
    if now - updated_at < age:
        return f"{scope}:{operation_id} is inside its class's key retention/horizon"
    if _held(tx, scope, operation_id):
        return f"{scope}:{operation_id} is under a legal hold"
    if _bound_to_unsealed_run(tx, scope, operation_id):
        return f"{scope}:{operation_id} is bound to an unsealed run"
    if has_live_continuation(tx, scope, operation_id):
        return f"{scope}:{operation_id} has a live continuation"
    return None


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


#: The last entry of one operation (through its index and its row: sql.op_entries).
_LAST_OF_OPERATION = f"SELECT max(seq) FROM ({sql.op_entries('seq')}) t"

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
    ) -> PruneReport:
        """Remove each lane's prunable prefix (module docstring) up to its anchored head.

        ``anchored``: the heads of a checkpoint just written to the anchors; a lane with no
        anchored head is not pruned, and one whose anchored entry is not in the log refuses
        the whole prune (:class:`ConfigError`).
        """
        _actor(by)

        def work(tx: SharedTx, _: object) -> PruneReport:
            report = PruneReport()
            starts = {
                int(lane): int(seq)
                for lane, seq in tx.rows("SELECT lane, seq FROM audit_checkpoints", ())
            }
            for lane, (head_seq, head_hash) in sorted(anchored.items()):
                found = tx.rows(
                    "SELECT hash FROM audit_log WHERE seq = ? AND lane = ?", (head_seq, lane)
                )
                if not found or str(found[0][0]) != head_hash:
                    raise ConfigError(
                        f"lane {lane}: the anchored head seq {head_seq} is not in the log; "
                        "nothing was pruned (run `effectgate audit anchor --verify`)"
                    )
                self._prune_lane(
                    tx, lane, starts.get(lane, 0), head_seq, before, now, min_age, report
                )
            if report.cuts:
                tx.audit("audit_pruned", {"by": by, "before": before, **report.to_dict()}, now)
            return report

        return self._run(work, "prune_audit")

    def _prune_lane(
        self,
        tx: SharedTx,
        lane: int,
        after: int,
        anchored_seq: int,
        before: float,
        now: float,
        min_age: Mapping[str, float],
        report: PruneReport,
    ) -> None:
        entries = tx.rows(
            "SELECT seq, hash, scope, operation_id, at, kind, detail FROM audit_log "
            "WHERE lane = ? AND seq > ? AND seq < ? ORDER BY seq LIMIT ?",
            (lane, after, anchored_seq, PRUNE_BATCH),  # the anchored head itself stays
        )
        verdicts: dict[tuple[str, str], str | None] = {}
        last_of: dict[tuple[str, str], int] = {}
        cut: tuple[int, str] | None = None
        ops_in_prefix: set[tuple[str, str]] = set()
        reach = 0  # the highest seq any operation in the prefix has an entry at
        retention = max(min_age.values(), default=0.0)
        later = Superseding(tx)  # one read of the superseding kinds for this lane's batch
        for seq, entry_hash, scope, operation_id, at, kind, detail in entries:
            if float(at) >= before:
                report.stopped[lane] = f"seq {seq}: after the cut-off"
                break
            if operation_id is None:
                # Controls, principals, holds, runs, prunes: cut only what is no longer in
                # force (store/_retention_rules.py, docs/evidence.md).
                why_kept = entry_in_force(
                    tx,
                    str(kind),
                    str(detail),
                    None if scope is None else str(scope),
                    float(at),
                    before=before,
                    now=now,
                    retention=retention,
                    later=later,
                )
                if why_kept is not None:
                    report.stopped[lane] = f"seq {seq}: {why_kept}"
                    break
                if reach <= int(seq):
                    cut = (int(seq), str(entry_hash))
                continue
            op = (str(scope), str(operation_id))
            if op not in verdicts:
                verdicts[op] = prunable_operation(
                    tx, op[0], op[1], before=before, now=now, min_age=min_age
                )
                last = tx.rows(_LAST_OF_OPERATION, sql.op_entries_args(*op))[0][0]
                # None only if the row naming this entry was deleted by hand: it reaches here.
                last_of[op] = int(seq) if last is None else max(int(last), int(seq))
            why = verdicts[op]
            if why is not None:
                report.stopped[lane] = f"seq {seq}: {why}"
                break
            ops_in_prefix.add(op)
            reach = max(reach, last_of[op])
            if reach <= int(seq):  # no operation of the prefix continues past here
                cut = (int(seq), str(entry_hash))
        if cut is None:
            return
        cut_seq = cut[0]
        gone = [op for op in ops_in_prefix if last_of[op] <= cut_seq]
        tx.write(
            "DELETE FROM audit_log WHERE lane = ? AND seq > ? AND seq <= ?", (lane, after, cut_seq)
        )
        for scope, operation_id in gone:
            for table in ("approvals", "approval_requests", "operations"):
                tx.write(
                    f"DELETE FROM {table} WHERE scope = ? AND operation_id = ?",
                    (scope, operation_id),
                )
        if after:
            tx.write(
                "UPDATE audit_checkpoints SET seq = ?, hash = ?, pruned_at = ? WHERE lane = ?",
                (cut_seq, cut[1], now, lane),
            )
        else:
            tx.write(
                "INSERT INTO audit_checkpoints (lane, seq, hash, pruned_at) VALUES (?,?,?,?)",
                (lane, cut_seq, cut[1], now),
            )
        report.cuts[lane] = cut
        report.entries += sum(1 for e in entries if int(e[0]) <= cut_seq)
        report.operations += len(gone)
