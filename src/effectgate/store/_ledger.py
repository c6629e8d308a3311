"""The ledger logic, written once for every dialect over a handful of hooks.

:class:`SQLStore` implements every role of :class:`~effectgate.store.roles.Store` except what
truly differs per engine. A dialect supplies:

* ``_rows(query, args, what)``: one read in autocommit, ``?`` placeholders;
* ``_run(work, what, hold)``: one write transaction, calling ``work(tx, row)`` with a
  :class:`~effectgate.store._tx.SharedTx`; the :class:`~effectgate.store._hooks.Hold` says what
  the dialect locks (the operation whose audit lane it writes, the class whose controls it
  reads or changes, the operation row it reads for the transaction);
* its audit heads and its schema.

The hot path (``_journal``, ``_transition``, ``transition_many``), leases and the sweep lock are
written here over ``_run`` too; a dialect overrides what it does in fewer round trips or with
locks of its own (PostgreSQL: one statement per journal or receipt, ``SKIP LOCKED`` leases,
a session lock).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from effectgate._core.chain import ChainEntry
from effectgate._core.controls import DispatchGuard
from effectgate._core.states import State, check_transition
from effectgate.errors import CommitOutcomeUnknown, OperationNotFound, StaleState, StoreError
from effectgate.store import _journal as j
from effectgate.store import _op_sql as ops
from effectgate.store import _sql as sql
from effectgate.store._budgets import BudgetRoles
from effectgate.store._channels import ChannelRoles
from effectgate.store._continuations import ContinuationRoles
from effectgate.store._controls import ControlRoles
from effectgate.store._grants import GrantRoles
from effectgate.store._hooks import Hold, Work, scoped
from effectgate.store._model_windows import ModelWindowRoles
from effectgate.store._policies import PolicyRoles
from effectgate.store._principals import PrincipalRoles
from effectgate.store._quarantine import QuarantineRoles
from effectgate.store._rehearsals import RehearsalRoles
from effectgate.store._releases import ReleaseRoles
from effectgate.store._request_keys import RequestKeyRoles
from effectgate.store._retention import RetentionRoles
from effectgate.store._run_receipts import ProviderReceiptRoles
from effectgate.store._run_snapshots import RunSnapshotRoles
from effectgate.store._runs import RunRoles
from effectgate.store._speculation import SpeculationRoles
from effectgate.store._tx import SharedTx
from effectgate.store.base import (
    AdmissionCheck,
    AuditEvent,
    Divergence,
    Journal,
    LedgerEntry,
    Move,
    NewOperation,
    Operation,
    check_moves,
    check_path,
    conflict,
    dumps,
    moved,
    transition_event,
    where,
    where_terms,
)

__all__ = ["SQLStore", "Work"]

_AUDIT_PAGE = 1000
#: Entries the index leaves to their row (in_row) that no row names (verification), in one
#: range of seqs: a paged walk keeps each statement short on a large log (statement timeouts).
_UNNAMED = (
    "SELECT a.seq, a.scope, a.operation_id FROM audit_log a "
    f"WHERE a.seq > ? AND a.seq <= ? AND NOT ({sql.INDEXED_ENTRY}) AND NOT EXISTS "
    f"(SELECT 1 FROM operations o WHERE {sql.ROW_NAMED_ENTRY}) ORDER BY a.seq"
)
_UNNAMED_PAGE = 50_000
_LEASE = ops.positional(ops.lease_uncertain())


class _Miss(Exception):
    """A compare-and-set found the row elsewhere: roll back its audit entry with it."""


class SQLStore(
    ControlRoles,
    PrincipalRoles,
    ReleaseRoles,
    SpeculationRoles,
    QuarantineRoles,
    RunRoles,
    ProviderReceiptRoles,
    RunSnapshotRoles,
    RetentionRoles,
    ContinuationRoles,
    BudgetRoles,
    GrantRoles,
    PolicyRoles,
    ChannelRoles,
    RequestKeyRoles,
    RehearsalRoles,
    ModelWindowRoles,
):
    """Every store role over the dialect hooks (see the module docstring)."""

    # --- the hot path: written once, a dialect may write it in fewer round trips ------------

    def _journal(
        self,
        new: NewOperation,
        path: list[State],
        now: float,
        audit: Mapping[str, object] | None,
        guard: DispatchGuard | None,
    ) -> Journal:
        """Journal a new row (the hot path), or return the existing one (``created`` False), in
        one transaction of a dialect whose writers are serialised (:func:`~effectgate.store.
        _journal.journal_locked`; PostgreSQL locks the class and the key instead)."""
        return self._run(
            lambda tx, _: j.journal_locked(tx, new, path, guard, audit, now=now),
            f"insert {new.op_key}",
            Hold(key=(new.scope, new.operation_id)),
        )

    def _transition(
        self, move: Move, now: float, event: Mapping[str, object], known: Operation | None
    ) -> Operation | None:
        """The compare-and-set and its audit entry (the receipt path); None on a miss, which
        wrote nothing. ``known``: the caller's copy of the row, which the result builds on."""

        key = (move.scope, move.operation_id)

        def work(tx: SharedTx, _: Operation | None) -> Operation:
            tx.audit("transition", event, now, move.scope, move.operation_id)
            changed = tx.cas(
                move.scope,
                move.operation_id,
                move.expected,
                move.target,
                now=now,
                venue_id=move.venue_id,
                detail=move.detail,
                known=known,
            )
            if changed is None:
                raise _Miss  # rolls the entry back with the transaction
            if known is None:
                # No copy of the row to build on: read it back, inside the transaction.
                return sql.operation_from_row(tx.one(sql.SELECT_OP, key))
            return moved(known, move.target, now, changed)

        try:
            return self._run(work, f"transition {key[0]}:{key[1]}", Hold(key=key))
        except _Miss:
            return None

    # --- ledger writes ------------------------------------------------------------------

    def journal(
        self,
        new: NewOperation,
        path: Sequence[State],
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> Journal:
        check_path(path)
        done = self._journal(new, list(path), now, audit, guard)
        if done.created or done.row.fingerprint == new.fingerprint:
            return done
        # Invariant 2: the same id with another payload is refused, and the refusal audited.
        self.append_audit(
            "idempotency_conflict",
            {"offered_fingerprint": new.fingerprint, "stored_fingerprint": done.row.fingerprint},
            now=now,
            scope=new.scope,
            operation_id=new.operation_id,
        )
        raise conflict(done.row, new.fingerprint)

    def insert_operation(
        self,
        new: NewOperation,
        path: Sequence[State],
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> tuple[Operation, bool]:
        done = self.journal(new, path, now=now, audit=audit, guard=guard)
        return done.row, done.created

    def dispatch(
        self,
        scope: str,
        operation_id: str,
        *,
        now: float,
        guard: DispatchGuard | None = None,
        audit: Mapping[str, object] | None = None,
        checks: Sequence[AdmissionCheck] = (),
    ) -> Journal:
        action = guard.action if guard is not None else None
        if action is None:
            # The class lock is taken before the row's; a row's action never changes.
            action = self._get_or_raise(scope, operation_id).action
        return self._run(
            lambda tx, row: self._dispatch_checked(
                tx, row, action, scope, operation_id, guard, audit, now, checks
            ),
            f"dispatch {scope}:{operation_id}",
            Hold(key=(scope, operation_id), shared_class=action, row=(scope, operation_id)),
        )

    @staticmethod
    def _dispatch_checked(
        tx: SharedTx,
        row: Operation | None,
        action: str,
        scope: str,
        operation_id: str,
        guard: DispatchGuard | None,
        audit: Mapping[str, object] | None,
        now: float,
        checks: Sequence[AdmissionCheck] = (),
    ) -> Journal:
        if row is not None and row.action != action:
            raise ValueError(f"guard for {action!r} used on a {row.action!r} row")
        return j.dispatch_row(tx, row, scope, operation_id, guard, audit, now=now, checks=checks)

    def transition(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        target: State,
        *,
        now: float,
        venue_id: str | None = None,
        detail: str | None = None,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
        current: Operation | None = None,
    ) -> Operation:
        target = check_transition(expected, target)
        if target is State.SUBMITTED:
            if expected is not State.VALIDATED:  # unreachable: the state table says so
                raise StaleState(f"only a validated row is dispatched, not {expected.value!r}")
            return self.dispatch(scope, operation_id, now=now, guard=guard, audit=audit).row
        known = (
            current
            if (
                current is not None
                and current.scope == scope
                and current.operation_id == operation_id
            )
            else None
        )
        event = transition_event(expected, target, venue_id=venue_id, detail=detail, audit=audit)
        move = Move(scope, operation_id, expected, target, venue_id, detail)
        done = self._transition(move, now, event, known)
        if done is not None:
            return done
        # A miss wrote nothing; the state read now only classifies it.
        state = self._get_or_raise(scope, operation_id).state
        raise StaleState(f"operation {operation_id!r} is {state.value!r}, not {expected.value!r}")

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        """Each move's compare-and-set, then its audit entry, in one transaction (a stale move
        writes nothing). A dialect whose writers take row locks orders them to avoid deadlock
        (PostgreSQL overrides this)."""
        check_moves(moves)
        if not moves:
            return []

        def work(tx: SharedTx, _: Operation | None) -> list[bool]:
            applied: list[bool] = []
            for m in moves:
                moved = tx.rows(
                    sql.CAS_MOVE,
                    (
                        m.target.value,
                        now,
                        m.venue_id,
                        m.detail,
                        m.scope,
                        m.operation_id,
                        m.expected.value,
                    ),
                )
                applied.append(bool(moved))
                if moved:
                    tx.audit("transition", m.event(), now, m.scope, m.operation_id)
            return applied

        return self._run(work, f"transition_many ({len(moves)} moves)")

    def _get_or_raise(self, scope: str, operation_id: str) -> Operation:
        row = self.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        return row

    def schema_version(self) -> int:
        rows = self._rows("SELECT max(version) FROM schema_migrations", (), "schema_version")
        return int(rows[0][0] or 0) if rows else 0

    # --- ledger reads -------------------------------------------------------------------

    def get(self, scope: str, operation_id: str) -> Operation | None:
        rows = self._rows(sql.SELECT_OP, (scope, operation_id), "get")
        return sql.operation_from_row(rows[0]) if rows else None

    def list_operations(
        self,
        *,
        state: State | None = None,
        action: str | None = None,
        scope: str | None = None,
        older_than: float | None = None,
        limit: int = 100,
    ) -> list[Operation]:
        clause, args = where(
            (
                ("state =", state.value if state is not None else None),
                ("action =", action),
                ("scope =", scope),
                ("updated_at <", older_than),
            )
        )
        return [
            sql.operation_from_row(r)
            for r in self._rows(
                f"SELECT {sql.OP_COLUMNS} FROM operations {clause} "
                "ORDER BY updated_at DESC, op_key LIMIT ?",
                (*args, limit),
                "list_operations",
            )
        ]

    def operations_window(
        self, action: str, since: float, until: float, *, limit: int = 100_000
    ) -> list[Operation]:
        """The rows of ``action`` journalled at ``since <= created_at < until``, oldest first
        (staged authority's evidence is recomputed from them)."""
        return [
            sql.operation_from_row(r)
            for r in self._rows(
                f"SELECT {sql.OP_COLUMNS} FROM operations WHERE action = ? AND created_at >= ? "
                "AND created_at < ? ORDER BY created_at, op_key LIMIT ?",
                (action, since, until, limit),
                "operations_window",
            )
        ]

    def count_by_state(self) -> dict[tuple[str, str], int]:
        return {
            (r[0], r[1]): int(r[2])
            for r in self._rows(
                "SELECT action, state, count(*) FROM operations GROUP BY action, state"
            )
        }

    def oldest_submitted_at(self) -> float | None:
        rows = self._rows(
            "SELECT min(coalesce(submitted_at, updated_at)) FROM operations "
            "WHERE state = 'submitted'"
        )
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def count_held(self) -> dict[str, int]:
        return {
            str(r[0]): int(r[1])
            for r in self._rows(
                f"SELECT action, count(*) FROM operations WHERE {sql.HELD} GROUP BY action"
            )
        }

    def list_held(
        self, *, action: str | None = None, scope: str | None = None, limit: int = 1000
    ) -> list[Operation]:
        clauses, args = where_terms((("action =", action), ("scope =", scope)))
        return [
            sql.operation_from_row(r)
            for r in self._rows(
                f"SELECT {sql.OP_COLUMNS} FROM operations WHERE "
                f"{' AND '.join([sql.HELD, *clauses])} ORDER BY updated_at DESC, op_key LIMIT ?",
                (*args, limit),
                "list_held",
            )
        ]

    # --- sweep ----------------------------------------------------------------------------

    def page_entries(
        self, after: str | None, limit: int, actions: Sequence[str] | None = None
    ) -> list[LedgerEntry]:
        query = f"SELECT {sql.ENTRY_COLUMNS} FROM operations WHERE op_key > ?"
        args: list[Any] = [after or ""]
        if actions is not None:
            query += f" AND action IN ({','.join('?' * len(actions))})" if actions else " AND 0=1"
            args.extend(actions)
        return [
            sql.entry_from_row(r)
            for r in self._rows(query + " ORDER BY op_key LIMIT ?", (*args, limit), "page_entries")
        ]

    def lease_uncertain(
        self, owner: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[LedgerEntry]:
        """Claim rows with one conditional update (a dialect whose writers are serialised
        needs nothing more; PostgreSQL skips rows other replicas have locked instead)."""
        rows = self._run(
            lambda tx, _: tx.rows(_LEASE, (now, limit, owner, now + lease_seconds)),
            "lease_uncertain",
        )
        return sorted((sql.entry_from_row(r) for r in rows), key=lambda e: e.op_key)

    def sweep_lock(self, holder: str, *, now: float, ttl: float) -> AbstractContextManager[bool]:
        """The single-sweeper lock as a row with an expiry (a dialect with session locks
        overrides it: PostgreSQL's dies with its holder's connection)."""
        return self._table_lock("sweep", holder, now, ttl)

    @contextmanager
    def _table_lock(self, name: str, holder: str, now: float, ttl: float) -> Iterator[bool]:
        # Not re-entrant, not even for the same holder: two sweeps of one service (the
        # standing reconciler and an admin "reconcile now") must not run at once, and the
        # first to finish would otherwise delete the lock the other still relies on.
        # An unlock that failed left this holder's row of a sweep that has ended: delete it
        # first, or a live sweeper would wait out its own lock's whole ttl (invariant 5).
        unreleased: dict[tuple[str, str], float] = vars(self).setdefault("_unreleased", {})
        stale = unreleased.get((name, holder))
        if stale is not None:
            self._unlock_row(name, holder, stale)
            del unreleased[(name, holder)]
        acquired = bool(
            self._run(
                lambda tx, _: tx.rows(
                    "INSERT INTO locks (name, holder, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) "
                    "DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
                    "WHERE locks.expires_at < ? RETURNING 1",
                    (name, holder, now + ttl, now),
                ),
                f"lock {name}",
            )
        )
        try:
            yield acquired
        finally:
            if acquired:
                try:
                    self._unlock_row(name, holder, now + ttl)
                except (StoreError, CommitOutcomeUnknown):
                    unreleased[(name, holder)] = now + ttl  # deleted before the next try
                    raise

    def _unlock_row(self, name: str, holder: str, expires_at: float) -> None:
        # Only that acquisition's lock: if it expired and was taken over meanwhile, the new
        # holder's row (another expiry) stays.
        self._run(
            lambda tx, _: tx.write(
                "DELETE FROM locks WHERE name = ? AND holder = ? AND expires_at = ?",
                (name, holder, expires_at),
            ),
            f"unlock {name}",
        )

    def record_divergence(
        self,
        kind: str,
        op_key: str,
        venue_ids: Sequence[str],
        ledger_state: str | None,
        *,
        now: float,
    ) -> bool:
        scope, _, operation_id = op_key.partition(":")

        def work(tx: SharedTx, _: Operation | None) -> bool:
            if not tx.rows(
                sql.INSERT_DIVERGENCE, (kind, op_key, dumps(list(venue_ids)), ledger_state, now)
            ):
                return False
            tx.audit(
                "divergence",
                {"kind": kind, "venue_ids": list(venue_ids), "ledger_state": ledger_state},
                now,
                scope or None,
                operation_id or None,
            )
            return True

        return self._run(
            work,
            f"record_divergence {kind} {op_key}",
            Hold(key=(scope or None, operation_id or None)),
        )

    def list_divergences(self, limit: int = 1000) -> list[Divergence]:
        return self.list_divergences_in(None, limit=limit)

    def list_divergences_in(
        self, scope: str | None = None, *, limit: int = 1000
    ) -> list[Divergence]:
        clause, args = scoped("op_key", scope)
        return [
            sql.divergence_from_row(r)
            for r in self._rows(
                f"SELECT {sql.DIVERGENCE_COLUMNS} FROM divergences {clause} ORDER BY id LIMIT ?",
                (*args, limit),
                "list_divergences",
            )
        ]

    def count_divergences(self) -> dict[str, int]:
        return {
            str(r[0]): int(r[1])
            for r in self._rows("SELECT kind, count(*) FROM divergences GROUP BY kind")
        }

    # --- audit log ------------------------------------------------------------------------

    def append_audit(
        self,
        kind: str,
        detail: Mapping[str, object],
        *,
        now: float,
        scope: str | None = None,
        operation_id: str | None = None,
    ) -> None:
        self._run(
            lambda tx, _: tx.audit(kind, detail, now, scope, operation_id),
            f"audit {kind}",
            Hold(key=(scope, operation_id)),
        )

    def iter_audit(self, after_seq: int = 0) -> Iterator[AuditEvent]:
        last = after_seq
        while True:
            rows = self._rows(
                "SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (last, _AUDIT_PAGE),
                "iter_audit",
            )
            for r in rows:
                yield AuditEvent(int(r[0]), r[1], r[2], r[3], r[4], json.loads(r[5]))
            if len(rows) < _AUDIT_PAGE:
                return
            last = int(rows[-1][0])

    def audit_entries(
        self,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        lane: int | None = None,
        scope: str | None = None,
        operation_id: str | None = None,
        limit: int = 1000,
    ) -> list[ChainEntry]:
        if scope is not None and operation_id is not None:
            # One operation's entries: through its index and its row (sql.op_entries).
            terms, extra = where_terms(
                (("a.seq >", after_seq), ("a.seq <=", until_seq), ("a.lane =", lane))
            )
            query = sql.op_entries(sql.CHAIN_COLUMNS, "".join(f" AND {t}" for t in terms))
            args = sql.op_entries_args(scope, operation_id, extra)
        else:
            clause, args = where(
                (
                    ("seq >", after_seq),
                    ("seq <=", until_seq),
                    ("lane =", lane),
                    ("scope =", scope),
                    ("operation_id =", operation_id),
                )
            )
            query = f"SELECT {sql.CHAIN_COLUMNS} FROM audit_log {clause}"
        return [
            sql.chain_entry_from_row(r)
            for r in self._rows(f"{query} ORDER BY seq LIMIT ?", (*args, limit), "audit_entries")
        ]

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        return {
            int(r[0]): (int(r[1]), str(r[2]))
            for r in self._rows(
                "SELECT lane, seq, hash FROM audit_heads WHERE seq > 0", (), "audit_heads"
            )
        }

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Entries marked ``in_row`` that their operations row does not name.

        Per-operation reads find such an entry only through its row (``sql.op_entries``), and
        neither ``in_row`` nor the row's seqs are inside the entries' digests: an edit to
        either would hide it there without breaking the chain, so verification reports it.
        Beyond that, every append advances its lane's head row and chains from it, so a
        cut-off tail stays a broken link (SQLite records more: it extends this).
        """
        found: list[tuple[int, str]] = []
        bottom, top = self._rows(
            "SELECT min(seq), max(seq) FROM audit_log", (), "audit_anchor_mismatches"
        )[0]
        low = int(bottom) - 1 if bottom is not None else 0
        while top is not None and low < int(top):
            high = low + _UNNAMED_PAGE
            for seq, scope, operation_id in self._rows(
                _UNNAMED, (low, high), "audit_anchor_mismatches"
            ):
                found.append(
                    (
                        int(seq),
                        f"entry {seq} of {scope}:{operation_id} is marked as named by its "
                        "operations row, which does not name it: in_row or the row's "
                        "journal_seq/receipt_seq was edited (per-operation reads would miss "
                        "the entry)",
                    )
                )
            low = high
        return found
