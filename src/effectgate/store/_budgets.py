"""The budgets role: run budgets (store/_run_budgets.py), runs admitted under a plan's
reservations (store/_run_plans.py) and plan accounts with reservations (here), written once over
the hooks.

A plan account's ``plan_accounts`` row is updated first by every reservation and settlement of
the plan, so they queue on its row lock (SQLite: the one write lock); each then reads the plan's
reservations (at most 1,024) and decides with the pure functions of
:mod:`effectgate._core.reservations`. Racing processes therefore cannot overdraw.

Every change writes a chained audit entry in its transaction; a refusal rolls its transaction
back and writes one audit line (``budget_refused``) in its own, and no row.
"""

from __future__ import annotations

import json

from effectgate._core.reservations import (
    AccountSnapshot,
    PlanPolicy,
    Reservation,
    ReservationRequest,
    Settlement,
    account,
    admit,
    check_open,
)
from effectgate._core.runs import check_scope
from effectgate.errors import ReservationConflict, ReservationNotFound
from effectgate.store._plan_rows import (
    RES_COLUMNS,
    plan_hold,
    reservation_from_row,
    settle_in,
    snapshot_in,
)
from effectgate.store._run_budgets import RunBudgetRoles, admit_tool_slot
from effectgate.store._run_plans import RunPlanRoles
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker, dumps

# admit_tool_slot moved to store/_run_budgets.py; the old import path keeps working.
__all__ = ["BudgetRoles", "PlanRoles", "admit_tool_slot"]


class PlanRoles(RunBudgetRoles):
    """Plan accounts, reservations and settlements (part of roles.Budgets)."""

    # --- plan accounts --------------------------------------------------------------------

    def open_plan_account(
        self, scope: str, policy: PlanPolicy, *, now: float, actor: str
    ) -> tuple[PlanPolicy, bool]:
        scope = check_scope(scope)
        text = dumps(policy.to_dict())

        def work(tx: SharedTx, _: Operation | None) -> tuple[PlanPolicy, bool]:
            inserted = tx.rows(
                "INSERT INTO plan_accounts (scope, plan_id, policy, policy_digest, created_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                (scope, policy.plan_id, text, policy.digest(), now),
            )
            if inserted:
                tx.audit(
                    "plan_account_opened",
                    {**policy.to_dict(), "by": actor, **credential_marker(actor)},
                    now,
                    scope,
                )
                return policy, True
            old = tx.one(
                "SELECT policy_digest FROM plan_accounts WHERE scope = ? AND plan_id = ?",
                (scope, policy.plan_id),
            )
            if old[0] != policy.digest():
                raise ReservationConflict(
                    f"plan {policy.plan_id!r} already has another account: it is fixed for "
                    "the plan's lifetime"
                )
            return policy, False

        return self._refusing_budget(
            lambda: self._run(
                work, f"open plan {policy.plan_id}", plan_hold(scope, policy.plan_id)
            ),
            now=now,
            scope=scope,
            what={"action": "open_plan_account", "plan_id": policy.plan_id, "by": actor},
        )

    def reserve(
        self, scope: str, request: ReservationRequest, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Admit ``request`` against the root account and its immediate parent; a replay of
        the same id and request returns the stored one (``False``)."""
        scope = check_scope(scope)
        digest = request.digest()

        def work(tx: SharedTx, _: Operation | None) -> tuple[Reservation, bool]:
            snap = snapshot_in(tx, scope, request.plan_id)
            old = tx.rows(
                f"SELECT {RES_COLUMNS}, request_digest FROM budget_reservations "
                "WHERE scope = ? AND plan_id = ? AND reservation_id = ?",
                (scope, request.plan_id, request.reservation_id),
            )
            if old:
                if old[0][6] != digest:
                    raise ReservationConflict(
                        f"reservation {request.reservation_id!r} holds another request: a "
                        "changed request is never a replay"
                    )
                return reservation_from_row(old[0][:6]), False
            depth = admit(snap.policy, snap, request, now)
            tx.write(
                "INSERT INTO budget_reservations (scope, plan_id, reservation_id, parent_id, "
                "kind, depth, request, request_digest, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    scope,
                    request.plan_id,
                    request.reservation_id,
                    request.parent_id,
                    request.kind.value,
                    depth,
                    dumps(request.to_dict()),
                    digest,
                    now,
                ),
            )
            tx.write(
                "UPDATE plan_accounts SET reservations = reservations + 1 "
                "WHERE scope = ? AND plan_id = ?",
                (scope, request.plan_id),
            )
            tx.audit(
                "reservation_admitted",
                {**request.to_dict(), "request_digest": digest, "depth": depth, "by": actor},
                now,
                scope,
            )
            return Reservation(request, depth, now), True

        return self._refusing_budget(
            lambda: self._run(
                work, f"reserve in {request.plan_id}", plan_hold(scope, request.plan_id)
            ),
            now=now,
            scope=scope,
            what={
                "action": "reserve",
                "plan_id": request.plan_id,
                "reservation_id": request.reservation_id,
                "request_digest": digest,
                "by": actor,
            },
        )

    def check_reservation(
        self, scope: str, plan_id: str, reservation_id: str, *, now: float
    ) -> None:
        """Refuse further work under an open reservation past its (or an ancestor's, or the
        plan's) deadline, or under a settled one. Grants nothing."""
        check_open(self.plan_account(scope, plan_id), reservation_id, now)

    def settle(
        self, scope: str, plan_id: str, settlement: Settlement, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Settle a leaf from its usage or close a branch from its children; the stored
        reservation with its charge and receipt digest (``False``: a replay)."""
        scope = check_scope(scope)
        sdigest = settlement.digest()

        def work(tx: SharedTx, _: Operation | None) -> tuple[Reservation, bool]:
            return settle_in(tx, scope, plan_id, settlement, now=now, actor=actor)

        return self._refusing_budget(
            lambda: self._run(work, f"settle in {plan_id}", plan_hold(scope, plan_id)),
            now=now,
            scope=scope,
            what={
                "action": "settle",
                "plan_id": plan_id,
                "reservation_id": settlement.reservation_id,
                "settlement_digest": sdigest,
                "by": actor,
            },
        )

    def plan_account(self, scope: str, plan_id: str) -> AccountSnapshot:
        """The account's tree, used and remaining. Two reads, no lock: the policy never
        changes, and the reservations come from one statement."""
        scope = check_scope(scope)
        found = self._rows(
            "SELECT policy FROM plan_accounts WHERE scope = ? AND plan_id = ?",
            (scope, plan_id),
            "plan_account",
        )
        if not found:
            raise ReservationNotFound(f"no plan account {plan_id!r} in scope {scope!r}")
        rows = self._rows(
            f"SELECT {RES_COLUMNS} FROM budget_reservations WHERE scope = ? AND plan_id = ?",
            (scope, plan_id),
            "plan_account",
        )
        policy = PlanPolicy.from_dict(json.loads(found[0][0]))
        return account(policy, [reservation_from_row(r) for r in rows])

    def list_plan_accounts(
        self, scope: str | None = None, *, limit: int = 100
    ) -> list[tuple[str, str]]:
        """``(scope, plan_id)`` of plan accounts, newest first (``scope`` filters)."""
        where, args = ("WHERE scope = ? ", (check_scope(scope),)) if scope else ("", ())
        rows = self._rows(
            f"SELECT scope, plan_id FROM plan_accounts {where}"
            "ORDER BY created_at DESC, scope, plan_id LIMIT ?",
            (*args, max(1, min(int(limit), 1000))),
            "list_plan_accounts",
        )
        return [(str(r[0]), str(r[1])) for r in rows]


class BudgetRoles(RunPlanRoles, PlanRoles):
    """Run budgets, runs under reservations, plan accounts, reservations and settlements
    (roles.Budgets)."""
