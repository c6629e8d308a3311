"""A plan's shared account as values (pure, no I/O): reservations, settlement, accounting.

A **plan account** fixes limits in six dimensions (:class:`~._core.budgets.Resources`), a
deadline, the plan's digest and either a price-table revision (money bounds need price data)
or an explicit ``token_only`` flag that disables the money ceiling. A **reservation** is a leaf
(capacity an executor spends) or a branch (capacity delegated to children). Each one *holds*:

- an open leaf: its allocation;
- a settled leaf: its settlement charge (known unused capacity refunded; an unknown dimension
  keeps its allocation or the observed minimum, whichever is larger; an overrun is kept);
- an open branch: its allocation, or its own fan-out slot plus its children's holds where
  those are larger (a child's overrun reaches every ancestor at once);
- a closed branch: its own fan-out slot plus its children's stored charges, once every child
  has settled.

Every hold has at least one fan-out slot: a branch's allocation covers its own slot and its
children's, so a branch allocated three fan-out slots can hold two children. The account's
use is the sum of its top-level holds; a new reservation is admitted only when it fits both
that and its immediate parent's allocation. Sums saturate; an overflowed sum refuses
admission instead of wrapping.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from effectgate._core.budgets import DIMENSIONS, Resources, total
from effectgate._core.plan_values import (
    MAX_DEPTH,
    MAX_RESERVATIONS,
    OWN_SLOT,
    PlanPolicy,
    Reservation,
    ReservationKind,
    ReservationRequest,
    Settlement,
    receipt_digest,
)
from effectgate.errors import (
    BudgetExceeded,
    InvalidBudget,
    ReservationConflict,
    ReservationNotFound,
    SettlementOutOfOrder,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_RESERVATIONS",
    "OWN_SLOT",
    "AccountNode",
    "AccountSnapshot",
    "PlanPolicy",
    "Reservation",
    "ReservationKind",
    "ReservationRequest",
    "Settlement",
    "account",
    "admit",
    "check_open",
    "closing_charge",
    "receipt_digest",
    "settle_charge",
]


def settle_charge(request: ReservationRequest, s: Settlement) -> Resources:
    """A leaf's charge: known usage exactly (an overrun kept, unused capacity refunded); an
    unknown dimension its allocation or observed minimum, whichever is larger; fan-out >= 1."""
    if request.kind is not ReservationKind.LEAF:
        raise InvalidBudget("a branch closes from its children's charges, not from usage")
    out: dict[str, int] = {}
    for d in DIMENSIONS:
        allocated = getattr(request.allocation, d)
        if d in s.known:
            out[d] = getattr(s.usage, d)
        else:
            seen = 0 if s.minimum is None else getattr(s.minimum, d)
            out[d] = max(allocated, seen)
    return Resources(**out).with_fan_out()


# --- accounting -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccountNode:
    reservation: Reservation
    holds: Resources
    children: tuple[AccountNode, ...]

    def to_dict(self) -> dict[str, Any]:
        r = self.reservation
        return {
            "reservation_id": r.request.reservation_id,
            "kind": r.request.kind.value,
            "task_id": r.request.task_id,
            "settled": r.settled,
            "allocation": r.request.allocation.to_dict(),
            "holds": self.holds.to_dict(),
            "children": [c.to_dict() for c in self.children],
        }


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """A plan account's conservative charges: ``used`` is the sum of its top-level holds."""

    policy: PlanPolicy
    used: Resources
    overflow: bool
    reservations: int
    roots: tuple[AccountNode, ...]

    def remaining(self) -> dict[str, int | None]:
        """Per dimension what is left (None: not bounded, i.e. money when token-only)."""
        return {
            d: None
            if d in self.policy.skip
            else max(getattr(self.policy.limits, d) - getattr(self.used, d), 0)
            for d in DIMENSIONS
        }

    def split(self) -> tuple[Resources, Resources]:
        """``used`` split into what settled top-level reservations were charged and what open
        ones still hold (reserved)."""
        settled = total([n.holds for n in self.roots if n.reservation.settled])[0]
        reserved = total([n.holds for n in self.roots if not n.reservation.settled])[0]
        return settled, reserved

    def to_dict(self) -> dict[str, Any]:
        settled, reserved = self.split()
        return {
            "plan": self.policy.to_dict(),
            "used": self.used.to_dict(),
            "settled": settled.to_dict(),
            "reserved": reserved.to_dict(),
            "remaining": self.remaining(),
            "overflow": self.overflow,
            "reservations": self.reservations,
            "tree": [n.to_dict() for n in self.roots],
        }


def _children(reservations: Iterable[Reservation]) -> dict[str | None, list[Reservation]]:
    out: dict[str | None, list[Reservation]] = {}
    for r in reservations:
        out.setdefault(r.request.parent_id, []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.request.reservation_id)
    return out


def account(policy: PlanPolicy, reservations: Iterable[Reservation]) -> AccountSnapshot:
    """The account's tree and conservative use (see the module docstring)."""
    by_parent = _children(reservations)
    overflow = False

    def node(r: Reservation) -> AccountNode:
        nonlocal overflow
        kids = tuple(node(c) for c in by_parent.get(r.request.reservation_id, []))
        if r.charge is not None:
            holds = r.charge
        elif r.request.kind is ReservationKind.LEAF:
            holds = r.request.allocation.with_fan_out()
        else:
            under, over = total([OWN_SLOT, *(k.holds for k in kids)])
            overflow = overflow or over
            holds = r.request.allocation.max(under)
        return AccountNode(r, holds, kids)

    roots = tuple(node(r) for r in by_parent.get(None, []))
    used, over = total([n.holds for n in roots])
    count = sum(len(rs) for rs in by_parent.values())
    return AccountSnapshot(policy, used, overflow or over, count, roots)


def _find(snapshot: AccountSnapshot, reservation_id: str) -> AccountNode | None:
    todo = list(snapshot.roots)
    while todo:
        n = todo.pop()
        if n.reservation.request.reservation_id == reservation_id:
            return n
        todo.extend(n.children)
    return None


def admit(
    policy: PlanPolicy, snapshot: AccountSnapshot, request: ReservationRequest, now: float
) -> int:
    """Check a new reservation against the plan, its root and its immediate parent; its depth.

    Raises :class:`InvalidBudget` (pins, bounds), :class:`ReservationNotFound` (no parent),
    :class:`SettlementOutOfOrder` (a closed or leaf parent), :class:`BudgetExceeded`.
    """
    if request.plan_id != policy.plan_id or request.plan_digest != policy.plan_digest:
        raise InvalidBudget("the request names another plan or plan digest than the account pins")
    if policy.token_only:
        if request.money_bound or request.allocation.money_micros:
            raise InvalidBudget("the account is token-only: a request carries no money bound")
    elif not request.money_bound or request.pricing_revision != policy.pricing_revision:
        raise InvalidBudget(
            f"the account bounds money at price revision {policy.pricing_revision!r}: the "
            "request must be money-bound at that revision"
        )
    if not policy.value_bound and request.allocation.value_micros:
        raise InvalidBudget("the account does not bound value: a request allocates no value_micros")
    if now >= policy.deadline:
        raise BudgetExceeded(f"plan {policy.plan_id!r} is past its deadline", dimension="deadline")
    if request.deadline <= now or request.deadline > policy.deadline:
        raise InvalidBudget("a reservation's deadline must be in the future and within the plan's")
    if snapshot.reservations >= MAX_RESERVATIONS:
        raise BudgetExceeded(
            f"plan {policy.plan_id!r} holds {MAX_RESERVATIONS} reservations already",
            dimension="reservations",
        )
    if snapshot.overflow:
        raise BudgetExceeded(
            "the account's sum overflowed: nothing more is admitted", dimension="overflow"
        )
    want = request.allocation.with_fan_out()
    depth = 1
    if request.parent_id is not None:
        parent = _find(snapshot, request.parent_id)
        if parent is None:
            raise ReservationNotFound(
                f"no reservation {request.parent_id!r} in plan {policy.plan_id!r}"
            )
        p = parent.reservation
        if p.request.kind is not ReservationKind.BRANCH:
            raise InvalidBudget(f"reservation {request.parent_id!r} is a leaf: it has no children")
        if p.settled:
            raise SettlementOutOfOrder(f"branch {request.parent_id!r} has closed")
        if request.deadline > p.request.deadline:
            raise InvalidBudget("a child's deadline must be within its parent's")
        depth = p.depth + 1
        if depth > MAX_DEPTH:
            raise InvalidBudget(f"depth {depth} is past the most, {MAX_DEPTH}")
        under, over = total([OWN_SLOT, *(c.holds for c in parent.children)])
        short = None if not over else "overflow"
        short = short or p.request.allocation.first_short(under, want, skip=policy.skip)
        if short is not None:
            raise BudgetExceeded(
                f"branch {request.parent_id!r} has no {short} capacity for "
                f"{request.reservation_id!r}",
                dimension=short,
            )
    short = policy.limits.first_short(snapshot.used, want, skip=policy.skip)
    if short is not None:
        raise BudgetExceeded(
            f"plan {policy.plan_id!r} has no {short} capacity for {request.reservation_id!r}",
            dimension=short,
        )
    return depth


def closing_charge(snapshot: AccountSnapshot, reservation: Reservation, s: Settlement) -> Resources:
    """What a settlement charges: a leaf by :func:`settle_charge`; a branch from its children's
    stored charges, only once every child has settled."""
    rid = reservation.request.reservation_id
    if s.request_digest != reservation.request.digest():
        raise ReservationConflict(f"the settlement names another request than {rid!r} holds")
    if reservation.request.kind is ReservationKind.LEAF:
        if s.close_branch:
            raise InvalidBudget(f"{rid!r} is a leaf: close_branch is for branches")
        return settle_charge(reservation.request, s)
    if not s.close_branch or s.known or s.minimum is not None or s.usage != Resources():
        raise InvalidBudget(
            f"{rid!r} is a branch: it closes (close_branch) from its children, reporting no usage"
        )
    node = _find(snapshot, rid)
    kids = () if node is None else node.children
    open_kids = [k.reservation.request.reservation_id for k in kids if not k.reservation.settled]
    if open_kids:
        raise SettlementOutOfOrder(f"branch {rid!r} has unsettled children {open_kids[:5]}")
    charged, _ = total([OWN_SLOT, *(k.reservation.charge or Resources() for k in kids)])
    return charged


def check_open(snapshot: AccountSnapshot, reservation_id: str, now: float) -> Reservation:
    """The reservation, if work may still go on under it: open, and neither it, an ancestor nor
    the plan past its deadline (:class:`BudgetExceeded` naming ``settled`` or ``deadline``;
    :class:`ReservationNotFound`). Grants nothing."""
    node = _find(snapshot, reservation_id)
    if node is None:
        raise ReservationNotFound(
            f"no reservation {reservation_id!r} in plan {snapshot.policy.plan_id!r}"
        )
    found = node.reservation
    if found.settled:
        raise BudgetExceeded(f"reservation {reservation_id!r} has settled", dimension="settled")
    at: Reservation | None = found
    while at is not None:
        if now >= at.request.deadline:
            raise BudgetExceeded(
                f"reservation {at.request.reservation_id!r} is past its deadline",
                dimension="deadline",
            )
        parent = at.request.parent_id
        up = None if parent is None else _find(snapshot, parent)
        at = None if up is None else up.reservation
    if now >= snapshot.policy.deadline:
        raise BudgetExceeded(
            f"plan {snapshot.policy.plan_id!r} is past its deadline", dimension="deadline"
        )
    return found
