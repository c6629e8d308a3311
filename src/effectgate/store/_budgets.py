"""The budgets role: run budgets and plan accounts with reservations, written once over the hooks.

Serialisation, the same on both dialects. A run budget lives on its own row, updated only
after the run's ``runs`` row is locked (the row every admission and the seal lock), so a tool
slot charged at admission queues with every other admission of that run. A plan account's
``plan_accounts`` row is updated first by every reservation and settlement of the plan, so
they queue on its row lock (SQLite: the one write lock); each then reads the plan's
reservations (at most 1,024) and decides with the pure functions of
:mod:`effectgate._core.reservations`. Racing processes therefore cannot overdraw.

Every change writes a chained audit entry in its transaction; a refusal rolls its transaction
back and writes one audit line (``budget_refused``) in its own, and no row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from effectgate._core.budgets import (
    Resources,
    RunBudget,
    RunBudgetState,
    RunUsage,
    charge_tokens,
    check_step,
    check_tool,
    output_limit,
)
from effectgate._core.reservations import (
    AccountSnapshot,
    PlanPolicy,
    Reservation,
    ReservationRequest,
    Settlement,
    account,
    admit,
    closing_charge,
    receipt_digest,
)
from effectgate._core.runs import check_run_id, check_scope
from effectgate.errors import (
    BudgetError,
    BudgetExceeded,
    InvalidBudget,
    ReservationConflict,
    ReservationNotFound,
)
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker, dumps

__all__ = ["BudgetRoles", "admit_tool_slot"]

T = TypeVar("T")

_BUDGET_COLUMNS = "limits, steps, tokens, reported_tokens, tool_calls, estimated"
_ACCOUNT_LOCK = (
    "UPDATE plan_accounts SET reservations = reservations WHERE scope = ? AND plan_id = ? "
    "RETURNING policy"
)
_RES_COLUMNS = "request, depth, created_at, charge, settled_at, receipt_digest"


def _state(scope: str, run_id: str, r: Sequence[Any]) -> RunBudgetState:
    usage = RunUsage(int(r[1]), int(r[2]), int(r[3]), int(r[4]), bool(r[5]))
    return RunBudgetState(scope, run_id, RunBudget.from_dict(json.loads(r[0])), usage)


def _reservation(r: Sequence[Any]) -> Reservation:
    charge = None if r[3] is None else Resources.from_dict(json.loads(r[3]))
    return Reservation(
        request=ReservationRequest.from_dict(json.loads(r[0])),
        depth=int(r[1]),
        created_at=float(r[2]),
        charge=charge,
        settled_at=None if r[4] is None else float(r[4]),
        receipt_digest=None if r[5] is None else str(r[5]),
    )


def _run_hold(scope: str, run_id: str) -> Hold:
    return Hold(key=(scope, f"run/{run_id}"))


def _plan_hold(scope: str, plan_id: str) -> Hold:
    return Hold(key=(scope, f"plan/{plan_id}"))


def _write_usage(tx: SharedTx, scope: str, run_id: str, u: RunUsage, now: float) -> None:
    tx.write(
        "UPDATE run_budgets SET steps = ?, tokens = ?, reported_tokens = ?, tool_calls = ?, "
        "estimated = ?, updated_at = ? WHERE scope = ? AND run_id = ?",
        (u.steps, u.tokens, u.reported_tokens, u.tool_calls, int(u.estimated), now, scope, run_id),
    )


def admit_tool_slot(
    tx: SharedTx, scope: str, run_id: str, operation_id: str, now: float
) -> RunBudgetState | None:
    """Consume one of the run's tool-call slots for ``operation_id``, in the caller's
    transaction (which holds the run's row). None: the run has no budget. Raises
    :class:`BudgetExceeded` naming the dimension; the caller rolls back and writes no row."""
    rows = tx.rows(
        f"SELECT {_BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?", (scope, run_id)
    )
    if not rows:
        return None
    state = _state(scope, run_id, rows[0])
    short = check_tool(state.budget, state.usage, now)
    if short is not None:
        raise BudgetExceeded(
            f"run {run_id!r} has no {short} left for operation {operation_id!r}", dimension=short
        )
    usage = RunUsage(
        state.usage.steps,
        state.usage.tokens,
        state.usage.reported_tokens,
        state.usage.tool_calls + 1,
        state.usage.estimated,
    )
    _write_usage(tx, scope, run_id, usage, now)
    tx.audit(
        "budget_tool_slot",
        {"run_id": run_id, "operation_id": operation_id, "tool_calls": usage.tool_calls},
        now,
        scope,
        operation_id,
    )
    return RunBudgetState(scope, run_id, state.budget, usage)


class BudgetRoles(StoreHooks):
    """Run budgets, plan accounts, reservations and settlements (roles.Budgets)."""

    def _refusing_budget(
        self, work: Callable[[], T], *, now: float, scope: str, what: Mapping[str, object]
    ) -> T:
        try:
            return work()
        except BudgetError as exc:
            error = exc.to_dict()
            self._run(
                lambda tx, _: tx.audit("budget_refused", {**what, "error": error}, now, scope),
                "audit a budget refusal",
                Hold(key=(scope, None)),
            )
            raise

    # --- one run --------------------------------------------------------------------------

    def set_run_budget(
        self, scope: str, run_id: str, budget: RunBudget, *, now: float, actor: str
    ) -> tuple[RunBudgetState, bool]:
        scope, run_id = check_scope(scope), check_run_id(run_id)
        limits = dumps(budget.to_dict())

        def work(tx: SharedTx, _: Operation | None) -> tuple[RunBudgetState, bool]:
            tx.write(
                "INSERT INTO runs (scope, run_id, created_at) VALUES (?,?,?) "
                "ON CONFLICT DO NOTHING",
                (scope, run_id, now),
            )
            tx.one(
                "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ? RETURNING 1",
                (scope, run_id),
            )
            inserted = tx.rows(
                "INSERT INTO run_budgets (scope, run_id, limits, created_at, updated_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                (scope, run_id, limits, now, now),
            )
            if inserted:
                tx.audit(
                    "run_budget_set",
                    {"run_id": run_id, **budget.to_dict(), "by": actor, **credential_marker(actor)},
                    now,
                    scope,
                )
                return RunBudgetState(scope, run_id, budget, RunUsage()), True
            state = _state(
                scope,
                run_id,
                tx.one(
                    f"SELECT {_BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
                    (scope, run_id),
                ),
            )
            if state.budget != budget:
                raise ReservationConflict(
                    f"run {run_id!r} already has another budget: a run's limits are fixed"
                )
            return state, False

        return self._refusing_budget(
            lambda: self._run(work, f"set budget of run {run_id}", _run_hold(scope, run_id)),
            now=now,
            scope=scope,
            what={"action": "set_run_budget", "run_id": run_id, "by": actor},
        )

    def run_budget(self, scope: str, run_id: str) -> RunBudgetState | None:
        rows = self._rows(
            f"SELECT {_BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
            (check_scope(scope), check_run_id(run_id)),
            "run_budget",
        )
        return _state(scope, run_id, rows[0]) if rows else None

    def _with_budget(
        self,
        scope: str,
        run_id: str,
        change: Callable[[SharedTx, RunBudgetState], tuple[RunUsage, Mapping[str, object]]],
        *,
        now: float,
        action: str,
    ) -> RunBudgetState:
        scope, run_id = check_scope(scope), check_run_id(run_id)

        def work(tx: SharedTx, _: Operation | None) -> RunBudgetState:
            tx.write(
                "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ?", (scope, run_id)
            )
            rows = tx.rows(
                f"SELECT {_BUDGET_COLUMNS} FROM run_budgets WHERE scope = ? AND run_id = ?",
                (scope, run_id),
            )
            if not rows:
                raise ReservationNotFound(f"run {run_id!r} has no budget in scope {scope!r}")
            state = _state(scope, run_id, rows[0])
            usage, detail = change(tx, state)
            _write_usage(tx, scope, run_id, usage, now)
            tx.audit(action, {"run_id": run_id, **detail, **usage.to_dict()}, now, scope)
            return RunBudgetState(scope, run_id, state.budget, usage)

        return self._refusing_budget(
            lambda: self._run(work, f"{action} {run_id}", _run_hold(scope, run_id)),
            now=now,
            scope=scope,
            what={"action": action, "run_id": run_id},
        )

    def begin_run_step(
        self, scope: str, run_id: str, *, now: float, configured_output: int = 0
    ) -> tuple[RunBudgetState, int]:
        """Charge one model step if the run may take one; the state and the output cap
        narrowed to the tokens left. Raises :class:`BudgetExceeded` naming the dimension."""

        def change(_: SharedTx, s: RunBudgetState) -> tuple[RunUsage, Mapping[str, object]]:
            if isinstance(configured_output, bool) or not isinstance(configured_output, int):
                raise InvalidBudget("configured_output must be a non-negative integer")
            if configured_output < 0:
                raise InvalidBudget("configured_output is negative: an output cap never is")
            short = check_step(s.budget, s.usage, now)
            if short is not None:
                raise BudgetExceeded(
                    f"run {run_id!r} has no {short} left for a step", dimension=short
                )
            u = s.usage
            return RunUsage(u.steps + 1, u.tokens, u.reported_tokens, u.tool_calls, u.estimated), {}

        state = self._with_budget(scope, run_id, change, now=now, action="run_step_begun")
        return state, output_limit(state.budget, configured_output, state.usage)

    def record_run_tokens(
        self, scope: str, run_id: str, reported: object, *, now: float
    ) -> RunBudgetState:
        """Charge one model call's reported tokens (None or invalid: pessimistically); the
        reported value is kept in the audit entry as evidence, unclamped."""
        evidence = reported if isinstance(reported, int | str | None) else repr(reported)[:200]

        def change(_: SharedTx, s: RunBudgetState) -> tuple[RunUsage, Mapping[str, object]]:
            after = charge_tokens(s.usage, reported, s.budget)
            over = bool(s.budget.max_tokens) and after.tokens > s.budget.max_tokens
            return after, {"reported": evidence, "overrun": over}

        return self._with_budget(scope, run_id, change, now=now, action="run_tokens_charged")

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
                work, f"open plan {policy.plan_id}", _plan_hold(scope, policy.plan_id)
            ),
            now=now,
            scope=scope,
            what={"action": "open_plan_account", "plan_id": policy.plan_id, "by": actor},
        )

    def _snapshot_in(self, tx: SharedTx, scope: str, plan_id: str) -> AccountSnapshot:
        found = tx.rows(_ACCOUNT_LOCK, (scope, plan_id))
        if not found:
            raise ReservationNotFound(f"no plan account {plan_id!r} in scope {scope!r}")
        policy = PlanPolicy.from_dict(json.loads(found[0][0]))
        rows = tx.rows(
            f"SELECT {_RES_COLUMNS} FROM budget_reservations WHERE scope = ? AND plan_id = ?",
            (scope, plan_id),
        )
        return account(policy, [_reservation(r) for r in rows])

    def reserve(
        self, scope: str, request: ReservationRequest, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Admit ``request`` against the root account and its immediate parent; a replay of
        the same id and request returns the stored one (``False``)."""
        scope = check_scope(scope)
        digest = request.digest()

        def work(tx: SharedTx, _: Operation | None) -> tuple[Reservation, bool]:
            snap = self._snapshot_in(tx, scope, request.plan_id)
            old = tx.rows(
                f"SELECT {_RES_COLUMNS}, request_digest FROM budget_reservations "
                "WHERE scope = ? AND plan_id = ? AND reservation_id = ?",
                (scope, request.plan_id, request.reservation_id),
            )
            if old:
                if old[0][6] != digest:
                    raise ReservationConflict(
                        f"reservation {request.reservation_id!r} holds another request: a "
                        "changed request is never a replay"
                    )
                return _reservation(old[0][:6]), False
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
                work, f"reserve in {request.plan_id}", _plan_hold(scope, request.plan_id)
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
        snap = self.plan_account(scope, plan_id)
        stored = {r.request.reservation_id: r for r in _walk(snap)}
        at = stored.get(reservation_id)
        if at is None:
            raise ReservationNotFound(f"no reservation {reservation_id!r} in plan {plan_id!r}")
        if at.settled:
            raise BudgetExceeded(f"reservation {reservation_id!r} has settled", dimension="settled")
        while at is not None:
            if now >= at.request.deadline:
                raise BudgetExceeded(
                    f"reservation {at.request.reservation_id!r} is past its deadline",
                    dimension="deadline",
                )
            at = stored.get(at.request.parent_id or "")
        if now >= snap.policy.deadline:
            raise BudgetExceeded(f"plan {plan_id!r} is past its deadline", dimension="deadline")

    def settle(
        self, scope: str, plan_id: str, settlement: Settlement, *, now: float, actor: str
    ) -> tuple[Reservation, bool]:
        """Settle a leaf from its usage or close a branch from its children; the stored
        reservation with its charge and receipt digest (``False``: a replay)."""
        scope = check_scope(scope)
        sdigest = settlement.digest()

        def work(tx: SharedTx, _: Operation | None) -> tuple[Reservation, bool]:
            snap = self._snapshot_in(tx, scope, plan_id)
            rows = tx.rows(
                f"SELECT {_RES_COLUMNS}, settlement_digest FROM budget_reservations "
                "WHERE scope = ? AND plan_id = ? AND reservation_id = ?",
                (scope, plan_id, settlement.reservation_id),
            )
            if not rows:
                raise ReservationNotFound(
                    f"no reservation {settlement.reservation_id!r} in plan {plan_id!r}"
                )
            res = _reservation(rows[0][:6])
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

        return self._refusing_budget(
            lambda: self._run(work, f"settle in {plan_id}", _plan_hold(scope, plan_id)),
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
            f"SELECT {_RES_COLUMNS} FROM budget_reservations WHERE scope = ? AND plan_id = ?",
            (scope, plan_id),
            "plan_account",
        )
        policy = PlanPolicy.from_dict(json.loads(found[0][0]))
        return account(policy, [_reservation(r) for r in rows])

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


def _walk(snap: AccountSnapshot) -> list[Reservation]:
    out, todo = [], list(snap.roots)
    while todo:
        n = todo.pop()
        out.append(n.reservation)
        todo.extend(n.children)
    return out
