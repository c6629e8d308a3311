"""PostgreSQL storage for the controls and the hash-chained audit log (mixed into PostgresStore).

Locking, chosen so executors do not queue behind each other needlessly:

* **Class switches** (kill, breaker, shadow, envelope): a dispatching transaction takes a
  *shared* transaction advisory lock on its class, operator changes an *exclusive* one. Dispatchers
  never wait for each other, a flip waits for the dispatches already in flight, and every
  dispatch after the flip commits reads the new state (READ COMMITTED reads after the lock).
* **Envelope windows** (exposure, rate): an exclusive advisory lock per class, taken only when
  the class has such an axis, so the check and the charge of one dispatch are atomic.
* **Audit chain**: 16 lanes, each with a head row locked ``FOR UPDATE``. An operation's entries
  all go to the lane of its key; operator actions to lane 0. Writers serialise per lane, not
  globally. Every entry of a transaction is written to that transaction's single lane, so no
  transaction ever waits for two heads (no lock cycles).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from effectgate.audit import GENESIS, ChainEntry, chain_hash, content_digest
from effectgate.core.controls import (
    Alert,
    ApprovalOutcome,
    ApprovalRecord,
    ApprovalRequest,
    AuthorityStep,
    ClassControls,
    DispatchGuard,
    Envelope,
    ShadowPair,
)
from effectgate.core.intent import Tier
from effectgate.core.states import State, check_transition
from effectgate.errors import ApprovalError, OperationNotFound, StaleState, StoreError
from effectgate.store.base import Operation, dumps
from effectgate.store.guard import SignalStats, apply_step

__all__ = ["LANES", "MIGRATION_CONTROLS", "PgControlsMixin", "PgTx", "audit_params",
           "backfill_chain", "chain_ctes"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Cur = psycopg.Cursor[Any]

#: Audit lanes (fixed: an entry's lane is part of its hash).
LANES = 16
#: Sequence numbers fetched up front per transaction; more are fetched if a rare path needs them.
_PREFETCH = 6

MIGRATION_CONTROLS = f"""
ALTER TABLE audit_log ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN prev_hash text;
ALTER TABLE audit_log ADD COLUMN hash text;
CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
CREATE TABLE audit_heads (lane integer PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL);
INSERT INTO audit_heads SELECT g, 0, '{GENESIS}' FROM generate_series(0, {LANES - 1}) g;
CREATE TABLE class_controls (
    action text PRIMARY KEY, killed boolean NOT NULL DEFAULT false, kill_reason text,
    breaker_open boolean NOT NULL DEFAULT false, breaker_reason text,
    shadow boolean NOT NULL DEFAULT false, envelope text NOT NULL DEFAULT '{{}}',
    envelope_version integer NOT NULL DEFAULT 0, updated_by text, updated_at double precision
);
CREATE TABLE control_signals (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    at double precision NOT NULL, op_key text NOT NULL, fingerprint text NOT NULL,
    value_micros bigint, rejected boolean NOT NULL, new_target boolean NOT NULL
);
CREATE INDEX control_signals_window ON control_signals (action, at);
CREATE INDEX control_signals_fingerprint ON control_signals (action, fingerprint, at);
CREATE TABLE known_targets (
    action text NOT NULL, target text NOT NULL, first_seen double precision NOT NULL,
    PRIMARY KEY (action, target)
);
CREATE TABLE dispatch_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    at double precision NOT NULL, op_key text NOT NULL, value_micros bigint
);
CREATE INDEX dispatch_log_window ON dispatch_log (action, at);
CREATE TABLE authority_steps (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    axis text NOT NULL, old text NOT NULL, new text NOT NULL, evidence text NOT NULL,
    reverse_on text NOT NULL, operator text NOT NULL, at double precision NOT NULL,
    kind text NOT NULL, reverses bigint, active boolean NOT NULL
);
CREATE INDEX authority_steps_by_action ON authority_steps (action, id);
CREATE TABLE approval_requests (
    scope text NOT NULL, operation_id text NOT NULL, fingerprint text NOT NULL,
    required integer NOT NULL, expires_at double precision NOT NULL, proposers text NOT NULL,
    PRIMARY KEY (scope, operation_id)
);
CREATE TABLE approvals (
    scope text NOT NULL, operation_id text NOT NULL, approver text NOT NULL,
    verdict text NOT NULL, fingerprint text NOT NULL, reason text,
    at double precision NOT NULL, PRIMARY KEY (scope, operation_id, approver)
);
CREATE TABLE shadow_records (
    scope text NOT NULL, operation_id text NOT NULL, action text NOT NULL,
    correlation_id text NOT NULL, fingerprint text NOT NULL, request text NOT NULL,
    at double precision NOT NULL, PRIMARY KEY (scope, operation_id)
);
CREATE INDEX shadow_by_correlation ON shadow_records (correlation_id);
CREATE TABLE incumbent_outcomes (
    correlation_id text PRIMARY KEY, action text NOT NULL, fingerprint text, effect text,
    source text NOT NULL, at double precision NOT NULL
);
CREATE TABLE alerts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
    subject text NOT NULL, action text, message text NOT NULL, detail text NOT NULL,
    at double precision NOT NULL, CONSTRAINT alerts_once UNIQUE (kind, subject)
)
"""

_CONTROL_COLUMNS = ("killed, kill_reason, breaker_open, breaker_reason, shadow, envelope, "
                    "envelope_version, updated_by, updated_at")
_STEP_COLUMNS = ("id, action, axis, old, new, evidence, reverse_on, operator, at, kind, "
                 "reverses, active")
_CHAIN_COLUMNS = "seq, lane, at, scope, operation_id, kind, detail, prev_hash, hash"
_NEXTVAL = ("SELECT nextval(pg_get_serial_sequence('audit_log', 'seq')) "
            "FROM generate_series(1, %s)")
_INSERT_AUDIT = ("INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
                 "prev_hash, hash) OVERRIDING SYSTEM VALUE VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)")


def backfill_chain(conn: Conn) -> None:
    """Chain entries written before the log was hash-chained (runs once, in the migration)."""
    rows = conn.execute("SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                        "ORDER BY seq").fetchall()
    prev, last = GENESIS, 0
    for seq, at, scope, op, kind, text in rows:
        entry_hash = chain_hash(prev, content_digest(0, float(at), scope, op, kind, text))
        conn.execute("UPDATE audit_log SET prev_hash = %s, hash = %s WHERE seq = %s",
                     (prev, entry_hash, seq))
        prev, last = entry_hash, seq
    if last:
        conn.execute("UPDATE audit_heads SET seq = %s, hash = %s WHERE lane = 0", (last, prev))


def chain_ctes(cond: str) -> str:
    """CTEs that append the ``a_*`` entries to lane ``%(lane)s`` when CTE ``cond`` has rows.

    The link is computed in the statement (``sha256(prev_hash || digest)``, the same formula as
    :func:`effectgate.audit.chain_hash`), after the lane's head row is locked, so one statement
    both writes a row and chains its audit entries: no round trip to read the head first.
    ``seq`` comes from the identity, in entry order, after the lock: increasing along the lane.
    """
    return f"""
aud_d AS (
    SELECT * FROM unnest(%(a_at)s::float8[], %(a_scope)s::text[], %(a_op)s::text[],
                         %(a_kind)s::text[], %(a_detail)s::text[], %(a_digest)s::text[])
        WITH ORDINALITY AS d(at, scope, operation_id, kind, detail, digest, n)
    WHERE EXISTS (SELECT 1 FROM {cond})
),
aud_head AS (
    SELECT hash FROM audit_heads WHERE lane = %(lane)s AND EXISTS (SELECT 1 FROM {cond})
    FOR UPDATE
),
aud_chain(n, prev, hash) AS (
    SELECT d.n, h.hash, encode(sha256(convert_to(h.hash || d.digest, 'UTF8')), 'hex')
    FROM aud_d d CROSS JOIN aud_head h WHERE d.n = 1
    UNION ALL
    SELECT d.n, c.hash, encode(sha256(convert_to(c.hash || d.digest, 'UTF8')), 'hex')
    FROM aud_chain c JOIN aud_d d ON d.n = c.n + 1
),
aud_ins AS (
    INSERT INTO audit_log (at, scope, operation_id, kind, detail, lane, prev_hash, hash)
    SELECT d.at, d.scope, d.operation_id, d.kind, d.detail, %(lane)s, c.prev, c.hash
    FROM aud_d d JOIN aud_chain c ON c.n = d.n ORDER BY d.n
    RETURNING seq
),
aud_headup AS (
    UPDATE audit_heads SET seq = (SELECT max(seq) FROM aud_ins),
        hash = (SELECT hash FROM aud_chain ORDER BY n DESC LIMIT 1)
    WHERE lane = %(lane)s AND EXISTS (SELECT 1 FROM aud_ins)
)"""


def audit_params(lane: int, entries: Sequence[tuple[float, str | None, str | None, str,
                                                     Mapping[str, object]]],
                 ) -> dict[str, object]:
    """The ``a_*`` parameters of :func:`chain_ctes` for ``(at, scope, op, kind, detail)``."""
    texts = [dumps(detail) for *_, detail in entries]
    return {
        "lane": lane, "a_at": [float(e[0]) for e in entries], "a_scope": [e[1] for e in entries],
        "a_op": [e[2] for e in entries], "a_kind": [e[3] for e in entries], "a_detail": texts,
        "a_digest": [content_digest(lane, float(e[0]), e[1], e[2], e[3], text)
                     for e, text in zip(entries, texts, strict=True)],
    }


def _one(cur: Cur) -> Sequence[Any]:
    """The one row a statement that always returns one row returned."""
    row = cur.fetchone()
    if row is None:
        raise StoreError("a single-row query returned nothing")
    return row  # type: ignore[no-any-return]


def class_lock(schema: str, action: str, *, exclusive: bool, purpose: str = "class",
               ) -> sql.Composed:
    fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    return sql.SQL("SELECT {}(hashtextextended({}, 0))").format(
        sql.SQL(fn), sql.Literal(f"effectgate.{purpose}:{schema}:{action}"))


def _controls_from_row(action: str, row: Sequence[Any] | None) -> ClassControls:
    if row is None:
        return ClassControls(action=action)
    return ClassControls(action=action, killed=bool(row[0]), kill_reason=row[1],
                         breaker_open=bool(row[2]), breaker_reason=row[3], shadow=bool(row[4]),
                         envelope=Envelope.from_json(json.loads(row[5]), version=int(row[6])),
                         updated_by=row[7], updated_at=row[8])


def _step_from_row(r: Sequence[Any]) -> AuthorityStep:
    return AuthorityStep(id=int(r[0]), action=r[1], axis=r[2], old=json.loads(r[3]),
                         new=json.loads(r[4]), evidence=json.loads(r[5]), reverse_on=r[6],
                         operator=r[7], at=r[8], kind=r[9],
                         reverses=int(r[10]) if r[10] is not None else None,
                         active=bool(r[11]))


class PgTx:
    """One write transaction: its audit lane, buffered audit entries and buffered writes.

    :meth:`open` queues the prelude (locks, head, sequence numbers, reads) in the caller's
    pipeline; :meth:`flush` sends the buffered writes, the chained audit rows and the new head
    in one pipelined round trip. Implements :class:`~effectgate.store.guard.ControlTx`.
    """

    def __init__(self, conn: Conn, schema: str, lane: int) -> None:
        self.conn, self.schema, self.lane = conn, schema, lane
        self.writes: list[tuple[Any, Any]] = []
        self.entries: list[tuple[float, str | None, str | None, str, str]] = []
        # (action, at, op_key, fingerprint, value_micros, rejected, new_target)
        self.pending_signals: list[tuple[str, float, str, str, int | None, bool, bool]] = []
        self._cursors: dict[str, Cur] = {}
        self._controls: dict[str, ClassControls] = {}
        self._budget: set[str] = set()
        self.head: tuple[int, str] = (0, GENESIS)
        self.seqs: list[int] = []

    # --- prelude and flush ----------------------------------------------------------------

    def open(self, *, shared_class: str | None = None, exclusive_class: str | None = None,
             op_lock: str | None = None, row: tuple[str, str] | None = None,
             row_for_update: bool = False) -> Cur:
        """Queue the prelude statements (call inside ``conn.pipeline()``)."""
        c = self.conn
        if shared_class or exclusive_class:
            name = exclusive_class or shared_class
            c.execute(class_lock(self.schema, str(name), exclusive=exclusive_class is not None))
            self._cursors["controls"] = c.execute(
                f"SELECT {_CONTROL_COLUMNS} FROM class_controls WHERE action = %s", (name,))
            self._controls_name = str(name)
        if op_lock:
            c.execute(class_lock(self.schema, op_lock, exclusive=True, purpose="op"))
        if row:
            from effectgate.store.postgres import _OP_COLUMNS

            lock = " FOR UPDATE" if row_for_update else ""
            self._cursors["row"] = c.execute(
                f"SELECT {_OP_COLUMNS} FROM operations WHERE scope = %s AND operation_id = %s"
                f"{lock}".encode(), row)
        self._cursors["head"] = c.execute(
            "SELECT seq, hash FROM audit_heads WHERE lane = %s FOR UPDATE", (self.lane,))
        cur = c.execute(_NEXTVAL, (_PREFETCH,))
        self._cursors["seqs"] = cur
        return cur

    def collect(self) -> Operation | None:
        """Read the prelude's results; return the selected operation row, if one was asked."""
        from effectgate.store.postgres import _row_to_operation

        head = self._cursors["head"].fetchone()
        if head is not None:
            self.head = (int(head[0]), str(head[1]))
        self.seqs = [int(r[0]) for r in self._cursors["seqs"].fetchall()]
        if "controls" in self._cursors:
            self._controls[self._controls_name] = _controls_from_row(
                self._controls_name, self._cursors["controls"].fetchone())
        if "row" in self._cursors:
            r = self._cursors["row"].fetchone()
            return None if r is None else _row_to_operation(r)
        return None

    def flush(self, main: tuple[Any, Any] | None = None) -> Cur | None:
        """Send buffered writes, ``main`` and the chained audit entries in one round trip."""
        for signal in self.pending_signals:
            self.writes.append((
                "INSERT INTO control_signals (action, at, op_key, fingerprint, value_micros, "
                "rejected, new_target) VALUES (%s,%s,%s,%s,%s,%s,%s)", signal))
        self.pending_signals.clear()
        if len(self.seqs) < len(self.entries):
            more = self.conn.execute(_NEXTVAL, (len(self.entries) - len(self.seqs),))
            self.seqs += [int(r[0]) for r in more.fetchall()]
        rows = []
        prev = self.head[1]
        for (at, scope, op, kind, text), seq in zip(self.entries, self.seqs, strict=False):
            entry_hash = chain_hash(prev, content_digest(self.lane, at, scope, op, kind, text))
            rows.append((seq, at, scope, op, kind, text, self.lane, prev, entry_hash))
            prev = entry_hash
        result: Cur | None = None
        with self.conn.pipeline():
            for statement, params in self.writes:
                self.conn.execute(statement, params)
            if main is not None:
                result = self.conn.execute(main[0], main[1])
            if rows:
                self.conn.cursor().executemany(_INSERT_AUDIT, rows)
                self.conn.execute("UPDATE audit_heads SET seq = %s, hash = %s WHERE lane = %s",
                                  (rows[-1][0], rows[-1][-1], self.lane))
        self.writes.clear()
        self.entries.clear()
        if rows:
            self.head = (rows[-1][0], rows[-1][-1])
            self.seqs = self.seqs[len(rows):]
        return result

    # --- ControlTx ------------------------------------------------------------------------

    def controls(self, action: str) -> ClassControls:
        ctl = self._controls.get(action)
        if ctl is None:
            ctl = _controls_from_row(action, self.conn.execute(
                f"SELECT {_CONTROL_COLUMNS} FROM class_controls WHERE action = %s",
                (action,)).fetchone())
            self._controls[action] = ctl
        return ctl

    def save_controls(self, ctl: ClassControls, *, at: float) -> None:
        self._controls[ctl.action] = ctl
        self.writes.append((
            f"INSERT INTO class_controls (action, {_CONTROL_COLUMNS}) VALUES "
            "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (action) DO UPDATE SET "
            "killed = excluded.killed, kill_reason = excluded.kill_reason, "
            "breaker_open = excluded.breaker_open, breaker_reason = excluded.breaker_reason, "
            "shadow = excluded.shadow, envelope = excluded.envelope, "
            "envelope_version = excluded.envelope_version, updated_by = excluded.updated_by, "
            "updated_at = excluded.updated_at",
            (ctl.action, ctl.killed, ctl.kill_reason, ctl.breaker_open, ctl.breaker_reason,
             ctl.shadow, dumps(ctl.envelope.to_json()), ctl.envelope.version, ctl.updated_by,
             at)))

    def seen_target(self, action: str, target: str, at: float) -> bool:
        row = self.conn.execute("INSERT INTO known_targets VALUES (%s,%s,%s) ON CONFLICT DO "
                                "NOTHING RETURNING 1", (action, target, at)).fetchone()
        return row is None

    def record_signal(self, action: str, at: float, op_key: str, fingerprint: str,
                      value_micros: int | None, rejected: bool, new_target: bool) -> None:
        # Buffered: it travels with the row's insert. signal_stats counts it meanwhile.
        self.pending_signals.append((action, at, op_key, fingerprint, value_micros, rejected,
                                     new_target))

    def signal_stats(self, action: str, since: float, fingerprint: str) -> SignalStats:
        r = _one(self.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE rejected), "
            "coalesce(sum(value_micros), 0), count(*) FILTER (WHERE new_target), "
            "count(DISTINCT op_key) FILTER (WHERE fingerprint = %s) "
            "FROM control_signals WHERE action = %s AND at >= %s",
            (fingerprint, action, since)))
        mine = [s for s in self.pending_signals if s[0] == action and s[1] >= since]
        return SignalStats(
            int(r[0]) + len(mine), int(r[1]) + sum(s[5] for s in mine),
            int(r[2]) + sum(s[4] or 0 for s in mine),
            int(r[4]) + sum(1 for s in mine if s[3] == fingerprint),
            int(r[3]) + sum(s[6] for s in mine))

    def dispatch_usage(self, action: str, since: float) -> tuple[int, int]:
        if action not in self._budget:
            # Check and charge of a window are one critical section per class.
            self.conn.execute(class_lock(self.schema, action, exclusive=True, purpose="budget"))
            self._budget.add(action)
        r = _one(self.conn.execute("SELECT count(*), coalesce(sum(value_micros), 0) FROM "
                                   "dispatch_log WHERE action = %s AND at >= %s",
                                   (action, since)))
        return int(r[0]), int(r[1])

    def record_dispatch(self, action: str, at: float, op_key: str,
                        value_micros: int | None) -> None:
        self.writes.append(("INSERT INTO dispatch_log (action, at, op_key, value_micros) "
                            "VALUES (%s,%s,%s,%s)", (action, at, op_key, value_micros)))

    def prune(self, action: str, before: float) -> None:
        self.writes.append(("DELETE FROM control_signals WHERE action = %s AND at < %s",
                            (action, before)))

    def active_steps(self, action: str) -> list[AuthorityStep]:
        rows = self.conn.execute(f"SELECT {_STEP_COLUMNS} FROM authority_steps WHERE "
                                 "action = %s AND active ORDER BY id", (action,)).fetchall()
        return [_step_from_row(r) for r in rows]

    def insert_step(self, step: AuthorityStep) -> int:
        row = _one(self.conn.execute(
            "INSERT INTO authority_steps (action, axis, old, new, evidence, reverse_on, "
            "operator, at, kind, reverses, active) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
            "RETURNING id", (step.action, step.axis, dumps(step.old), dumps(step.new),
                             dumps(step.evidence), step.reverse_on, step.operator, step.at,
                             step.kind, step.reverses, step.active)))
        return int(row[0])

    def deactivate_step(self, step_id: int) -> None:
        self.writes.append(("UPDATE authority_steps SET active = false WHERE id = %s",
                            (step_id,)))

    def record_shadow(self, scope: str, operation_id: str, action: str, correlation_id: str,
                      request: Mapping[str, object], fingerprint: str, at: float) -> None:
        self.writes.append(("INSERT INTO shadow_records VALUES (%s,%s,%s,%s,%s,%s,%s)",
                            (scope, operation_id, action, correlation_id, fingerprint,
                             dumps(request), at)))

    def audit(self, kind: str, detail: Mapping[str, object], at: float,
              scope: str | None = None, operation_id: str | None = None) -> None:
        self.entries.append((float(at), scope, operation_id, kind, dumps(detail)))

    def record_alert(self, kind: str, subject: str, action: str | None, message: str,
                     detail: Mapping[str, object], at: float) -> bool:
        row = self.conn.execute("INSERT INTO alerts (kind, subject, action, message, detail, at) "
                                "VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING RETURNING 1",
                                (kind, subject, action, message, dumps(detail), at)).fetchone()
        return row is not None


def approval_request_write(scope: str, operation_id: str, fingerprint: str, tier: str | None,
                           guard: DispatchGuard | None, now: float,
                           ) -> tuple[str, tuple[Any, ...]]:
    required = 1 if tier == Tier.APPROVE.value else max(
        2, guard.approvals_required if guard else 2)
    ttl = guard.approval_ttl if guard else 86400.0
    return ("INSERT INTO approval_requests VALUES (%s,%s,%s,%s,%s,%s)",
            (scope, operation_id, fingerprint, required, now + ttl,
             dumps(list(guard.proposers) if guard else [])))


class PgControlsMixin:
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
        return self._read(lambda conn: _controls_from_row(action, conn.execute(
            f"SELECT {_CONTROL_COLUMNS} FROM class_controls WHERE action = %s",
            (action,)).fetchone()), "controls")

    def list_controls(self) -> list[ClassControls]:
        rows = self._read(lambda conn: conn.execute(
            f"SELECT action, {_CONTROL_COLUMNS} FROM class_controls ORDER BY action").fetchall(),
            "list_controls")
        return [_controls_from_row(r[0], r[1:]) for r in rows]

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

    def set_kill(self, action: str, on: bool, *, operator: str, reason: str | None,
                 now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now,
                                     kind="kill_switch_on" if on else "kill_switch_off",
                                     detail={"reason": reason}, killed=on,
                                     kill_reason=reason if on else None)

    def reset_breaker(self, action: str, *, operator: str, reason: str | None,
                      now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now, kind="breaker_reset",
                                     detail={"reason": reason}, reset_signals=True,
                                     breaker_open=False, breaker_reason=None)

    def set_shadow(self, action: str, on: bool, *, operator: str, now: float) -> ClassControls:
        return self._change_controls(action, operator=operator, now=now,
                                     kind="shadow_on" if on else "shadow_off", detail={},
                                     shadow=on)

    def apply_authority_step(self, action: str, axis: str, new: object, *,
                             evidence: Mapping[str, object], reverse_on: str, operator: str,
                             now: float) -> AuthorityStep:
        return self._in_tx(lambda tx, _: apply_step(
            tx, action, axis, new, evidence=evidence, reverse_on=reverse_on, operator=operator,
            now=now), f"authority step {action}", exclusive_class=action)

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]:
        where, args = ("WHERE action = %s", [action]) if action else ("", [])
        rows = self._read(lambda conn: conn.execute(
            f"SELECT {_STEP_COLUMNS} FROM authority_steps {where} ORDER BY id".encode(),
            args).fetchall(), "authority_history")
        return [_step_from_row(r) for r in rows]

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
        from effectgate.audit import lane_for

        def work(tx: PgTx, row: Operation | None) -> ApprovalOutcome:
            if row is None:
                raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
            if row.state is not State.AWAITING_APPROVAL:
                raise ApprovalError(f"operation {operation_id!r} is {row.state.value!r}, not "
                                    "awaiting approval", reason="not_awaiting")
            req = tx.conn.execute("SELECT fingerprint, required, expires_at, proposers FROM "
                                  "approval_requests WHERE scope = %s AND operation_id = %s",
                                  (scope, operation_id)).fetchone()
            required, expires_at = (int(req[1]), float(req[2])) if req else (1, float("inf"))
            proposers = set(json.loads(req[3])) if req else set()
            if fingerprint != row.fingerprint:
                raise ApprovalError(
                    f"the approval names payload {fingerprint[:12]} but operation "
                    f"{operation_id!r} carries {row.fingerprint[:12]}: an approval releases "
                    "only the exact payload it was given", reason="fingerprint_mismatch")
            if approver in proposers:
                raise ApprovalError(f"{approver!r} proposed operation {operation_id!r} and "
                                    "cannot approve it", reason="self_approval")
            answered = tx.conn.execute(
                "SELECT verdict FROM approvals WHERE scope = %s AND operation_id = %s",
                (scope, operation_id)).fetchall()
            if tx.conn.execute("SELECT 1 FROM approvals WHERE scope = %s AND operation_id = %s "
                               "AND approver = %s", (scope, operation_id, approver)).fetchone():
                raise ApprovalError(f"{approver!r} already answered for {operation_id!r}; "
                                    "approvers must be distinct", reason="duplicate_approver")
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
        from effectgate.audit import lane_for

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
        clauses: list[str] = ["seq > %s"]
        args: list[object] = [after_seq]
        for column, value in (("seq <=", until_seq), ("lane =", lane), ("scope =", scope),
                              ("operation_id =", operation_id)):
            if value is not None:
                clauses.append(f"{column} %s")
                args.append(value)
        query = (f"SELECT {_CHAIN_COLUMNS} FROM audit_log WHERE {' AND '.join(clauses)} "
                 "ORDER BY seq LIMIT %s")
        rows = self._read(lambda conn: conn.execute(query.encode(), (*args, limit)).fetchall(),
                          "audit_entries")
        return [ChainEntry(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7] or "", r[8] or "")
                for r in rows]

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT lane, seq, hash FROM audit_heads WHERE seq > 0").fetchall(), "audit_heads")
        return {int(r[0]): (int(r[1]), str(r[2])) for r in rows}


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
