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

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from effectgate._core.budgets import DIMENSIONS, Resources, total
from effectgate._core.runs import canonical_json, sha256_hex
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
    "closing_charge",
    "receipt_digest",
    "settle_charge",
]

MAX_RESERVATIONS = 1024
MAX_DEPTH = 16
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_MONEY = frozenset({"money_micros"})
#: A branch's own fan-out slot, held apart from what it delegates to its children.
OWN_SLOT = Resources(fan_out=1)


def _id(value: object, name: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidBudget(f"{name} must match {_ID.pattern}")
    return value


def _deadline(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidBudget(f"{name} must be a finite time in seconds")
    return float(value)


def _time_text(value: float) -> str:
    return repr(float(value))


class ReservationKind(StrEnum):
    LEAF = "leaf"
    BRANCH = "branch"


@dataclass(frozen=True, slots=True)
class PlanPolicy:
    """One plan's shared account, fixed for the plan's lifetime."""

    plan_id: str
    plan_digest: str
    limits: Resources
    deadline: float
    token_only: bool = False
    pricing_revision: str | None = None

    def __post_init__(self) -> None:
        _id(self.plan_id, "plan_id")
        if not isinstance(self.plan_digest, str) or not _DIGEST.fullmatch(self.plan_digest):
            raise InvalidBudget("plan_digest must be a lowercase SHA-256 hex digest")
        if not isinstance(self.limits, Resources):
            raise InvalidBudget("limits must be Resources")
        object.__setattr__(self, "deadline", _deadline(self.deadline, "deadline"))
        if not isinstance(self.token_only, bool):
            raise InvalidBudget("token_only must be a boolean")
        if self.pricing_revision is not None:
            _id(self.pricing_revision, "pricing_revision")
        if not self.token_only and self.pricing_revision is None:
            raise InvalidBudget(
                "a money bound needs a price table: give pricing_revision, or set token_only "
                "to bound tokens without money"
            )

    @property
    def skip(self) -> frozenset[str]:
        """Dimensions the account does not bound (money, when token-only)."""
        return _MONEY if self.token_only else frozenset()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanPolicy:
        return cls(
            plan_id=data.get("plan_id"),  # type: ignore[arg-type]
            plan_digest=data.get("plan_digest"),  # type: ignore[arg-type]
            limits=Resources.from_dict(data.get("limits"), name="limits"),
            deadline=data.get("deadline"),  # type: ignore[arg-type]
            token_only=data.get("token_only", False),
            pricing_revision=data.get("pricing_revision"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "plan_digest": self.plan_digest,
            "limits": self.limits.to_dict(),
            "deadline": self.deadline,
            "token_only": self.token_only,
            "pricing_revision": self.pricing_revision,
        }

    def digest(self) -> str:
        return sha256_hex(canonical_json({**self.to_dict(), "deadline": _time_text(self.deadline)}))


@dataclass(frozen=True, slots=True)
class ReservationRequest:
    """Capacity bound to a task and a host-owned attempt reference (``owner_ref``)."""

    reservation_id: str
    plan_id: str
    plan_digest: str
    task_id: str
    owner_ref: str
    kind: ReservationKind
    allocation: Resources
    deadline: float
    parent_id: str | None = None
    money_bound: bool = False
    pricing_revision: str | None = None

    def __post_init__(self) -> None:
        for name in ("reservation_id", "plan_id", "task_id", "owner_ref"):
            _id(getattr(self, name), name)
        if self.parent_id is not None:
            _id(self.parent_id, "parent_id")
            if self.parent_id == self.reservation_id:
                raise InvalidBudget("a reservation cannot be its own parent")
        if not isinstance(self.plan_digest, str) or not _DIGEST.fullmatch(self.plan_digest):
            raise InvalidBudget("plan_digest must be a lowercase SHA-256 hex digest")
        try:
            object.__setattr__(self, "kind", ReservationKind(self.kind))
        except ValueError:
            raise InvalidBudget("kind must be 'leaf' or 'branch'") from None
        if not isinstance(self.allocation, Resources):
            raise InvalidBudget("allocation must be Resources")
        object.__setattr__(self, "deadline", _deadline(self.deadline, "deadline"))
        if not isinstance(self.money_bound, bool):
            raise InvalidBudget("money_bound must be a boolean")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReservationRequest:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise InvalidBudget(f"a reservation request has unknown fields {sorted(unknown)}")
        missing = {"reservation_id", "plan_id", "plan_digest", "task_id", "owner_ref", "kind"}
        missing |= {"allocation", "deadline"}
        if missing - set(data):
            raise InvalidBudget(f"a reservation request needs {sorted(missing - set(data))}")
        return cls(**{**data, "allocation": Resources.from_dict(data["allocation"])})

    def to_dict(self) -> dict[str, Any]:
        return {
            "reservation_id": self.reservation_id,
            "plan_id": self.plan_id,
            "plan_digest": self.plan_digest,
            "task_id": self.task_id,
            "owner_ref": self.owner_ref,
            "kind": self.kind.value,
            "allocation": self.allocation.to_dict(),
            "deadline": self.deadline,
            "parent_id": self.parent_id,
            "money_bound": self.money_bound,
            "pricing_revision": self.pricing_revision,
        }

    def digest(self) -> str:
        """What a replay must match exactly."""
        return sha256_hex(canonical_json({**self.to_dict(), "deadline": _time_text(self.deadline)}))


@dataclass(frozen=True, slots=True)
class Settlement:
    """Final host-attributed usage of one reservation. ``known`` names the dimensions whose
    ``usage`` is trusted (a known zero differs from a missing one); ``minimum`` keeps observed
    lower bounds of the unknown ones. A branch settles with ``close_branch`` and no usage."""

    reservation_id: str
    request_digest: str
    usage: Resources = field(default_factory=Resources)
    known: frozenset[str] = frozenset()
    minimum: Resources | None = None
    close_branch: bool = False
    receipt: str | None = None

    def __post_init__(self) -> None:
        _id(self.reservation_id, "reservation_id")
        if not isinstance(self.request_digest, str) or not _DIGEST.fullmatch(self.request_digest):
            raise InvalidBudget("request_digest must be the reservation request's digest")
        object.__setattr__(self, "known", frozenset(self.known))
        unknown = self.known - set(DIMENSIONS)
        if unknown:
            raise InvalidBudget(f"known names unknown dimensions {sorted(unknown)}")
        if self.receipt is not None and (
            not isinstance(self.receipt, str) or len(self.receipt) > 512
        ):
            raise InvalidBudget("receipt must be text of at most 512 characters")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settlement:
        minimum = data.get("minimum")
        known = data.get("known", [])
        if not isinstance(known, list) or not all(isinstance(k, str) for k in known):
            raise InvalidBudget("known must be a list of dimension names")
        return cls(
            reservation_id=data.get("reservation_id"),  # type: ignore[arg-type]
            request_digest=data.get("request_digest"),  # type: ignore[arg-type]
            usage=Resources.from_dict(data.get("usage", {}), name="usage"),
            known=frozenset(known),
            minimum=None if minimum is None else Resources.from_dict(minimum, name="minimum"),
            close_branch=bool(data.get("close_branch", False)),
            receipt=data.get("receipt"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reservation_id": self.reservation_id,
            "request_digest": self.request_digest,
            "usage": self.usage.to_dict(),
            "known": sorted(self.known),
            "minimum": None if self.minimum is None else self.minimum.to_dict(),
            "close_branch": self.close_branch,
            "receipt": self.receipt,
        }

    def digest(self) -> str:
        return sha256_hex(canonical_json(self.to_dict()))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A stored reservation: its immutable request and, once settled, its charge and the
    digest of its settlement receipt."""

    request: ReservationRequest
    depth: int
    created_at: float
    charge: Resources | None = None
    settled_at: float | None = None
    receipt_digest: str | None = None

    @property
    def settled(self) -> bool:
        return self.charge is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.request.to_dict(),
            "request_digest": self.request.digest(),
            "depth": self.depth,
            "created_at": self.created_at,
            "charge": None if self.charge is None else self.charge.to_dict(),
            "settled_at": self.settled_at,
            "receipt_digest": self.receipt_digest,
        }


def receipt_digest(settlement: Settlement, charge: Resources, at: float) -> str:
    """The settlement receipt's digest: the request, the charge it produced and when."""
    return sha256_hex(
        canonical_json(
            {"settlement": settlement.to_dict(), "charge": charge.to_dict(), "at": _time_text(at)}
        )
    )


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
