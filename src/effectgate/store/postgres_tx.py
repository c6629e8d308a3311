"""PostgreSQL transactions with controls and a hash-chained audit: locks, the chain SQL, PgTx.

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
  transaction ever waits for two heads (no lock cycles). Lock order everywhere: class, operation
  (key lock or row lock), lane head, envelope window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import psycopg

from effectgate.audit import GENESIS, chain_hash, content_digest, rechain
from effectgate.core.controls import (
    AuthorityStep,
    ClassControls,
)
from effectgate.errors import StoreError
from effectgate.store.base import Operation, dumps
from effectgate.store.guard import (
    CONTROL_COLUMNS,
    STEP_COLUMNS,
    SignalStats,
    controls_from_row,
    step_from_row,
)

__all__ = [
    "LANES",
    "MIGRATION_CONTROLS",
    "PgTx",
    "audit_params",
    "backfill_chain",
    "chain_ctes",
    "class_lock",
    "lock_key",
]

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

_CHAIN_COLUMNS = "seq, lane, at, scope, operation_id, kind, detail, prev_hash, hash"
_NEXTVAL = ("SELECT nextval(pg_get_serial_sequence('audit_log', 'seq')) "
            "FROM generate_series(1, %s)")
_INSERT_AUDIT = ("INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
                 "prev_hash, hash) OVERRIDING SYSTEM VALUE VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)")


def backfill_chain(conn: Conn) -> None:
    """Chain entries written before the log was hash-chained (runs once, in the migration)."""
    rows = conn.execute("SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                        "ORDER BY seq").fetchall()
    last: tuple[int, str] | None = None
    for seq, prev, entry_hash in rechain(rows):
        conn.execute("UPDATE audit_log SET prev_hash = %s, hash = %s WHERE seq = %s",
                     (prev, entry_hash, seq))
        last = (seq, entry_hash)
    if last is not None:
        conn.execute("UPDATE audit_heads SET seq = %s, hash = %s WHERE lane = 0", last)


def chain_ctes(cond: str) -> str:
    """CTEs that append one audit entry (the ``a_*`` parameters) to lane ``%(lane)s`` when CTE
    ``cond`` has rows.

    The link is computed in the statement (``sha256(prev_hash || digest)``, the same formula as
    :func:`effectgate.audit.chain_hash`), after the lane's head row is locked, so one statement
    both writes a row and chains its audit entry: no round trip to read the head first. The
    hot path writes exactly one entry per statement, so the parameters are scalars (arrays went
    through psycopg's Python array dumpers, which cost more client time than the round trip).
    """
    return f"""
aud_head AS (
    SELECT hash FROM audit_heads WHERE lane = %(lane)s AND EXISTS (SELECT 1 FROM {cond})
    FOR UPDATE
),
aud_link AS (
    SELECT hash AS prev,
           encode(sha256(convert_to(hash || %(a_digest)s::text, 'UTF8')), 'hex') AS hash
    FROM aud_head
),
aud_ins AS (
    INSERT INTO audit_log (at, scope, operation_id, kind, detail, lane, prev_hash, hash)
    SELECT %(a_at)s::float8, %(a_scope)s::text, %(a_op)s::text, %(a_kind)s::text,
           %(a_detail)s::text, %(lane)s, l.prev, l.hash
    FROM aud_link l
    RETURNING seq
),
aud_headup AS (
    UPDATE audit_heads SET seq = (SELECT seq FROM aud_ins), hash = (SELECT hash FROM aud_link)
    WHERE lane = %(lane)s AND EXISTS (SELECT 1 FROM aud_ins)
)"""


def audit_params(lane: int, at: float, scope: str | None, operation_id: str | None, kind: str,
                 detail: Mapping[str, object]) -> dict[str, object]:
    """The ``a_*`` parameters of :func:`chain_ctes` for one entry."""
    text = dumps(detail)
    return {"lane": lane, "a_at": float(at), "a_scope": scope, "a_op": operation_id,
            "a_kind": kind, "a_detail": text,
            "a_digest": content_digest(lane, float(at), scope, operation_id, kind, text)}


def _one(cur: Cur) -> Sequence[Any]:
    """The one row a statement that always returns one row returned."""
    row = cur.fetchone()
    if row is None:
        raise StoreError("a single-row query returned nothing")
    return row  # type: ignore[no-any-return]


def lock_key(schema: str, name: str, purpose: str = "class") -> str:
    """The text a transaction advisory lock is keyed on (hashed by the server)."""
    return f"effectgate.{purpose}:{schema}:{name}"


def class_lock(schema: str, action: str, *, exclusive: bool, purpose: str = "class",
               ) -> tuple[str, tuple[str]]:
    """``(query, params)`` taking the transaction advisory lock named by the arguments.

    Parameterised rather than composed: one query text per lock mode, which psycopg prepares
    once per connection, and no per-call quoting on the client.
    """
    return (_XACT_LOCK if exclusive else _XACT_LOCK_SHARED, (lock_key(schema, action, purpose),))


_XACT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_XACT_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))"


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
            c.execute(*class_lock(self.schema, str(name), exclusive=exclusive_class is not None))
            self._cursors["controls"] = c.execute(
                f"SELECT {CONTROL_COLUMNS} FROM class_controls WHERE action = %s", (name,))
            self._controls_name = str(name)
        if op_lock:
            c.execute(*class_lock(self.schema, op_lock, exclusive=True, purpose="op"))
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
            self._controls[self._controls_name] = controls_from_row(
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
            ctl = controls_from_row(action, self.conn.execute(
                f"SELECT {CONTROL_COLUMNS} FROM class_controls WHERE action = %s",
                (action,)).fetchone())
            self._controls[action] = ctl
        return ctl

    def save_controls(self, ctl: ClassControls, *, at: float) -> None:
        self._controls[ctl.action] = ctl
        self.writes.append((
            f"INSERT INTO class_controls (action, {CONTROL_COLUMNS}) VALUES "
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
            self.conn.execute(*class_lock(self.schema, action, exclusive=True, purpose="budget"))
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
        rows = self.conn.execute(f"SELECT {STEP_COLUMNS} FROM authority_steps WHERE "
                                 "action = %s AND active ORDER BY id", (action,)).fetchall()
        return [step_from_row(r) for r in rows]

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


