"""One open write transaction as the shared ledger logic sees it: a few dialect hooks, and the
control primitives written once on top of them.

A dialect subclasses :class:`SharedTx` and supplies how a statement runs now (:meth:`rows`),
how a write with no result runs (:meth:`write`: SQLite runs it at once, PostgreSQL buffers it
for the transaction's next round trip), how the audit entries :meth:`audit` takes are chained,
the compare-and-set (:meth:`_cas`) and the insert of a new row (:meth:`_insert`), both over
the named parameters of :mod:`effectgate.store._op_sql`. Everything
:mod:`effectgate.store._guard` needs is then here, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from effectgate._core.controls import AuthorityStep, ClassControls
from effectgate._core.states import State
from effectgate.errors import StoreError
from effectgate.store import _op_sql as ops
from effectgate.store import _sql as sql
from effectgate.store.base import NewOperation, Operation, dumps

__all__ = ["Entry", "SharedTx", "SignalStats"]

#: An audit entry taken and not yet written: ``(at, scope, operation_id, kind, detail text)``.
Entry = tuple[float, str | None, str | None, str, str]


class SignalStats:
    """A breaker window's counts (see :func:`effectgate.store._guard.observe_proposal`)."""

    __slots__ = ("decided", "new_targets", "rejected", "same_fingerprint", "value_micros")

    def __init__(
        self,
        decided: int,
        rejected: int,
        value_micros: int,
        same_fingerprint: int,
        new_targets: int,
    ) -> None:
        self.decided, self.rejected, self.value_micros = decided, rejected, value_micros
        self.same_fingerprint, self.new_targets = same_fingerprint, new_targets


class SharedTx(ABC):
    """The dialect hooks of one open transaction, and the control primitives over them."""

    def __init__(self) -> None:
        # A class's controls are read once per transaction: the transaction holds the lock
        # that orders them (SQLite's write lock, PostgreSQL's class advisory lock).
        self._controls: dict[str, ClassControls] = {}
        self._entries: list[Entry] = []

    # --- dialect hooks --------------------------------------------------------------------

    @abstractmethod
    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Sequence[Any]]:
        """Run ``query`` (``?`` placeholders) now, after any buffered write; its rows."""

    @abstractmethod
    def write(self, query: str, args: Sequence[Any] = ()) -> None:
        """A write whose result nobody reads; it may travel with the transaction's next trip."""

    def audit(
        self,
        kind: str,
        detail: Mapping[str, object],
        at: float,
        scope: str | None = None,
        operation_id: str | None = None,
    ) -> None:
        """Append one chained audit entry in this transaction. It is encoded now (the caller may
        reuse its mapping) and waits in :attr:`_entries` until the dialect writes it: with the
        transaction's next statement (SQLite) or in its last round trip (PostgreSQL)."""
        self._entries.append((float(at), scope, operation_id, kind, dumps(detail)))

    def cas(
        self,
        scope: str,
        operation_id: str,
        expected: State,
        target: State,
        *,
        now: float,
        venue_id: str | None = None,
        detail: str | None = None,
        submitted_at: float | None = None,
        known: Operation | None = None,
    ) -> Sequence[Any] | None:
        """The compare-and-set, after its audit entry: ``(version, venue_id, detail,
        submitted_at)`` as updated, or None when the row was not in ``expected``. ``known``: a
        copy of the row the caller holds, which a dialect may use to skip ``RETURNING``."""
        params = ops.cas_params(
            scope, operation_id, expected, target, now, venue_id, detail, submitted_at
        )
        return self._cas(params, known)

    def insert_row(
        self, new: NewOperation, state: State, held: str | None, now: float, intent_text: str
    ) -> None:
        """Insert a new operations row (after its audit entries)."""
        self._insert(ops.row_params(new, state, now, intent_text, held))

    @abstractmethod
    def _cas(self, params: Mapping[str, Any], known: Operation | None) -> Sequence[Any] | None:
        """:func:`~effectgate.store._op_sql.cas` with its named ``params``
        (:func:`~effectgate.store._op_sql.cas_params`), as :meth:`cas` returns it."""

    @abstractmethod
    def _insert(self, params: Mapping[str, Any]) -> None:
        """The new row of :func:`~effectgate.store._op_sql.row_params`."""

    def lock_window(self, action: str) -> None:
        """Serialise a class's envelope-window check and charge (a no-op where the
        transaction already holds the store's only write lock)."""
        return None

    # --- control primitives, written once -------------------------------------------------

    def one(self, query: str, args: Sequence[Any] = ()) -> Sequence[Any]:
        rows = self.rows(query, args)
        if not rows:
            raise StoreError("a single-row query returned nothing")
        return rows[0]

    def seed(self, ctl: ClassControls) -> None:
        """Controls this transaction already read (with the row, in one statement)."""
        self._controls[ctl.action] = ctl

    def controls(self, action: str) -> ClassControls:
        ctl = self._controls.get(action)
        if ctl is None:
            found = self.rows(sql.SELECT_CONTROLS, (action,))
            ctl = self._controls[action] = sql.controls_from_row(
                action, found[0] if found else None
            )
        return ctl

    def save_controls(self, ctl: ClassControls, *, at: float) -> None:
        self._controls[ctl.action] = ctl
        self.write(
            sql.SAVE_CONTROLS,
            (
                ctl.action,
                ctl.killed,
                ctl.kill_reason,
                ctl.breaker_open,
                ctl.breaker_reason,
                ctl.shadow,
                dumps(ctl.envelope.to_json()),
                ctl.envelope.version,
                ctl.updated_by,
                at,
            ),
        )

    def release_holds(self, action: str) -> None:
        """An operator's change that may lift a hold: every row the class holds becomes the
        standing dispatcher's to retry. One write, however many rows are held (call it after
        :meth:`save_controls`, which creates the class's row)."""
        self.write(
            "UPDATE class_controls SET release_gen = release_gen + 1 WHERE action = ?", (action,)
        )

    def unseen_targets(self, targets: Sequence[tuple[str, str]], at: float) -> set[tuple[str, str]]:
        """Which ``(lane, value)`` pairs were never seen before; remembers them all. One
        statement however many fields a class watches (one round trip in PostgreSQL)."""
        values = ",".join("(?,?,?)" for _ in targets)
        args = [x for lane, value in targets for x in (lane, value, at)]
        found = self.rows(
            f"INSERT INTO known_targets VALUES {values} ON CONFLICT DO NOTHING "
            "RETURNING action, target",
            args,
        )
        return {(str(r[0]), str(r[1])) for r in found}

    def record_signal(
        self,
        action: str,
        at: float,
        op_key: str,
        fingerprint: str,
        value_micros: int | None,
        rejected: bool,
        new_target: bool,
    ) -> None:
        self.write(
            sql.INSERT_SIGNAL, (action, at, op_key, fingerprint, value_micros, rejected, new_target)
        )

    def signal_stats(self, action: str, since: float, fingerprint: str) -> SignalStats:
        r = self.one(sql.SIGNAL_STATS, (fingerprint, action, since))
        return SignalStats(int(r[0]), int(r[1]), int(r[2]), int(r[4]), int(r[3]))

    def dispatch_usage(self, action: str, since: float) -> tuple[int, int]:
        """``(count, value_micros)`` dispatched since ``since``."""
        self.lock_window(action)
        r = self.one(sql.DISPATCH_USAGE, (action, since))
        return int(r[0]), int(r[1])

    def record_dispatch(
        self, action: str, at: float, op_key: str, value_micros: int | None
    ) -> None:
        self.write(sql.INSERT_DISPATCH, (action, at, op_key, value_micros))

    def prune(self, action: str, before: float) -> None:
        self.write("DELETE FROM control_signals WHERE action = ? AND at < ?", (action, before))

    def active_steps(self, action: str) -> list[AuthorityStep]:
        return [
            sql.step_from_row(r)
            for r in self.rows(
                f"SELECT {sql.STEP_COLUMNS} FROM authority_steps WHERE action = ? AND active "
                "ORDER BY id",
                (action,),
            )
        ]

    def insert_step(self, step: AuthorityStep) -> int:
        return int(
            self.one(
                sql.INSERT_STEP,
                (
                    step.action,
                    step.axis,
                    dumps(step.old),
                    dumps(step.new),
                    dumps(step.evidence),
                    step.reverse_on,
                    step.operator,
                    step.at,
                    step.kind,
                    step.reverses,
                    step.active,
                ),
            )[0]
        )

    def deactivate_step(self, step_id: int) -> None:
        self.write("UPDATE authority_steps SET active = ? WHERE id = ?", (False, step_id))

    def record_shadow(
        self,
        scope: str,
        operation_id: str,
        action: str,
        correlation_id: str,
        request: Mapping[str, object] | None,
        fingerprint: str,
        at: float,
        *,
        outcome: str,
        intent: Mapping[str, object],
    ) -> None:
        """Record a proposal of a class in shadow mode: ``request`` is what would have been
        sent (None: the agent would not have acted, ``outcome`` says why). The intent's
        ``proposed_by`` is kept for grouping the report; nothing decides on it."""
        by = intent.get("proposed_by")
        model, harness = (
            (by.get("model"), by.get("harness_version"))
            if isinstance(by, Mapping)
            else (None, None)
        )
        self.write(
            sql.UPSERT_SHADOW,
            (
                scope,
                operation_id,
                action,
                correlation_id,
                fingerprint,
                dumps(request),
                at,
                outcome,
                model if isinstance(model, str) else None,
                harness if isinstance(harness, str) else None,
            ),
        )

    def record_alert(
        self,
        kind: str,
        subject: str,
        action: str | None,
        message: str,
        detail: Mapping[str, object],
        at: float,
    ) -> bool:
        return bool(
            self.rows(sql.INSERT_ALERT, (kind, subject, action, message, dumps(detail), at))
        )
