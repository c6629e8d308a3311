"""A plan's shared account as values (pure, no I/O): the plan's policy, reservation requests,
settlements and stored reservations, each with its canonical form and digest.

The arithmetic over them (what each reservation holds, admission, settlement) is
:mod:`effectgate._core.reservations`, which also re-exports these names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from effectgate._core.budgets import DIMENSIONS, VALUE, Resources
from effectgate._core.runs import canonical_json, sha256_hex
from effectgate.errors import InvalidBudget

__all__ = [
    "MAX_DEPTH",
    "MAX_RESERVATIONS",
    "OWN_SLOT",
    "PlanPolicy",
    "Reservation",
    "ReservationKind",
    "ReservationRequest",
    "Settlement",
    "receipt_digest",
]

MAX_RESERVATIONS = 1024
MAX_DEPTH = 16
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_MONEY = frozenset({"money_micros"})
_VALUE = frozenset({VALUE})
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
    #: Whether the account bounds the seventh dimension, the summed declared value of the
    #: effects its runs dispatch (``limits.value_micros``). Off: value is not bounded here.
    value_bound: bool = False

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
        if not isinstance(self.value_bound, bool):
            raise InvalidBudget("value_bound must be a boolean")
        if not self.value_bound and self.limits.value_micros:
            raise InvalidBudget(
                "limits.value_micros is set but value_bound is not: say value_bound to bound "
                "the summed value of the plan's effects"
            )
        if not self.token_only and self.pricing_revision is None:
            raise InvalidBudget(
                "a money bound needs a price table: give pricing_revision, or set token_only "
                "to bound tokens without money"
            )

    @property
    def skip(self) -> frozenset[str]:
        """Dimensions the account does not bound (money when token-only, value unless bound)."""
        return (_MONEY if self.token_only else frozenset()) | (
            frozenset() if self.value_bound else _VALUE
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanPolicy:
        return cls(
            plan_id=data.get("plan_id"),  # type: ignore[arg-type]
            plan_digest=data.get("plan_digest"),  # type: ignore[arg-type]
            limits=Resources.from_dict(data.get("limits"), name="limits"),
            deadline=data.get("deadline"),  # type: ignore[arg-type]
            token_only=data.get("token_only", False),
            pricing_revision=data.get("pricing_revision"),
            value_bound=data.get("value_bound", False),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "plan_id": self.plan_id,
            "plan_digest": self.plan_digest,
            "limits": self.limits.to_dict(),
            "deadline": self.deadline,
            "token_only": self.token_only,
            "pricing_revision": self.pricing_revision,
        }
        if self.value_bound:  # absent while off: older accounts keep their digests
            out["value_bound"] = True
        return out

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
