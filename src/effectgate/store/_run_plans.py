"""Runs admitted under a plan's leaf reservations, and the value dimension at dispatch.

:meth:`RunPlanRoles.admit_run` gives a run the budget of one open leaf (one run per leaf) and
records the leaf on the run's ``run_budgets`` row; the run's steps, tokens and tool slots are
then checked by the run budget as always. :meth:`RunPlanRoles.settle_run` settles the leaf from
the run's stored usage (:func:`~effectgate._core.run_value.run_settlement`); from then on the
run admits nothing more (any settlement of the leaf marks its run settled).

:func:`charge_run_value` is the value dimension's check, inside the dispatch transaction. Lock
order, the same everywhere, so no two paths wait on each other in a cycle: a settlement takes
the plan's row, then the run's budget row, then the leaf's row; a dispatch holds its class and
operation locks and then takes the leaf's row (never a run's), so value charges of one leaf
queue and a settlement waits for a dispatch in flight and then reads what it charged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from effectgate._core.budgets import RunBudgetState
from effectgate._core.reservations import PlanPolicy, Reservation, check_open
from effectgate._core.run_value import (
    LeafValue,
    RunLink,
    run_budget_for,
    run_settlement,
    value_charge,
)
from effectgate._core.runs import check_run_id, check_scope
from effectgate.errors import ReservationConflict, ReservationNotFound
from effectgate.store._plan_rows import ACCOUNT_LOCK, plan_hold, settle_in, snapshot_in
from effectgate.store._run_budgets import (
    BUDGET_COLUMNS,
    RunBudgetRoles,
    budget_state,
    ensure_locked_run,
)
from effectgate.store._tx import SharedTx
from effectgate.store._value_record import ValueRecordRoles, name_run, run_value
from effectgate.store.base import Operation, credential_marker, dumps

__all__ = ["RunPlanRoles", "ValueRefusal", "charge_run_value"]

_LINK = "SELECT plan_id, reservation_id, settled_at FROM run_budgets WHERE scope = ? AND run_id = ?"


_LEAF = (
    "SELECT b.plan_id, b.reservation_id, r.request, r.settled_at, p.policy FROM run_budgets b "
    "JOIN budget_reservations r ON r.scope = b.scope AND r.plan_id = b.plan_id "
    "AND r.reservation_id = b.reservation_id "
    "JOIN plan_accounts p ON p.scope = b.scope AND p.plan_id = b.plan_id "
    "WHERE b.scope = ? AND b.run_id = ? AND b.reservation_id IS NOT NULL"
)


def _link(scope: str, run_id: str, r: Sequence[Any]) -> RunLink | None:
    if r[0] is None:
        return None
    return RunLink(scope, run_id, str(r[0]), str(r[1]), None if r[2] is None else float(r[2]))


class ValueRefusal(Exception):
    """Why the value check refused a dispatch (``dimension``: ``value_micros`` or
    ``settled``); the caller turns it into the pipeline's last-moment refusal."""

    def __init__(self, reason: str, dimension: str) -> None:
        super().__init__(reason)
        self.dimension = dimension


def charge_run_value(
    tx: SharedTx, op: Operation, now: float, *, bound_to: str | None = None
) -> None:
    """Charge ``op``'s declared value to its run's leaf, in the dispatch transaction that has
    just recorded the dispatch (``dispatch_log``). ``bound_to``: the operation whose run is
    charged (a continuation is charged to its original's run, docs/continuations.md); by
    default ``op`` itself. Nothing for an operation bound to no run admitted under a
    reservation (one primary-key read), or under a plan that does not bound value. Raises
    :class:`ValueRefusal`: the leaf has settled, the class has no value measure, or the value
    does not fit what the leaf allocates."""
    bound = tx.rows(
        "SELECT b.run_id, b.plan_id, b.reservation_id FROM run_effects e JOIN run_budgets b "
        "ON b.scope = e.scope AND b.run_id = e.run_id "
        "WHERE e.scope = ? AND e.operation_id = ? AND b.reservation_id IS NOT NULL",
        (op.scope, op.operation_id if bound_to is None else bound_to),
    )
    if not bound:
        return
    run_id, plan_id, reservation_id = (str(v) for v in bound[0])
    # The leaf's row: value charges of one leaf queue here.
    leaf = tx.rows(
        "UPDATE budget_reservations SET depth = depth "
        "WHERE scope = ? AND plan_id = ? AND reservation_id = ? RETURNING request, settled_at",
        (op.scope, plan_id, reservation_id),
    )
    if not leaf or leaf[0][1] is not None:
        raise ValueRefusal(
            f"run {run_id!r}'s reservation {reservation_id!r} has settled", "settled"
        )
    policy = PlanPolicy.from_dict(
        json.loads(
            tx.one(
                "SELECT policy FROM plan_accounts WHERE scope = ? AND plan_id = ?",
                (op.scope, plan_id),
            )[0]
        )
    )
    if not policy.value_bound:
        return
    entry = tx.rows(
        "SELECT value_micros FROM dispatch_log WHERE action = ? AND at = ? AND op_key = ?",
        (op.action, now, op.op_key),
    )
    if not entry:  # shadowed: nothing is dispatched, so nothing is charged
        return
    allocation = json.loads(leaf[0][0])["allocation"].get("value_micros", 0)
    value = None if entry[0][0] is None else int(entry[0][0])
    charge = value_charge(value=value, spent=run_value(tx, op.scope, run_id), allocation=allocation)
    if charge.refused is not None:
        raise ValueRefusal(
            f"run {run_id!r} under {reservation_id!r}: {charge.refused}", "value_micros"
        )
    name_run(tx, op.action, now, op.op_key, op.scope, run_id)


class RunPlanRoles(ValueRecordRoles, RunBudgetRoles):
    """Runs admitted under plan reservations (part of roles.Budgets)."""

    def admit_run(
        self, scope: str, run_id: str, plan_id: str, reservation_id: str, *, now: float, actor: str
    ) -> tuple[RunLink, bool]:
        """Admit ``run_id`` under the open leaf ``reservation_id``: the run's budget becomes the
        leaf's allocation. The same again is a replay (``False``); a run already budgeted
        otherwise, or a leaf already carrying another run, is a conflict."""
        scope, run_id = check_scope(scope), check_run_id(run_id)

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunLink, bool]:
            snap = snapshot_in(tx, scope, plan_id)
            res = check_open(snap, reservation_id, now)
            budget = run_budget_for(res.request)
            ensure_locked_run(tx, scope, run_id, now)
            old = tx.rows(_LINK, (scope, run_id))
            if old:
                link = _link(scope, run_id, old[0])
                if link is not None and (link.plan_id, link.reservation_id) == (
                    plan_id,
                    reservation_id,
                ):
                    return link, False
                raise ReservationConflict(
                    f"run {run_id!r} already has "
                    + ("its own budget" if link is None else f"reservation {link.reservation_id!r}")
                    + ": a run's limits are fixed"
                )
            taken = tx.rows(
                "SELECT run_id FROM run_budgets WHERE scope = ? AND plan_id = ? "
                "AND reservation_id = ?",
                (scope, plan_id, reservation_id),
            )
            if taken:
                raise ReservationConflict(
                    f"reservation {reservation_id!r} already carries run {taken[0][0]!r}"
                )
            tx.write(
                "INSERT INTO run_budgets (scope, run_id, limits, created_at, updated_at, plan_id, "
                "reservation_id) VALUES (?,?,?,?,?,?,?)",
                (scope, run_id, dumps(budget.to_dict()), now, now, plan_id, reservation_id),
            )
            tx.audit(
                "run_admitted",
                {
                    "run_id": run_id,
                    "plan_id": plan_id,
                    "reservation_id": reservation_id,
                    **budget.to_dict(),
                    "by": actor,
                    **credential_marker(actor),
                },
                now,
                scope,
            )
            return RunLink(scope, run_id, plan_id, reservation_id), True

        return self._refusing_budget(
            lambda: self._run(work, f"admit run {run_id}", plan_hold(scope, plan_id)),
            now=now,
            scope=scope,
            what={
                "action": "admit_run",
                "run_id": run_id,
                "plan_id": plan_id,
                "reservation_id": reservation_id,
                "by": actor,
            },
        )

    def run_link(self, scope: str, run_id: str) -> RunLink | None:
        """The leaf reservation ``run_id`` was admitted under (None: none)."""
        scope, run_id = check_scope(scope), check_run_id(run_id)
        rows = self._rows(_LINK, (scope, run_id), "run_link")
        return _link(scope, run_id, rows[0]) if rows else None

    def leaf_value(self, scope: str, run_id: str) -> LeafValue | None:
        """What :func:`charge_run_value` reads of the run's leaf, read only (evaluate)."""
        rows = self._rows(_LEAF, (check_scope(scope), check_run_id(run_id)), "leaf_value")
        if not rows:
            return None
        plan_id, reservation_id, request, settled_at, policy = rows[0]
        return LeafValue(
            str(plan_id),
            str(reservation_id),
            int(json.loads(request)["allocation"].get("value_micros", 0)),
            self.run_dispatched_value(scope, run_id),
            settled_at is not None,
            PlanPolicy.from_dict(json.loads(policy)).value_bound,
        )

    def settle_run(
        self, scope: str, run_id: str, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Settle the leaf ``run_id`` was admitted under from the run's stored usage and the
        value its effects dispatched; the stored reservation (``False``: a replay)."""
        scope, run_id = check_scope(scope), check_run_id(run_id)
        link = self.run_link(scope, run_id)
        if link is None:
            raise ReservationNotFound(f"run {run_id!r} was admitted under no reservation")

        def work(tx: SharedTx, _: Operation | None) -> tuple[Reservation, bool]:
            found = tx.rows(ACCOUNT_LOCK, (scope, link.plan_id))
            if not found:
                raise ReservationNotFound(f"no plan account {link.plan_id!r} in scope {scope!r}")
            policy = PlanPolicy.from_dict(json.loads(found[0][0]))
            row = tx.one(
                f"UPDATE run_budgets SET updated_at = updated_at WHERE scope = ? AND run_id = ? "
                f"RETURNING {BUDGET_COLUMNS}",
                (scope, run_id),
            )
            state: RunBudgetState = budget_state(scope, run_id, row)
            leaf = tx.one(
                "UPDATE budget_reservations SET depth = depth "
                "WHERE scope = ? AND plan_id = ? AND reservation_id = ? RETURNING request",
                (scope, link.plan_id, link.reservation_id),
            )
            snap = snapshot_in(tx, scope, link.plan_id)
            stored = _stored(snap.roots, link.reservation_id)
            if stored is None:
                raise ReservationNotFound(f"no reservation {link.reservation_id!r}")
            del leaf  # locked above; the request comes from the snapshot
            value = run_value(tx, scope, run_id) if policy.value_bound else 0
            settlement = run_settlement(
                stored.request,
                state.usage,
                value=value,
                value_bound=policy.value_bound,
                receipt=f"run {run_id}",
            )
            return settle_in(tx, scope, link.plan_id, settlement, now=now, actor=actor)

        return self._refusing_budget(
            lambda: self._run(work, f"settle run {run_id}", plan_hold(scope, link.plan_id)),
            now=now,
            scope=scope,
            what={"action": "settle_run", "run_id": run_id, "plan_id": link.plan_id, "by": actor},
        )


def _stored(nodes: Sequence[Any], reservation_id: str) -> Reservation | None:
    todo = list(nodes)
    while todo:
        n = todo.pop()
        if n.reservation.request.reservation_id == reservation_id:
            return n.reservation  # type: ignore[no-any-return]
        todo.extend(n.children)
    return None
