"""The runs role: run-call journals, seals and bound admissions, written once over the hooks.

Serialisation, the same on both dialects: every admission, every recorded call and the seal
update the run's ``runs`` row first, so they queue on its row lock (SQLite: the one write lock).
An admission that reads the row after a seal committed sees the seal and is refused; a seal
that comes second waits for the admission's commit. So none is admitted after a seal commits
(invariant 13). An admission then updates its call's row, which orders it with that call's
completion: an effect is admitted only while the exact call it names is unfinished.

Each change writes a chained audit entry in its transaction; a refusal rolls its transaction
back and writes one audit line (``run_refused``) in its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from effectgate._core.controls import DispatchGuard
from effectgate._core.runs import (
    RunCall,
    RunCallKind,
    RunCallRecord,
    RunCallRef,
    RunCompletion,
    RunSeal,
    RunSummary,
    check_cursor,
    check_run_id,
    check_scope,
    check_seal_request,
)
from effectgate._core.states import State
from effectgate.errors import (
    BudgetError,
    IdempotencyConflict,
    RunCallConflict,
    RunCallNotFound,
    RunCallNotOpen,
    RunError,
    RunSealed,
)
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._journal import journal_new
from effectgate.store._run_budgets import admit_tool_slot
from effectgate.store._sql import SELECT_OP, operation_from_row
from effectgate.store._tx import SharedTx
from effectgate.store.base import (
    Journal,
    NewOperation,
    Operation,
    check_path,
    conflict,
    credential_marker,
    dumps,
)

__all__ = [
    "CALL_COLUMNS",
    "LOCK_RUN",
    "MAX_LIST",
    "RunRoles",
    "call_record",
    "refusing",
    "run_lane",
    "summary_from_row",
]

T = TypeVar("T")

#: The most rows one listing page returns.
MAX_LIST = 1000

CALL_COLUMNS = "scope, request, started_at, completion, completed_at, effects"
_RUN_COLUMNS = (
    "r.scope, r.run_id, r.created_at, r.calls, r.effects, r.sealed_at, r.sealed_by, "
    "r.seal_reason, (SELECT count(*) FROM run_calls c WHERE c.scope = r.scope "
    "AND c.run_id = r.run_id AND c.completed_at IS NULL)"
)
LOCK_RUN = (
    "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ? "
    "RETURNING sealed_at, sealed_by, seal_reason"
)
_ENSURE_RUN = "INSERT INTO runs (scope, run_id, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING"


def run_lane(scope: str, run_id: str) -> Hold:
    """The audit lane of a run's own entries (not an operation's: ``/`` is in no operation
    id), so runs spread over the lanes instead of queueing on the operators' one."""
    return Hold(key=(scope, f"run/{run_id}"))


def call_record(r: Sequence[Any]) -> RunCallRecord:
    request = json.loads(r[1])
    completion = None if r[3] is None else RunCompletion(**json.loads(r[3]))
    deadline = request.pop("deadline")
    return RunCallRecord(
        scope=str(r[0]),
        call=RunCall(**request, deadline=None if deadline is None else float(deadline)),
        started_at=float(r[2]),
        completion=completion,
        completed_at=None if r[4] is None else float(r[4]),
        effects=int(r[5]),
    )


def _seal(scope: str, run_id: str, row: Sequence[Any]) -> RunSeal | None:
    if row[0] is None:
        return None
    return RunSeal(scope, run_id, str(row[1]), str(row[2]), float(row[0]))


def summary_from_row(r: Sequence[Any]) -> RunSummary:
    scope, run_id = str(r[0]), str(r[1])
    return RunSummary(
        scope=scope,
        run_id=run_id,
        created_at=float(r[2]),
        calls=int(r[3]),
        open_calls=int(r[8]),
        effects=int(r[4]),
        seal=_seal(scope, run_id, r[5:8]),
    )


class RunRoles(StoreHooks):
    """Run calls, seals and bound admissions (roles.Runs; receipts: store/_run_receipts.py)."""

    def _refusing(
        self, work: Callable[[], T], *, now: float, scope: str, what: Mapping[str, object]
    ) -> T:
        return refusing(self, work, now=now, scope=scope, what=what)

    # --- the journal ----------------------------------------------------------------------

    def record_run_call(
        self, scope: str, call: RunCall, *, now: float, actor: str
    ) -> tuple[RunCallRecord, bool]:
        scope = check_scope(scope)
        digest = call.digest()
        request = call.to_dict()

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunCallRecord, bool]:
            tx.write(_ENSURE_RUN, (scope, call.run_id, now))
            run = tx.one(LOCK_RUN, (scope, call.run_id))
            if run[0] is not None:
                raise RunSealed(
                    f"run {call.run_id!r} was sealed by {run[1]}: no call is recorded in it"
                )
            inserted = tx.rows(
                "INSERT INTO run_calls (scope, run_id, slot, call_id, kind, request, "
                "record_digest, deadline, started_at) VALUES (?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (
                    scope,
                    call.run_id,
                    call.slot,
                    call.call_id,
                    call.kind.value,
                    dumps(request),
                    digest,
                    call.deadline,
                    now,
                ),
            )
            if inserted:
                tx.write(
                    "UPDATE runs SET calls = calls + 1 WHERE scope = ? AND run_id = ?",
                    (scope, call.run_id),
                )
                tx.audit(
                    "run_call_recorded",
                    {**request, "record_digest": digest, "by": actor, **credential_marker(actor)},
                    now,
                    scope,
                )
                return RunCallRecord(scope, call, now, None, None, 0), True
            old = tx.one(
                f"SELECT record_digest, {CALL_COLUMNS} FROM run_calls "
                "WHERE scope = ? AND run_id = ? AND slot = ?",
                (scope, call.run_id, call.slot),
            )
            if old[0] == digest:
                return call_record(old[1:]), False
            raise RunCallConflict(
                f"slot {call.slot!r} of run {call.run_id!r} holds another call: a changed "
                "attempt in a recorded slot is never a new invocation"
            )

        return self._refusing(
            lambda: self._run(work, f"record run call {call.run_id}", run_lane(scope, call.run_id)),
            now=now,
            scope=scope,
            what={"action": "record_call", **call.ref.to_dict(), "by": actor},
        )

    def complete_run_call(
        self, scope: str, ref: RunCallRef, completion: RunCompletion, *, now: float, actor: str
    ) -> tuple[RunCallRecord, bool]:
        scope = check_scope(scope)
        digest = completion.digest()

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunCallRecord, bool]:
            # A late return is still written after a seal: a seal closes admission only. The
            # run's row orders it with admissions and snapshots of the run.
            tx.rows(LOCK_RUN, (scope, ref.run_id))
            found = tx.rows(
                f"UPDATE run_calls SET effects = effects WHERE scope = ? AND run_id = ? "
                f"AND slot = ? RETURNING call_id, completion_digest, {CALL_COLUMNS}",
                (scope, ref.run_id, ref.slot),
            )
            if not found or found[0][0] != ref.call_id:
                raise RunCallNotFound(_no_call(ref))
            record = call_record(found[0][2:])
            if found[0][1] is not None:
                if found[0][1] == digest:
                    return record, False
                raise RunCallConflict(
                    f"call {ref.call_id!r} already returned another result: a completion "
                    "is immutable"
                )
            tx.write(
                "UPDATE run_calls SET completion = ?, completion_digest = ?, completed_at = ? "
                "WHERE scope = ? AND run_id = ? AND slot = ?",
                (dumps(completion.to_dict()), digest, now, scope, ref.run_id, ref.slot),
            )
            tx.audit(
                "run_call_completed",
                {
                    **ref.to_dict(),
                    **completion.to_dict(),
                    "completion_digest": digest,
                    "by": actor,
                    **credential_marker(actor),
                },
                now,
                scope,
            )
            return RunCallRecord(
                scope, record.call, record.started_at, completion, now, record.effects
            ), True

        return self._refusing(
            lambda: self._run(work, f"complete run call {ref.run_id}", run_lane(scope, ref.run_id)),
            now=now,
            scope=scope,
            what={"action": "complete_call", **ref.to_dict(), "by": actor},
        )

    def get_run_call(self, scope: str, run_id: str, slot: str) -> RunCallRecord | None:
        rows = self._rows(
            f"SELECT {CALL_COLUMNS} FROM run_calls WHERE scope = ? AND run_id = ? AND slot = ?",
            (check_scope(scope), check_run_id(run_id), slot),
            "get_run_call",
        )
        return call_record(rows[0]) if rows else None

    def list_run_calls(
        self, scope: str, run_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[RunCallRecord]:
        after, limit = check_cursor(after, limit, most=MAX_LIST)
        rows = self._rows(
            f"SELECT {CALL_COLUMNS} FROM run_calls WHERE scope = ? AND run_id = ? "
            "AND slot > ? ORDER BY slot LIMIT ?",
            (check_scope(scope), check_run_id(run_id), after or "", limit),
            "list_run_calls",
        )
        return [call_record(r) for r in rows]

    # --- runs and seals -------------------------------------------------------------------

    def seal_run(
        self, scope: str, run_id: str, *, actor: str, reason: str, now: float
    ) -> tuple[RunSeal, bool]:
        check_seal_request(scope, run_id, actor, reason)

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunSeal, bool]:
            tx.write(_ENSURE_RUN, (scope, run_id, now))
            existing = _seal(scope, run_id, tx.one(LOCK_RUN, (scope, run_id)))
            if existing is not None:  # there is no reopen; sealing again changes nothing
                return existing, False
            tx.write(
                "UPDATE runs SET sealed_at = ?, sealed_by = ?, seal_reason = ? "
                "WHERE scope = ? AND run_id = ?",
                (now, actor, reason, scope, run_id),
            )
            tx.audit(
                "run_sealed",
                {"run_id": run_id, "by": actor, "reason": reason, **credential_marker(actor)},
                now,
                scope,
            )
            return RunSeal(scope, run_id, actor, reason, now), True

        return self._run(work, f"seal run {run_id}", run_lane(scope, run_id))

    def get_run(self, scope: str, run_id: str) -> RunSummary | None:
        rows = self._rows(
            f"SELECT {_RUN_COLUMNS} FROM runs r WHERE r.scope = ? AND r.run_id = ?",
            (check_scope(scope), check_run_id(run_id)),
            "get_run",
        )
        return summary_from_row(rows[0]) if rows else None

    def list_runs(
        self, scope: str | None = None, *, sealed: bool | None = None, limit: int = 100
    ) -> list[RunSummary]:
        """Runs, newest first; ``sealed`` filters (None: both)."""
        check_cursor(None, limit, most=MAX_LIST)
        terms, args = [], []
        if scope is not None:
            terms.append("r.scope = ?")
            args.append(check_scope(scope))
        if sealed is not None:
            terms.append("r.sealed_at IS NOT NULL" if sealed else "r.sealed_at IS NULL")
        where = f"WHERE {' AND '.join(terms)} " if terms else ""
        rows = self._rows(
            f"SELECT {_RUN_COLUMNS} FROM runs r {where}"
            "ORDER BY r.created_at DESC, r.scope, r.run_id LIMIT ?",
            (*args, limit),
            "list_runs",
        )
        return [summary_from_row(r) for r in rows]

    def count_open_runs(self) -> int:
        return int(self._rows("SELECT count(*) FROM runs WHERE sealed_at IS NULL")[0][0])

    def count_unresolved_provider_calls(self) -> int:
        """Model calls with no local return and no provider receipt."""
        return int(
            self._rows(
                "SELECT count(*) FROM run_calls c WHERE c.completed_at IS NULL "
                "AND c.kind = 'model' AND NOT EXISTS (SELECT 1 FROM provider_receipts p "
                "WHERE p.scope = c.scope AND p.run_id = c.run_id AND p.slot = c.slot)"
            )[0][0]
        )

    # --- bound admissions -----------------------------------------------------------------

    def journal_bound(
        self,
        new: NewOperation,
        path: Sequence[State],
        ref: RunCallRef,
        *,
        now: float,
        audit: Mapping[str, object] | None = None,
        guard: DispatchGuard | None = None,
    ) -> Journal:
        """:meth:`~effectgate.store.roles.LedgerWrites.journal` admitted against ``ref``.

        In ONE transaction: the run's row (refused if sealed), the operation's row (a
        replay of the same binding returns it, unless the run is sealed: then
        :class:`RunSealed` carries it), the call's row (refused unless it is this exact,
        unfinished tool call within its deadline), then the journal and the binding.
        """
        check_path(path)
        steps = list(path)
        scope = new.scope

        def work(tx: SharedTx, _: Operation | None) -> Journal:
            run = tx.rows(LOCK_RUN, (scope, ref.run_id))
            if not run:
                raise RunCallNotFound(f"no run {ref.run_id!r} in scope {scope!r}")
            sealed = run[0][0] is not None
            found = tx.rows(SELECT_OP, (scope, new.operation_id))
            if found:
                row = operation_from_row(found[0])
                if sealed:
                    raise RunSealed(
                        f"run {ref.run_id!r} is sealed: operation {new.operation_id!r} is "
                        f"returned as stored ({row.state.value}) and nothing is dispatched",
                        row=row,
                    )
                bound = tx.rows(
                    "SELECT run_id, slot, call_id FROM run_effects "
                    "WHERE scope = ? AND operation_id = ?",
                    (scope, new.operation_id),
                )
                if not bound or RunCallRef(*bound[0]) != ref:
                    where = RunCallRef(*bound[0]).to_dict() if bound else "no run call"
                    raise RunCallConflict(
                        f"operation {new.operation_id!r} was admitted against {where}, "
                        f"not {ref.to_dict()}"
                    )
                if row.fingerprint != new.fingerprint:
                    raise conflict(row, new.fingerprint)
                return Journal(row, False)
            if sealed:
                raise RunSealed(f"run {ref.run_id!r} is sealed: nothing more is admitted")
            call = tx.rows(
                "UPDATE run_calls SET effects = effects + 1 WHERE scope = ? AND run_id = ? "
                "AND slot = ? RETURNING call_id, kind, deadline, completed_at",
                (scope, ref.run_id, ref.slot),
            )
            if not call or call[0][0] != ref.call_id:
                raise RunCallNotFound(_no_call(ref))
            _, kind, deadline, completed_at = call[0]
            if kind != RunCallKind.TOOL.value:
                raise RunCallNotOpen(f"{_named(ref)} is a model call: effects come from tools")
            if completed_at is not None:
                raise RunCallNotOpen(f"{_named(ref)} has finished: it admits nothing more")
            if deadline is not None and now > float(deadline):
                raise RunCallNotOpen(f"{_named(ref)} is past its deadline")
            tx.write(
                "UPDATE runs SET effects = effects + 1 WHERE scope = ? AND run_id = ?",
                (scope, ref.run_id),
            )
            rest = guard  # what journal_new applies, once any recheck has run here
            if guard is not None and guard.recheck is not None:
                # Before the slot is charged: the token quoted the run's headroom without it.
                guard.recheck(tx, now)
                rest = replace(guard, recheck=None)
            # One tool-call slot per operation id, at its first admission (issue 14).
            admit_tool_slot(tx, scope, ref.run_id, new.operation_id, now)
            done = journal_new(
                tx, new, steps, rest, {**(audit or {}), "run_call": ref.to_dict()}, now=now
            )
            tx.write(
                "INSERT INTO run_effects (scope, operation_id, run_id, slot, call_id, "
                "admitted_at) VALUES (?,?,?,?,?,?)",
                (scope, new.operation_id, ref.run_id, ref.slot, ref.call_id, now),
            )
            return done

        hold = Hold(key=(scope, new.operation_id), shared_class=new.action)
        return self._refusing(
            lambda: self._run(work, f"admit {new.op_key}", hold),
            now=now,
            scope=scope,
            what={
                "action": "admit",
                "operation_id": new.operation_id,
                "fingerprint": new.fingerprint,
                **ref.to_dict(),
            },
        )

    def run_binding(self, scope: str, operation_id: str) -> RunCallRef | None:
        rows = self._rows(
            "SELECT run_id, slot, call_id FROM run_effects WHERE scope = ? AND operation_id = ?",
            (scope, operation_id),
            "run_binding",
        )
        return RunCallRef(*rows[0]) if rows else None


def _named(ref: RunCallRef) -> str:
    return f"call {ref.call_id!r} (slot {ref.slot!r} of run {ref.run_id!r})"


def _no_call(ref: RunCallRef) -> str:
    return f"no {_named(ref)} is journalled"


def refusing(
    hooks: StoreHooks, work: Callable[[], T], *, now: float, scope: str, what: Mapping[str, object]
) -> T:
    """Run ``work``; a refusal it raises is audited in its own transaction, then raised."""
    try:
        return work()
    except (RunError, IdempotencyConflict, BudgetError) as exc:
        error = exc.to_dict()
        op = what.get("operation_id")
        hooks._run(
            lambda tx, _: tx.audit(
                "run_refused",
                {**what, "error": error},
                now,
                scope,
                op if isinstance(op, str) else None,
            ),
            "audit a run refusal",
            Hold(key=(scope, op if isinstance(op, str) else None)),
        )
        raise
