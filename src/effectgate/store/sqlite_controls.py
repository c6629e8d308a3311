"""SQLite storage for the operational controls, mixed into :class:`~effectgate.store.SQLiteStore`.

Every method owns one ``BEGIN IMMEDIATE`` transaction, which serialises writers across
processes: the checks in :mod:`effectgate.store.guard` read and charge the envelope windows in
the same transaction as the row they guard, so no second writer can interleave. The audit chain
is a single lane for the same reason: writers are serialised anyway, so linking an entry costs
one read of the log's last row and no extra contention.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from effectgate.audit import GENESIS, ChainEntry, chain_hash, content_digest, rechain
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
from effectgate.core.states import State
from effectgate.errors import DuplicateApprover
from effectgate.store.base import Operation, audit_filters, dumps
from effectgate.store.guard import (
    CONTROL_COLUMNS,
    STEP_COLUMNS,
    ControlChanges,
    SignalStats,
    apply_step,
    check_approval,
    controls_from_row,
    step_from_row,
)

__all__ = [
    "MIGRATION_ANCHORS",
    "MIGRATION_CONTROLS",
    "MIGRATION_HEAD_TRIGGER",
    "SQLiteControlsMixin",
    "advance_head",
    "chained_audit",
    "register_chain_function",
    "request_approval",
]

MIGRATION_CONTROLS = """
ALTER TABLE audit_log ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN prev_hash TEXT;
ALTER TABLE audit_log ADD COLUMN hash TEXT;
CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
CREATE TABLE audit_heads (lane INTEGER PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE TABLE class_controls (
    action TEXT PRIMARY KEY, killed INTEGER NOT NULL DEFAULT 0, kill_reason TEXT,
    breaker_open INTEGER NOT NULL DEFAULT 0, breaker_reason TEXT,
    shadow INTEGER NOT NULL DEFAULT 0, envelope TEXT NOT NULL DEFAULT '{}',
    envelope_version INTEGER NOT NULL DEFAULT 0, updated_by TEXT, updated_at REAL
);
CREATE TABLE control_signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT NOT NULL, at REAL NOT NULL,
    op_key TEXT NOT NULL, fingerprint TEXT NOT NULL, value_micros INTEGER,
    rejected INTEGER NOT NULL, new_target INTEGER NOT NULL
);
CREATE INDEX control_signals_window ON control_signals (action, at);
CREATE INDEX control_signals_fingerprint ON control_signals (action, fingerprint, at);
CREATE TABLE known_targets (
    action TEXT NOT NULL, target TEXT NOT NULL, first_seen REAL NOT NULL,
    PRIMARY KEY (action, target)
) WITHOUT ROWID;
CREATE TABLE dispatch_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT NOT NULL, at REAL NOT NULL,
    op_key TEXT NOT NULL, value_micros INTEGER
);
CREATE INDEX dispatch_log_window ON dispatch_log (action, at);
CREATE TABLE authority_steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT NOT NULL, axis TEXT NOT NULL,
    old TEXT NOT NULL, new TEXT NOT NULL, evidence TEXT NOT NULL, reverse_on TEXT NOT NULL,
    operator TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, reverses INTEGER,
    active INTEGER NOT NULL
);
CREATE INDEX authority_steps_by_action ON authority_steps (action, id);
CREATE TABLE approval_requests (
    scope TEXT NOT NULL, operation_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
    required INTEGER NOT NULL, expires_at REAL NOT NULL, proposers TEXT NOT NULL,
    PRIMARY KEY (scope, operation_id)
) WITHOUT ROWID;
CREATE TABLE approvals (
    scope TEXT NOT NULL, operation_id TEXT NOT NULL, approver TEXT NOT NULL,
    verdict TEXT NOT NULL, fingerprint TEXT NOT NULL, reason TEXT, at REAL NOT NULL,
    PRIMARY KEY (scope, operation_id, approver)
) WITHOUT ROWID;
CREATE TABLE shadow_records (
    scope TEXT NOT NULL, operation_id TEXT NOT NULL, action TEXT NOT NULL,
    correlation_id TEXT NOT NULL, fingerprint TEXT NOT NULL, request TEXT NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (scope, operation_id)
) WITHOUT ROWID;
CREATE INDEX shadow_by_correlation ON shadow_records (correlation_id);
CREATE TABLE incumbent_outcomes (
    correlation_id TEXT PRIMARY KEY, action TEXT NOT NULL, fingerprint TEXT, effect TEXT,
    source TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, subject TEXT NOT NULL,
    action TEXT, message TEXT NOT NULL, detail TEXT NOT NULL, at REAL NOT NULL,
    UNIQUE (kind, subject)
)
"""

_CHAIN_COLUMNS = "seq, lane, at, scope, operation_id, kind, detail, prev_hash, hash"


#: The SQL function the chained insert calls: ``sha256(prev_hash || digest)`` in Python
#: (:func:`effectgate.audit.chain_hash`), registered on every store connection.
CHAIN_FUNCTION = "effectgate_chain_hash"

# One statement per entry: it reads the chain's last entry (the tail of the rowid B-tree, the
# page this insert writes anyway), links the entry to it (the digest is computed beforehand, the
# link by CHAIN_FUNCTION), inserts it and hands back its seq and hash. BEGIN IMMEDIATE holds
# the write lock, so no other writer can append between the read and the insert.
_CHAINED_INSERT = (
    "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, prev_hash, hash) "
    "SELECT coalesce(t.seq, 0) + 1, ?, ?, ?, ?, ?, 0, coalesce(t.hash, ?), "
    f"{CHAIN_FUNCTION}(coalesce(t.hash, ?), ?) FROM (SELECT 0) l LEFT JOIN "
    "(SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) t ON 1 "
    "RETURNING seq, hash")
_ADVANCE_HEAD = (
    "INSERT INTO audit_heads (lane, seq, hash) VALUES (0, ?, ?) ON CONFLICT (lane) DO UPDATE "
    "SET seq = excluded.seq, hash = excluded.hash WHERE excluded.seq > audit_heads.seq")

# Kept for migration 3, which created it; migration 4 drops it (see MIGRATION_ANCHORS).
MIGRATION_HEAD_TRIGGER = """
CREATE TRIGGER audit_head_advance AFTER INSERT ON audit_log BEGIN
    INSERT INTO audit_heads (lane, seq, hash) VALUES (NEW.lane, NEW.seq, NEW.hash)
    ON CONFLICT (lane) DO UPDATE SET seq = excluded.seq, hash = excluded.hash
    WHERE excluded.seq > audit_heads.seq;
END
"""

# 4: the recorded head that catches a cut-off tail moves out of the hot path. A journal or
# receipt transaction records its entry's (seq, hash) in the operations row it writes anyway,
# instead of rewriting the audit_heads row: one page less per commit (each page costs a WAL
# frame under synchronous=FULL). Every other entry still advances audit_heads. The recorded
# head is the later of the two (SQLiteStore.audit_heads); cutting entries off the tail removes
# the entry one of them names, which verification reports.
MIGRATION_ANCHORS = """
ALTER TABLE operations ADD COLUMN audit_seq INTEGER;
ALTER TABLE operations ADD COLUMN audit_hash TEXT;
DROP TRIGGER IF EXISTS audit_head_advance
"""


def register_chain_function(conn: sqlite3.Connection) -> None:
    conn.create_function(CHAIN_FUNCTION, 2, chain_hash, deterministic=True)


def chained_audit(conn: sqlite3.Connection, now: float, scope: str | None,
                  operation_id: str | None, kind: str, detail: Mapping[str, object], *,
                  advance_head: bool = True) -> tuple[int, str]:
    """Append one audit entry linked to the chain's last one, in the caller's transaction.

    Returns the entry's ``(seq, hash)``. ``advance_head=False`` leaves audit_heads to the
    caller (a batch advances it once).
    """
    at, text = float(now), dumps(detail)
    digest = content_digest(0, at, scope, operation_id, kind, text)
    seq, entry_hash = conn.execute(_CHAINED_INSERT, (at, scope, operation_id, kind, text,
                                                     GENESIS, GENESIS, digest)).fetchone()
    if advance_head:
        conn.execute(_ADVANCE_HEAD, (seq, entry_hash))
    return int(seq), str(entry_hash)


def advance_head(conn: sqlite3.Connection, seq: int, entry_hash: str) -> None:
    """Record ``(seq, hash)`` as the chain's head, unless a later one is recorded already."""
    conn.execute(_ADVANCE_HEAD, (seq, entry_hash))


def backfill_chain(conn: sqlite3.Connection) -> None:
    """Chain entries written before the audit log was hash-chained (runs once, in migration)."""
    rows = conn.execute("SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                        "ORDER BY seq").fetchall()
    last: tuple[int, str] | None = None
    for seq, prev, entry_hash in rechain(rows):
        conn.execute("UPDATE audit_log SET prev_hash = ?, hash = ? WHERE seq = ?",
                     (prev, entry_hash, seq))
        last = (seq, entry_hash)
    if last is not None:
        conn.execute("INSERT INTO audit_heads VALUES (0, ?, ?)", last)




class SQLiteControlTx:
    """:class:`~effectgate.store.guard.ControlTx` over an open SQLite transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # Read once per transaction: BEGIN IMMEDIATE holds the write lock, nobody else can
        # change them before this transaction ends.
        self._controls: dict[str, ClassControls] = {}

    def seed(self, ctl: ClassControls) -> None:
        """Controls this transaction already read (with the row, in one statement)."""
        self._controls[ctl.action] = ctl

    def controls(self, action: str) -> ClassControls:
        ctl = self._controls.get(action)
        if ctl is None:
            row = self.conn.execute(f"SELECT {CONTROL_COLUMNS} FROM class_controls WHERE "
                                    "action = ?", (action,)).fetchone()
            ctl = self._controls[action] = controls_from_row(action, row)
        return ctl

    def save_controls(self, ctl: ClassControls, *, at: float) -> None:
        self._controls[ctl.action] = ctl
        self.conn.execute(
            f"INSERT INTO class_controls (action, {CONTROL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT (action) DO UPDATE SET killed = excluded.killed, "
            "kill_reason = excluded.kill_reason, breaker_open = excluded.breaker_open, "
            "breaker_reason = excluded.breaker_reason, shadow = excluded.shadow, "
            "envelope = excluded.envelope, envelope_version = excluded.envelope_version, "
            "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
            (ctl.action, int(ctl.killed), ctl.kill_reason, int(ctl.breaker_open),
             ctl.breaker_reason, int(ctl.shadow), dumps(ctl.envelope.to_json()),
             ctl.envelope.version, ctl.updated_by, at))

    def seen_target(self, action: str, target: str, at: float) -> bool:
        cur = self.conn.execute("INSERT INTO known_targets VALUES (?,?,?) ON CONFLICT DO NOTHING",
                                (action, target, at))
        return cur.rowcount == 0

    def record_signal(self, action: str, at: float, op_key: str, fingerprint: str,
                      value_micros: int | None, rejected: bool, new_target: bool) -> None:
        self.conn.execute("INSERT INTO control_signals (action, at, op_key, fingerprint, "
                          "value_micros, rejected, new_target) VALUES (?,?,?,?,?,?,?)",
                          (action, at, op_key, fingerprint, value_micros, int(rejected),
                           int(new_target)))

    def signal_stats(self, action: str, since: float, fingerprint: str) -> SignalStats:
        r = self.conn.execute(
            "SELECT count(*), coalesce(sum(rejected), 0), coalesce(sum(value_micros), 0), "
            "coalesce(sum(new_target), 0) FROM control_signals WHERE action = ? AND at >= ?",
            (action, since)).fetchone()
        same = self.conn.execute(
            "SELECT count(DISTINCT op_key) FROM control_signals WHERE action = ? AND "
            "fingerprint = ? AND at >= ?", (action, fingerprint, since)).fetchone()[0]
        return SignalStats(int(r[0]), int(r[1]), int(r[2]), int(same), int(r[3]))

    def dispatch_usage(self, action: str, since: float) -> tuple[int, int]:
        r = self.conn.execute("SELECT count(*), coalesce(sum(value_micros), 0) FROM dispatch_log "
                              "WHERE action = ? AND at >= ?", (action, since)).fetchone()
        return int(r[0]), int(r[1])

    def record_dispatch(self, action: str, at: float, op_key: str,
                        value_micros: int | None) -> None:
        self.conn.execute("INSERT INTO dispatch_log (action, at, op_key, value_micros) "
                          "VALUES (?,?,?,?)", (action, at, op_key, value_micros))

    def prune(self, action: str, before: float) -> None:
        self.conn.execute("DELETE FROM control_signals WHERE action = ? AND at < ?",
                          (action, before))

    def active_steps(self, action: str) -> list[AuthorityStep]:
        rows = self.conn.execute(f"SELECT {STEP_COLUMNS} FROM authority_steps WHERE action = ? "
                                 "AND active = 1 ORDER BY id", (action,)).fetchall()
        return [step_from_row(r) for r in rows]

    def insert_step(self, step: AuthorityStep) -> int:
        cur = self.conn.execute(
            "INSERT INTO authority_steps (action, axis, old, new, evidence, reverse_on, "
            "operator, at, kind, reverses, active) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (step.action, step.axis, dumps(step.old), dumps(step.new), dumps(step.evidence),
             step.reverse_on, step.operator, step.at, step.kind, step.reverses,
             int(step.active)))
        return int(cur.lastrowid or 0)

    def deactivate_step(self, step_id: int) -> None:
        self.conn.execute("UPDATE authority_steps SET active = 0 WHERE id = ?", (step_id,))

    def record_shadow(self, scope: str, operation_id: str, action: str, correlation_id: str,
                      request: Mapping[str, object], fingerprint: str, at: float) -> None:
        self.conn.execute("INSERT INTO shadow_records VALUES (?,?,?,?,?,?,?)",
                          (scope, operation_id, action, correlation_id, fingerprint,
                           dumps(request), at))

    def audit(self, kind: str, detail: Mapping[str, object], at: float,
              scope: str | None = None, operation_id: str | None = None) -> None:
        chained_audit(self.conn, at, scope, operation_id, kind, detail)

    def record_alert(self, kind: str, subject: str, action: str | None, message: str,
                     detail: Mapping[str, object], at: float) -> bool:
        cur = self.conn.execute("INSERT INTO alerts (kind, subject, action, message, detail, at) "
                                "VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                                (kind, subject, action, message, dumps(detail), at))
        return cur.rowcount == 1


def request_approval(conn: sqlite3.Connection, scope: str, operation_id: str, fingerprint: str,
                     tier: str, guard: DispatchGuard | None, now: float) -> None:
    """Open the approval request of a row journalled as ``awaiting_approval``."""
    required = 1 if tier == Tier.APPROVE.value else max(
        2, guard.approvals_required if guard else 2)
    ttl = guard.approval_ttl if guard else 86400.0
    conn.execute("INSERT INTO approval_requests VALUES (?,?,?,?,?,?)",
                 (scope, operation_id, fingerprint, required, now + ttl,
                  dumps(list(guard.proposers) if guard else [])))


class SQLiteControlsMixin(ControlChanges):
    """Operator-side control methods of the SQLite store (each one transaction)."""

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _move(self, conn: sqlite3.Connection, row: Operation, target: State, now: float,
              detail: str | None, audit: Mapping[str, object]) -> Operation:
        raise NotImplementedError

    # --- switches, breakers, shadow -----------------------------------------------------

    def controls(self, action: str) -> ClassControls:
        with self._read() as conn:
            return SQLiteControlTx(conn).controls(action)

    def list_controls(self) -> list[ClassControls]:
        with self._read() as conn:
            rows = conn.execute(f"SELECT action, {CONTROL_COLUMNS} FROM class_controls "
                                "ORDER BY action").fetchall()
        return [controls_from_row(r[0], r[1:]) for r in rows]

    def _change_controls(self, action: str, *, operator: str, now: float, kind: str,
                         detail: Mapping[str, object], reset_signals: bool = False,
                         **changes: Any) -> ClassControls:
        with self._tx() as conn:
            tx = SQLiteControlTx(conn)
            new = replace(tx.controls(action), **changes, updated_by=operator, updated_at=now)
            tx.save_controls(new, at=now)
            if reset_signals:
                # The window that tripped the breaker must not trip it again on the next
                # proposal; the evidence stays in the audit log.
                conn.execute("DELETE FROM control_signals WHERE action = ?", (action,))
            tx.audit(kind, {"action": action, "operator": operator, **detail}, now)
        return new

    def apply_authority_step(self, action: str, axis: str, new: object, *,
                             evidence: Mapping[str, object], reverse_on: str, operator: str,
                             now: float) -> AuthorityStep:
        with self._tx() as conn:
            return apply_step(SQLiteControlTx(conn), action, axis, new, evidence=evidence,
                              reverse_on=reverse_on, operator=operator, now=now)

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]:
        where, args = ("WHERE action = ?", (action,)) if action else ("", ())
        with self._read() as conn:
            rows = conn.execute(f"SELECT {STEP_COLUMNS} FROM authority_steps {where} "
                                "ORDER BY id", args).fetchall()
        return [step_from_row(r) for r in rows]

    # --- approvals ------------------------------------------------------------------------

    def approval_request(self, scope: str, operation_id: str) -> ApprovalRequest | None:
        with self._read() as conn:
            r = conn.execute("SELECT fingerprint, required, expires_at, proposers FROM "
                             "approval_requests WHERE scope = ? AND operation_id = ?",
                             (scope, operation_id)).fetchone()
        if r is None:
            return None
        return ApprovalRequest(scope, operation_id, r[0], int(r[1]), float(r[2]),
                               tuple(json.loads(r[3])))

    def list_approvals(self, scope: str, operation_id: str) -> list[ApprovalRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT approver, verdict, fingerprint, reason, at FROM approvals "
                                "WHERE scope = ? AND operation_id = ? ORDER BY at, approver",
                                (scope, operation_id)).fetchall()
        return [ApprovalRecord(*r) for r in rows]

    def decide_approval(self, scope: str, operation_id: str, *, approver: str, fingerprint: str,
                        approve: bool, reason: str | None, now: float) -> ApprovalOutcome:
        """Record one approver's answer to exactly this payload; release or deny the row."""
        from effectgate.store.sqlite import _select

        with self._tx() as conn:
            row = _select(conn, scope, operation_id)
            req = conn.execute("SELECT fingerprint, required, expires_at, proposers FROM "
                               "approval_requests WHERE scope = ? AND operation_id = ?",
                               (scope, operation_id)).fetchone()
            row, required, expires_at = check_approval(
                row, req, scope=scope, operation_id=operation_id, approver=approver,
                fingerprint=fingerprint)
            if conn.execute("SELECT 1 FROM approvals WHERE scope = ? AND operation_id = ? AND "
                            "approver = ?", (scope, operation_id, approver)).fetchone():
                raise DuplicateApprover(f"{approver!r} already answered for {operation_id!r}; "
                                        "approvers must be distinct")
            if now >= expires_at:
                moved = self._move(conn, row, State.DENIED, now, "approval expired",
                                   {"by": approver, "reason": "approval expired"})
                return ApprovalOutcome(moved, 0, required, expired=True)
            conn.execute("INSERT INTO approvals VALUES (?,?,?,?,?,?,?)",
                         (scope, operation_id, approver, "approve" if approve else "refuse",
                          fingerprint, reason, now))
            chained_audit(conn, now, scope, operation_id, "approval",
                          {"approver": approver, "verdict": "approve" if approve else "refuse",
                           "fingerprint": fingerprint, "reason": reason})
            count = int(conn.execute("SELECT count(*) FROM approvals WHERE scope = ? AND "
                                     "operation_id = ? AND verdict = 'approve'",
                                     (scope, operation_id)).fetchone()[0])
            if not approve:
                row = self._move(conn, row, State.DENIED, now, f"refused by {approver}",
                                 {"by": approver, "reason": reason})
            elif count >= required:
                row = self._move(conn, row, State.VALIDATED, now, None,
                                 {"approvals": count, "required": required})
            return ApprovalOutcome(row, count, required)

    def expire_approvals(self, *, now: float) -> list[Operation]:
        """Deny every ``awaiting_approval`` row whose approval window has closed."""
        from effectgate.store.sqlite import _select

        out: list[Operation] = []
        with self._tx() as conn:
            keys = conn.execute(
                "SELECT r.scope, r.operation_id FROM approval_requests r JOIN operations o "
                "ON o.scope = r.scope AND o.operation_id = r.operation_id "
                "WHERE o.state = 'awaiting_approval' AND r.expires_at <= ?", (now,)).fetchall()
            for scope, op in keys:
                row = _select(conn, scope, op)
                if row is not None:
                    out.append(self._move(conn, row, State.DENIED, now, "approval expired",
                                          {"by": "system:expiry", "reason": "approval expired"}))
        return out

    # --- shadow -------------------------------------------------------------------------

    def record_incumbent(self, correlation_id: str, action: str, fingerprint: str | None,
                         effect: Mapping[str, object] | None, *, source: str,
                         now: float) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO incumbent_outcomes VALUES (?,?,?,?,?,?) ON CONFLICT "
                         "(correlation_id) DO UPDATE SET action = excluded.action, "
                         "fingerprint = excluded.fingerprint, effect = excluded.effect, "
                         "source = excluded.source, at = excluded.at",
                         (correlation_id, action, fingerprint,
                          dumps(effect) if effect is not None else None, source, now))
            chained_audit(conn, now, None, None, "incumbent_outcome",
                          {"correlation_id": correlation_id, "action": action,
                           "fingerprint": fingerprint, "source": source})

    def shadow_pairs(self, action: str | None = None) -> list[ShadowPair]:
        sql = ("SELECT s.correlation_id, s.action, s.scope, s.operation_id, s.fingerprint, "
               "s.request, i.fingerprint, i.effect, i.correlation_id IS NOT NULL "
               "FROM shadow_records s LEFT JOIN incumbent_outcomes i "
               "ON i.correlation_id = s.correlation_id {w} UNION ALL "
               "SELECT i.correlation_id, i.action, NULL, NULL, NULL, NULL, i.fingerprint, "
               "i.effect, 1 FROM incumbent_outcomes i WHERE NOT EXISTS (SELECT 1 FROM "
               "shadow_records s WHERE s.correlation_id = i.correlation_id) {a} ORDER BY 1")
        args: tuple[str, ...] = ()
        if action:
            sql, args = sql.format(w="WHERE s.action = ?", a="AND i.action = ?"), (action, action)
        else:
            sql = sql.format(w="", a="")
        with self._read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [ShadowPair(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else None,
                           r[6], json.loads(r[7]) if r[7] else None, bool(r[8])) for r in rows]

    # --- alerts and audit chain ---------------------------------------------------------

    def record_alert(self, alert: Alert) -> bool:
        with self._tx() as conn:
            return SQLiteControlTx(conn).record_alert(alert.kind, alert.subject, alert.action,
                                                      alert.message, alert.detail, alert.at)

    def list_alerts(self, limit: int = 1000) -> list[Alert]:
        with self._read() as conn:
            rows = conn.execute("SELECT kind, subject, action, message, detail, at FROM alerts "
                                "ORDER BY id LIMIT ?", (limit,)).fetchall()
        return [Alert(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def audit_entries(self, *, after_seq: int = 0, until_seq: int | None = None,
                      lane: int | None = None, scope: str | None = None,
                      operation_id: str | None = None, limit: int = 1000) -> list[ChainEntry]:
        where, args = audit_filters("?", after_seq=after_seq, until_seq=until_seq, lane=lane,
                                    scope=scope, operation_id=operation_id)
        with self._read() as conn:
            rows = conn.execute(f"SELECT {_CHAIN_COLUMNS} FROM audit_log {where} "
                                "ORDER BY seq LIMIT ?", (*args, limit)).fetchall()
        return [ChainEntry(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] or "", r[8] or "")
                for r in rows]

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Operations rows and the audit_heads row whose recorded entry is gone or differs.

        Appends chain from the log's last entry, so after entries are cut off the tail, later
        appends re-use their seqs and the chain itself reads as whole again; the recorded
        (seq, hash) pairs do not move and keep saying what was there (migration 4).
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT o.audit_seq, o.scope || ':' || o.operation_id, a.hash IS NULL "
                "FROM operations o LEFT JOIN audit_log a ON a.seq = o.audit_seq "
                "WHERE o.audit_seq IS NOT NULL AND (a.hash IS NULL OR a.hash <> o.audit_hash) "
                "UNION ALL SELECT h.seq, 'the audit head', a.hash IS NULL FROM audit_heads h "
                "LEFT JOIN audit_log a ON a.seq = h.seq "
                "WHERE a.hash IS NULL OR a.hash <> h.hash ORDER BY 1").fetchall()
        return [(int(seq), f"{who} records audit seq {seq}, which the log "
                 f"{'no longer has' if missing else 'holds with another hash'}: entries were "
                 "deleted or rewritten") for seq, who, missing in rows]

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        """The recorded head: the later of audit_heads and the newest operations-row anchor.

        The anchors have no index (one would cost the page they save), so this scans the
        operations table: verification reads every entry anyway.
        """
        with self._read() as conn:
            row = conn.execute(
                "SELECT seq, hash FROM (SELECT seq, hash FROM audit_heads WHERE lane = 0 "
                "UNION ALL SELECT audit_seq, audit_hash FROM operations "
                "WHERE audit_seq IS NOT NULL) ORDER BY seq DESC LIMIT 1").fetchone()
        return {} if row is None else {0: (int(row[0]), str(row[1]))}

