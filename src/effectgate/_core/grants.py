"""Delegated authority: what a grant allows, containment of a delegation, coverage of an action.

Pure: no I/O. A :class:`GrantSpec` names what its holder may do on every axis (action
classes, targets, a per-action value ceiling, an aggregate budget, environments, a tenant
scope, an expiry, whether and how far it may be delegated). A delegation must be contained in
its parent on *every* axis (:func:`check_contained`, which names the first axis that is wider),
and an action is covered when one live grant of the acting principal covers it on every axis
(:func:`grant_refusal`). The store (``store/_grants.py``) records grants; the pre-dispatch
authoriser (``execute/authority.py``) applies these decisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from effectgate.errors import ControlError, GrantWider

__all__ = [
    "ANY",
    "BREAK_GLASS_MAX_SECONDS",
    "MAX_HOPS",
    "Grant",
    "GrantSpec",
    "check_contained",
    "grant_refusal",
    "parse_spec",
    "to_micros",
]

#: The wildcard of a set axis (actions, targets, environments): every value.
ANY = "*"
#: The most hops any chain of delegations may have below its root grant.
MAX_HOPS = 5
#: A break-glass grant lives at most this long (it is meant for an incident, not a habit).
BREAK_GLASS_MAX_SECONDS = 3600.0
_MAX_ITEMS = 256


def to_micros(value: Decimal) -> int:
    """A value in millionths of its unit, as the record of dispatched value counts it."""
    return int((value * 1_000_000).to_integral_value())


@dataclass(frozen=True, slots=True)
class GrantSpec:
    """What a grant allows. ``None`` for a ceiling or budget means no ceiling on that axis."""

    actions: frozenset[str]
    targets: frozenset[str]
    environments: frozenset[str]
    scope: str
    expires_at: float
    max_value: Decimal | None = None
    budget: Decimal | None = None
    #: How many further delegations may hang below this grant (0: none).
    hops: int = 0
    break_glass: bool = False

    @property
    def delegable(self) -> bool:
        return self.hops > 0 and not self.break_glass

    def to_dict(self) -> dict[str, object]:
        return {
            "actions": sorted(self.actions),
            "targets": sorted(self.targets),
            "environments": sorted(self.environments),
            "scope": self.scope,
            "expires_at": self.expires_at,
            "max_value": None if self.max_value is None else str(self.max_value),
            "budget": None if self.budget is None else str(self.budget),
            "hops": self.hops,
            "break_glass": self.break_glass,
        }


@dataclass(frozen=True, slots=True)
class Grant:
    """A recorded grant: its spec, who holds it, who made it and under which parent."""

    grant_id: str
    holder: str
    spec: GrantSpec
    created_by: str
    created_at: float
    parent_id: str | None = None
    depth: int = 0
    revoked_at: float | None = None
    revoked_by: str | None = None

    def live(self, now: float) -> bool:
        return self.revoked_at is None and now < self.spec.expires_at

    def to_dict(self) -> dict[str, object]:
        return {
            "grant_id": self.grant_id,
            "holder": self.holder,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "parent_id": self.parent_id,
            "depth": self.depth,
            "revoked_at": self.revoked_at,
            "revoked_by": self.revoked_by,
            **self.spec.to_dict(),
        }


def _names(raw: object, field: str) -> frozenset[str]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, Sequence) or not raw or len(raw) > _MAX_ITEMS:
        raise ControlError(
            f"must be a non-empty list of at most {_MAX_ITEMS} names, or {ANY!r}", field=field
        )
    out: set[str] = set()
    for item in raw:
        if not isinstance(item, str) or not item or len(item) > 256 or item != item.strip():
            raise ControlError(f"{item!r} is not a name", field=field)
        out.add(item)
    if ANY in out and len(out) > 1:
        raise ControlError(f"{ANY!r} stands alone (it already means every value)", field=field)
    return frozenset(out)


def _amount(raw: object, field: str) -> Decimal | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int | Decimal):
        raise ControlError(f"{raw!r} must be a decimal amount (as text) or null", field=field)
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ControlError(f"{raw!r} is not a decimal amount", field=field) from None
    if not value.is_finite() or value < 0:
        raise ControlError(f"{raw!r} must be a finite amount >= 0", field=field)
    return value


def parse_spec(raw: Mapping[str, object], *, now: float) -> GrantSpec:
    """A spec from operator input (CLI flags, an HTTP body), refused whole if any axis is bad."""
    known = {
        "actions", "targets", "environments", "scope", "expires_in", "expires_at",
        "max_value", "budget", "hops", "break_glass",
    }  # fmt: skip
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ControlError(f"unknown grant field(s): {', '.join(unknown)}", field=unknown[0])
    scope = raw.get("scope", ANY)
    if not isinstance(scope, str) or not scope:
        raise ControlError(f"{scope!r} is not a tenant scope", field="scope")
    if "expires_at" in raw:
        expires = raw["expires_at"]
    else:
        ttl = raw.get("expires_in")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
            raise ControlError(
                "a grant needs an expiry: expires_in (seconds > 0) or expires_at", field="expires"
            )
        expires = now + float(ttl)
    if isinstance(expires, bool) or not isinstance(expires, int | float) or expires <= now:
        raise ControlError(f"{expires!r} must be a time after now", field="expires_at")
    hops = raw.get("hops", 0)
    if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= MAX_HOPS:
        raise ControlError(f"{hops!r} must be an integer 0..{MAX_HOPS}", field="hops")
    glass = raw.get("break_glass", False)
    if not isinstance(glass, bool):
        raise ControlError(f"{glass!r} must be true or false", field="break_glass")
    if glass:
        if hops:
            raise ControlError("a break-glass grant cannot be delegated", field="hops")
        if float(expires) - now > BREAK_GLASS_MAX_SECONDS:
            raise ControlError(
                f"a break-glass grant expires within {BREAK_GLASS_MAX_SECONDS:g} s",
                field="expires_at",
            )
    return GrantSpec(
        actions=_names(raw.get("actions"), "actions"),
        targets=_names(raw.get("targets", ANY), "targets"),
        environments=_names(raw.get("environments", ANY), "environments"),
        scope=scope,
        expires_at=float(expires),
        max_value=_amount(raw.get("max_value"), "max_value"),
        budget=_amount(raw.get("budget"), "budget"),
        hops=hops,
        break_glass=glass,
    )


def _set_within(child: frozenset[str], parent: frozenset[str]) -> bool:
    return ANY in parent or (ANY not in child and child <= parent)


def _cap_within(child: Decimal | None, parent: Decimal | None) -> bool:
    return parent is None or (child is not None and child <= parent)


def check_contained(parent: Grant, child: GrantSpec, *, now: float) -> None:
    """Refuse a delegation beneath ``parent`` that is wider than it on any axis.

    Raises :class:`GrantWider` naming the first wider axis; nothing is written before this.
    """
    if not parent.live(now):
        raise GrantWider(f"grant {parent.grant_id} is revoked or expired", field="parent")
    if not parent.spec.delegable:
        raise GrantWider(f"grant {parent.grant_id} may not be delegated", field="delegable")
    if child.break_glass:
        raise GrantWider("break-glass is granted at the root only", field="break_glass")
    p = parent.spec
    checks: Iterable[tuple[str, bool, str]] = (
        ("actions", _set_within(child.actions, p.actions), f"{sorted(p.actions)}"),
        ("targets", _set_within(child.targets, p.targets), f"{sorted(p.targets)}"),
        ("environments", _set_within(child.environments, p.environments), f"{sorted(p.environments)}"),  # noqa: E501
        ("scope", p.scope == ANY or child.scope == p.scope, repr(p.scope)),
        ("max_value", _cap_within(child.max_value, p.max_value), str(p.max_value)),
        ("budget", _cap_within(child.budget, p.budget), str(p.budget)),
        ("expires_at", child.expires_at <= p.expires_at, str(p.expires_at)),
        ("hops", child.hops <= p.hops - 1, f"at most {p.hops - 1}"),
    )  # fmt: skip
    for axis, within, limit in checks:
        if not within:
            raise GrantWider(
                f"wider than grant {parent.grant_id} on {axis} (the parent allows {limit})",
                field=axis,
            )


def grant_refusal(
    grant: Grant,
    *,
    action: str,
    scope: str,
    target: str | None,
    value: Decimal | None,
    environment: str,
    now: float,
    used_micros: int,
) -> tuple[str, str] | None:
    """Why ``grant`` does not cover this action, as ``(code, reason)``; None when it does.

    ``used_micros``: the value already dispatched under the grant's holder and classes since the
    grant was made (the record of dispatched value), which the aggregate budget bounds.
    """
    s = grant.spec
    g = grant.grant_id
    if grant.revoked_at is not None:
        return "grant_revoked", f"grant {g} was revoked by {grant.revoked_by}"
    if now >= s.expires_at:
        return "grant_expired", f"grant {g} expired"
    if ANY not in s.actions and action not in s.actions:
        return "grant_action", f"grant {g} does not cover action {action!r}"
    if s.scope not in (ANY, scope):
        return "grant_scope", f"grant {g} does not cover tenant {scope!r}"
    if ANY not in s.environments and environment not in s.environments:
        return "grant_environment", f"grant {g} does not cover environment {environment!r}"
    if ANY not in s.targets and (target is None or target not in s.targets):
        return "grant_target", f"grant {g} does not cover target {target!r}"
    if s.max_value is not None and (value is None or value > s.max_value):
        return "grant_value", f"value {value} is above grant {g}'s ceiling {s.max_value}"
    if s.budget is not None:
        asked = 0 if value is None else to_micros(value)
        if used_micros + asked > to_micros(s.budget):
            return (
                "grant_budget",
                f"grant {g}'s budget {s.budget} would be exceeded "
                f"({used_micros / 1e6:g} already dispatched)",
            )
    return None
