"""Operator-side control methods of the PostgreSQL store (mixed into PostgresStore).

Each method is one transaction through :class:`~effectgate.store.postgres_tx.PgTx`: operator
changes take their class's exclusive lock (see :mod:`effectgate.store.postgres_tx`) and audit in
lane 0; approvals lock the operation's row and audit in its lane.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import psycopg

from effectgate.audit import ChainEntry, lane_for
from effectgate.core.controls import (
    Alert,
    ApprovalOutcome,
    ApprovalRecord,
    ApprovalRequest,
    AuthorityStep,
    ClassControls,
    DispatchGuard,
    ShadowPair,
)
from effectgate.core.intent import Tier
from effectgate.core.states import State, check_transition
from effectgate.errors import DuplicateApprover, StaleState
from effectgate.store.base import Operation, audit_filters, dumps
from effectgate.store.guard import (
    CONTROL_COLUMNS,
    STEP_COLUMNS,
    ControlChanges,
    apply_step,
    check_approval,
    controls_from_row,
    step_from_row,
)
from effectgate.store.postgres_tx import _CHAIN_COLUMNS, LANES, PgTx

__all__ = ["PgControlsMixin", "approval_request_write"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]


def approval_request_write(scope: str, operation_id: str, fingerprint: str, tier: str | None,
                           guard: DispatchGuard | None, now: float,
                           ) -> tuple[str, tuple[Any, ...]]:
    required = 1 if tier == Tier.APPROVE.value else max(
        2, guard.approvals_required if guard else 2)
    ttl = guard.approval_ttl if guard else 86400.0
    return ("INSERT INTO approval_requests VALUES (%s,%s,%s,%s,%s,%s)",
            (scope, operation_id, fingerprint, required, now + ttl,
             dumps(list(guard.proposers) if guard else [])))


class PgControlsMixin(ControlChanges):
    """Operator-side control methods of the PostgreSQL store (each one transaction)."""

    schema: str

    def _write(self, first: Callable[[Conn], Cur], then: Callable[[Conn, Cur], T],
               what: str) -> T:
        raise NotImplementedError

    def _read(self, work: Callable[[Conn], T], what: str) -> T:
        raise NotImplementedError

    def _in_tx(self, work: Callable[[PgTx, Operation | None], T], what: str, *, lane: int = 0,
               exclusive_class: str | None = None,
               row: tuple[str, str] | None = None) -> T:
        """Run ``work`` in one transaction with a :class:`PgTx`; flush it before COMMIT."""
        holder: dict[str, PgTx] = {}

        def first(conn: Conn) -> Cur:
            tx = holder["tx"] = PgTx(conn, self.schema, lane)
            return tx.open(exclusive_class=exclusive_class, row=row, row_for_update=True)

        def then(conn: Conn, cur: Cur) -> T:
            tx = holder["tx"]
            result = work(tx, tx.collect())
            tx.flush()
            return result

        return self._write(first, then, what)

    # --- switches, breakers, shadow, authority ---------------------------------------------

    def controls(self, action: str) -> ClassControls:
        return self._read(lambda conn: controls_from_row(action, conn.execute(
            f"SELECT {CONTROL_COLUMNS} FROM class_controls WHERE action = %s",
            (action,)).fetchone()), "controls")

    def list_controls(self) -> list[ClassControls]:
        rows = self._read(lambda conn: conn.execute(
            f"SELECT action, {CONTROL_COLUMNS} FROM class_controls ORDER BY action").fetchall(),
            "list_controls")
        return [controls_from_row(r[0], r[1:]) for r in rows]

    def _change_controls(self, action: str, *, operator: str, now: float, kind: str,
                         detail: Mapping[str, object], reset_signals: bool = False,
                         **changes: Any) -> ClassControls:
        def work(tx: PgTx, _: Operation | None) -> ClassControls:
            new = replace(tx.controls(action), **changes, updated_by=operator, updated_at=now)
            tx.save_controls(new, at=now)
            if reset_signals:
                # The window that tripped the breaker must not trip it again at once; the
                # evidence stays in the audit log.
                tx.writes.append(("DELETE FROM control_signals WHERE action = %s", (action,)))
            tx.audit(kind, {"action": action, "operator": operator, **detail}, now)
            return new

        return self._in_tx(work, f"{kind} {action}", exclusive_class=action)

    def apply_authority_step(self, action: str, axis: str, new: object, *,
                             evidence: Mapping[str, object], reverse_on: str, operator: str,
                             now: float) -> AuthorityStep:
        return self._in_tx(lambda tx, _: apply_step(
            tx, action, axis, new, evidence=evidence, reverse_on=reverse_on, operator=operator,
            now=now), f"authority step {action}", exclusive_class=action)

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]:
        where, args = ("WHERE action = %s", [action]) if action else ("", [])
        rows = self._read(lambda conn: conn.execute(
            f"SELECT {STEP_COLUMNS} FROM authority_steps {where} ORDER BY id".encode(),
            args).fetchall(), "authority_history")
        return [step_from_row(r) for r in rows]

    # --- approvals --------------------------------------------------------------------------

    def approval_request(self, scope: str, operation_id: str) -> ApprovalRequest | None:
        r = self._read(lambda conn: conn.execute(
            "SELECT fingerprint, required, expires_at, proposers FROM approval_requests "
            "WHERE scope = %s AND operation_id = %s", (scope, operation_id)).fetchone(),
            "approval_request")
        if r is None:
            return None
        return ApprovalRequest(scope, operation_id, r[0], int(r[1]), float(r[2]),
                               tuple(json.loads(r[3])))

    def list_approvals(self, scope: str, operation_id: str) -> list[ApprovalRecord]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT approver, verdict, fingerprint, reason, at FROM approvals WHERE scope = %s "
            "AND operation_id = %s ORDER BY at, approver", (scope, operation_id)).fetchall(),
            "list_approvals")
        return [ApprovalRecord(*r) for r in rows]

    def decide_approval(self, scope: str, operation_id: str, *, approver: str, fingerprint: str,
                        approve: bool, reason: str | None, now: float) -> ApprovalOutcome:
        def work(tx: PgTx, row: Operation | None) -> ApprovalOutcome:
            req = tx.conn.execute("SELECT fingerprint, required, expires_at, proposers FROM "
                                  "approval_requests WHERE scope = %s AND operation_id = %s",
                                  (scope, operation_id)).fetchone()
            row, required, expires_at = check_approval(
                row, req, scope=scope, operation_id=operation_id, approver=approver,
                fingerprint=fingerprint)
            answered = tx.conn.execute(
                "SELECT verdict FROM approvals WHERE scope = %s AND operation_id = %s",
                (scope, operation_id)).fetchall()
            if tx.conn.execute("SELECT 1 FROM approvals WHERE scope = %s AND operation_id = %s "
                               "AND approver = %s", (scope, operation_id, approver)).fetchone():
                raise DuplicateApprover(f"{approver!r} already answered for {operation_id!r}; "
                                        "approvers must be distinct")
            if now >= expires_at:
                moved = _move(tx, row, State.DENIED, now, "approval expired",
                              {"by": approver, "reason": "approval expired"})
                return ApprovalOutcome(moved, 0, required, expired=True)
            verdict = "approve" if approve else "refuse"
            tx.writes.append(("INSERT INTO approvals VALUES (%s,%s,%s,%s,%s,%s,%s)",
                              (scope, operation_id, approver, verdict, fingerprint, reason,
                               now)))
            tx.audit("approval", {"approver": approver, "verdict": verdict,
                                  "fingerprint": fingerprint, "reason": reason}, now, scope,
                     operation_id)
            count = sum(1 for (v,) in answered if v == "approve") + int(approve)
            if not approve:
                row = _move(tx, row, State.DENIED, now, f"refused by {approver}",
                            {"by": approver, "reason": reason})
            elif count >= required:
                row = _move(tx, row, State.VALIDATED, now, None,
                            {"approvals": count, "required": required})
            return ApprovalOutcome(row, count, required)

        return self._in_tx(work, f"approval {scope}:{operation_id}",
                           lane=lane_for(scope, operation_id, LANES), row=(scope, operation_id))

    def expire_approvals(self, *, now: float) -> list[Operation]:
        keys = self._read(lambda conn: conn.execute(
            "SELECT r.scope, r.operation_id FROM approval_requests r JOIN operations o "
            "ON o.scope = r.scope AND o.operation_id = r.operation_id "
            "WHERE o.state = 'awaiting_approval' AND r.expires_at <= %s", (now,)).fetchall(),
            "expire_approvals")
        out: list[Operation] = []
        for scope, op in keys:
            def work(tx: PgTx, row: Operation | None) -> Operation | None:
                if row is None or row.state is not State.AWAITING_APPROVAL:
                    return None
                return _move(tx, row, State.DENIED, now, "approval expired",
                             {"by": "system:expiry", "reason": "approval expired"})

            moved = self._in_tx(work, f"expire {scope}:{op}", lane=lane_for(scope, op, LANES),
                                row=(scope, op))
            if moved is not None:
                out.append(moved)
        return out

    # --- shadow, alerts, audit -----------------------------------------------------------

    def record_incumbent(self, correlation_id: str, action: str, fingerprint: str | None,
                         effect: Mapping[str, object] | None, *, source: str,
                         now: float) -> None:
        def work(tx: PgTx, _: Operation | None) -> None:
            tx.writes.append((
                "INSERT INTO incumbent_outcomes VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT "
                "(correlation_id) DO UPDATE SET action = excluded.action, "
                "fingerprint = excluded.fingerprint, effect = excluded.effect, "
                "source = excluded.source, at = excluded.at",
                (correlation_id, action, fingerprint,
                 dumps(effect) if effect is not None else None, source, now)))
            tx.audit("incumbent_outcome", {"correlation_id": correlation_id, "action": action,
                                           "fingerprint": fingerprint, "source": source}, now)

        self._in_tx(work, "record_incumbent")

    def shadow_pairs(self, action: str | None = None) -> list[ShadowPair]:
        query = ("SELECT s.correlation_id, s.action, s.scope, s.operation_id, s.fingerprint, "
                 "s.request, i.fingerprint, i.effect, i.correlation_id IS NOT NULL "
                 "FROM shadow_records s LEFT JOIN incumbent_outcomes i "
                 "ON i.correlation_id = s.correlation_id {w} UNION ALL "
                 "SELECT i.correlation_id, i.action, NULL, NULL, NULL, NULL, i.fingerprint, "
                 "i.effect, true FROM incumbent_outcomes i WHERE NOT EXISTS (SELECT 1 FROM "
                 "shadow_records s WHERE s.correlation_id = i.correlation_id) {a} ORDER BY 1")
        args: list[str] = [action, action] if action else []
        query = query.format(w="WHERE s.action = %s", a="AND i.action = %s") if action \
            else query.format(w="", a="")
        rows = self._read(lambda conn: conn.execute(query.encode(), args).fetchall(),
                          "shadow_pairs")
        return [ShadowPair(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else None,
                           r[6], json.loads(r[7]) if r[7] else None, bool(r[8])) for r in rows]

    def record_alert(self, alert: Alert) -> bool:
        return self._in_tx(lambda tx, _: tx.record_alert(
            alert.kind, alert.subject, alert.action, alert.message, alert.detail, alert.at),
            "record_alert")

    def list_alerts(self, limit: int = 1000) -> list[Alert]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT kind, subject, action, message, detail, at FROM alerts ORDER BY id "
            "LIMIT %s", (limit,)).fetchall(), "list_alerts")
        return [Alert(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def audit_entries(self, *, after_seq: int = 0, until_seq: int | None = None,
                      lane: int | None = None, scope: str | None = None,
                      operation_id: str | None = None, limit: int = 1000) -> list[ChainEntry]:
        where, args = audit_filters("%s", after_seq=after_seq, until_seq=until_seq, lane=lane,
                                    scope=scope, operation_id=operation_id)
        query = f"SELECT {_CHAIN_COLUMNS} FROM audit_log {where} ORDER BY seq LIMIT %s"
        rows = self._read(lambda conn: conn.execute(query.encode(), (*args, limit)).fetchall(),
                          "audit_entries")
        return [ChainEntry(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7] or "", r[8] or "")
                for r in rows]

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT lane, seq, hash FROM audit_heads WHERE seq > 0").fetchall(), "audit_heads")
        return {int(r[0]): (int(r[1]), str(r[2])) for r in rows}

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """None beyond the lane heads: every PostgreSQL append advances its lane's head row,
        and appends chain from that row, so a cut-off tail stays a broken link."""
        return []


def _move(tx: PgTx, row: Operation, target: State, now: float, detail: str | None,
          audit: Mapping[str, object]) -> Operation:
    """Compare-and-set ``row.state -> target`` on a row this transaction holds FOR UPDATE."""
    check_transition(row.state, target)
    cur = tx.conn.execute("UPDATE operations SET state = %s, updated_at = %s, "
                          "version = version + 1, detail = coalesce(%s, detail) WHERE scope = %s "
                          "AND operation_id = %s AND state = %s",
                          (target.value, now, detail, row.scope, row.operation_id,
                           row.state.value))
    if cur.rowcount != 1:
        raise StaleState(f"operation {row.operation_id!r} moved concurrently")
    tx.audit("transition", {"from": row.state.value, "state": target.value, **audit}, now,
             row.scope, row.operation_id)
    return replace(row, state=target, updated_at=now, version=row.version + 1,
                   detail=detail if detail is not None else row.detail)
