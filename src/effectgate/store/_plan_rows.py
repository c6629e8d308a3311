"""A plan account's rows, shared by the plan roles (store/_budgets.py) and the runs admitted
under its reservations (store/_run_plans.py): the account's lock, its snapshot, settlement.

Every reservation and settlement of a plan first updates the plan's ``plan_accounts`` row
(:data:`ACCOUNT_LOCK`), so they queue on its row lock (SQLite: the one write lock).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from effectgate._core.budgets import Resources
from effectgate._core.reservations import (
    AccountSnapshot,
    PlanPolicy,
    Reservation,
    ReservationRequest,
    Settlement,
    account,
    closing_charge,
    receipt_digest,
)
from effectgate.errors import ReservationConflict, ReservationNotFound
from effectgate.store._hooks import Hold
from effectgate.store._tx import SharedTx
from effectgate.store.base import dumps

__all__ = [
    "ACCOUNT_LOCK",
    "RES_COLUMNS",
    "plan_hold",
    "reservation_from_row",
    "settle_in",
    "snapshot_in",
    "walk",
]

ACCOUNT_LOCK = (
    "UPDATE plan_accounts SET reservations = reservations WHERE scope = ? AND plan_id = ? "
    "RETURNING policy"
)
RES_COLUMNS = "request, depth, created_at, charge, settled_at, receipt_digest"


def reservation_from_row(r: Sequence[Any]) -> Reservation:
    charge = None if r[3] is None else Resources.from_dict(json.loads(r[3]))
    return Reservation(
        request=ReservationRequest.from_dict(json.loads(r[0])),
        depth=int(r[1]),
        created_at=float(r[2]),
        charge=charge,
        settled_at=None if r[4] is None else float(r[4]),
        receipt_digest=None if r[5] is None else str(r[5]),
    )


def plan_hold(scope: str, plan_id: str) -> Hold:
    return Hold(key=(scope, f"plan/{plan_id}"))


def snapshot_in(tx: SharedTx, scope: str, plan_id: str) -> AccountSnapshot:
    found = tx.rows(ACCOUNT_LOCK, (scope, plan_id))
    if not found:
        raise ReservationNotFound(f"no plan account {plan_id!r} in scope {scope!r}")
    policy = PlanPolicy.from_dict(json.loads(found[0][0]))
    rows = tx.rows(
        f"SELECT {RES_COLUMNS} FROM budget_reservations WHERE scope = ? AND plan_id = ?",
        (scope, plan_id),
    )
    return account(policy, [reservation_from_row(r) for r in rows])


def settle_in(
    tx: SharedTx, scope: str, plan_id: str, settlement: Settlement, *, now: float, actor: str
) -> tuple[Reservation, bool]:
    """Settle in ``tx`` (which must not hold the plan's row yet: this locks it first)."""
    sdigest = settlement.digest()
    snap = snapshot_in(tx, scope, plan_id)
    # The run admitted under the leaf admits nothing more once it settles. Taken before the
    # leaf's row (the lock order of store/_run_plans.py); a refusal rolls it back.
    tx.write(
        "UPDATE run_budgets SET settled_at = ? WHERE scope = ? AND plan_id = ? "
        "AND reservation_id = ? AND settled_at IS NULL",
        (now, scope, plan_id, settlement.reservation_id),
    )
    rows = tx.rows(
        f"SELECT {RES_COLUMNS}, settlement_digest FROM budget_reservations "
        "WHERE scope = ? AND plan_id = ? AND reservation_id = ?",
        (scope, plan_id, settlement.reservation_id),
    )
    if not rows:
        raise ReservationNotFound(
            f"no reservation {settlement.reservation_id!r} in plan {plan_id!r}"
        )
    res = reservation_from_row(rows[0][:6])
    if res.settled:
        if rows[0][6] == sdigest:
            return res, False
        raise ReservationConflict(
            f"reservation {settlement.reservation_id!r} already settled otherwise: a "
            "settlement is final"
        )
    charge = closing_charge(snap, res, settlement)
    receipt = receipt_digest(settlement, charge, now)
    tx.write(
        "UPDATE budget_reservations SET settlement = ?, settlement_digest = ?, "
        "charge = ?, settled_at = ?, receipt_digest = ? "
        "WHERE scope = ? AND plan_id = ? AND reservation_id = ?",
        (
            dumps(settlement.to_dict()),
            sdigest,
            dumps(charge.to_dict()),
            now,
            receipt,
            scope,
            plan_id,
            settlement.reservation_id,
        ),
    )
    tx.audit(
        "reservation_settled",
        {
            "plan_id": plan_id,
            **settlement.to_dict(),
            "charge": charge.to_dict(),
            "receipt_digest": receipt,
            "by": actor,
        },
        now,
        scope,
    )
    return Reservation(res.request, res.depth, res.created_at, charge, now, receipt), True


def walk(snap: AccountSnapshot) -> list[Reservation]:
    out, todo = [], list(snap.roots)
    while todo:
        n = todo.pop()
        out.append(n.reservation)
        todo.extend(n.children)
    return out
