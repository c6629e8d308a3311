"""Operational controls as data: envelopes, breaker thresholds, dispatch guards. Pure, no I/O.

The store evaluates these *inside* the transaction that would move a row to ``submitted``, so a
kill switch, an open breaker or an exhausted envelope holds in every process at once (the
dialect-free evaluation is :mod:`effectgate.store._guard`). Nothing here can be reached by the
agent: the gate builds guards from its own configuration, and only :class:`~effectgate.Operator`
methods, which take an operator identity, change a control.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Final

from effectgate.errors import ControlError

__all__ = [
    "AXES",
    "REVERSAL_CONDITIONS",
    "VALUE_SCALE",
    "Alert",
    "ApprovalOutcome",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalRules",
    "AuthorityStep",
    "BreakerConfig",
    "ClassControls",
    "DispatchGuard",
    "Envelope",
    "ShadowPair",
    "Verdict",
    "VerdictKind",
    "parse_axis_value",
    "to_micros",
]

#: Values are accounted in integer micro-units (rounded *up*), so aggregate sums are exact in
#: both dialects and never under-count exposure.
VALUE_SCALE: Final = 10**6
_MAX_MICROS: Final = 2**62

#: The envelope's axes. The oversight tier is deliberately not one: evidence buys a larger
#: envelope inside the tier, never the tier itself.
AXES: Final = ("max_value", "exposure", "allowed_targets", "rate")
#: What a staged step may record as its reversal condition. ``breaker_trip`` fires on any trip
#: of the class's breaker; ``breaker_trip:<signal>`` only on that signal; ``manual`` never fires
#: (only a tightening step records it: a widening one names a trip, see
#: :mod:`effectgate._core.authority_evidence`).
REVERSAL_CONDITIONS: Final = (
    "manual",
    "breaker_trip",
    "breaker_trip:rejection_rate",
    "breaker_trip:value_rate",
    "breaker_trip:repeats",
    "breaker_trip:new_targets",
)


def to_micros(value: Decimal) -> int:
    """``value`` in integer micro-units, rounded up (conservative for limits)."""
    micros = int((value * VALUE_SCALE).to_integral_value(rounding=ROUND_CEILING))
    return min(micros, _MAX_MICROS)


def _decimal(value: object, axis: str) -> Decimal:
    if isinstance(value, Decimal):
        value = str(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ControlError(
            'must be a decimal string such as "1000" (floats are refused)', field=axis
        )
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ControlError(f"{value!r} is not a decimal", field=axis) from None
    if not number.is_finite() or number <= 0:
        raise ControlError(f"{value!r} must be a finite decimal > 0", field=axis)
    return number


def _seconds(value: object, axis: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ControlError(f"{value!r} must be a number of seconds > 0", field=axis)
    return float(value)


def _count(value: object, axis: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ControlError(f"{value!r} must be an integer >= 1", field=axis)
    return value


def _pair(value: object, axis: str, keys: tuple[str, str]) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or set(value) != set(keys):
        raise ControlError(f"must be an object with exactly the keys {', '.join(keys)}", field=axis)
    return value


def parse_axis_value(axis: str, value: object) -> object:
    """Validate one axis value; return its canonical JSON form (``None`` lifts the axis)."""
    if axis not in AXES:
        hint = (
            " (the oversight tier is not an envelope axis: its floor never moves)"
            if axis in ("tier", "tier_floor")
            else ""
        )
        raise ControlError(f"unknown axis {axis!r}; axes: {', '.join(AXES)}{hint}", field="axis")
    if value is None:
        return None
    if axis == "max_value":
        return str(_decimal(value, axis))
    if axis == "exposure":
        pair = _pair(value, axis, ("limit", "window"))
        return {
            "limit": str(_decimal(pair["limit"], "exposure.limit")),
            "window": _seconds(pair["window"], "exposure.window"),
        }
    if axis == "rate":
        pair = _pair(value, axis, ("limit", "interval"))
        return {
            "limit": _count(pair["limit"], "rate.limit"),
            "interval": _seconds(pair["interval"], "rate.interval"),
        }
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ControlError("must be a list of target identifiers", field=axis)
    for item in value:
        if not isinstance(item, str) or not item or not item.isascii() or len(item) > 128:
            raise ControlError(f"{item!r} is not an ASCII target identifier", field=axis)
    return sorted(set(value))


@dataclass(frozen=True, slots=True)
class Envelope:
    """The authority a class has, on separate axes. ``None`` on an axis: not constrained.

    ``max_value``: ceiling per action on the class's value measure. ``exposure``: the sum of
    dispatched values over a sliding window. ``allowed_targets``: the only targets (instruments,
    accounts) it may touch. ``rate``: dispatches per interval.
    """

    max_value: Decimal | None = None
    exposure_limit: Decimal | None = None
    exposure_window: float | None = None
    allowed_targets: frozenset[str] | None = None
    rate_limit: int | None = None
    rate_interval: float | None = None
    version: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = 0) -> Envelope:
        unknown = set(data) - set(AXES)
        if unknown:
            raise ControlError(
                f"unknown axis {sorted(unknown)[0]!r}; axes: {', '.join(AXES)}", field="axis"
            )
        clean = {axis: parse_axis_value(axis, data.get(axis)) for axis in AXES}
        exposure: Any = clean["exposure"]
        rate: Any = clean["rate"]
        targets: Any = clean["allowed_targets"]
        return cls(
            max_value=Decimal(str(clean["max_value"])) if clean["max_value"] else None,
            exposure_limit=Decimal(exposure["limit"]) if exposure else None,
            exposure_window=exposure["window"] if exposure else None,
            allowed_targets=frozenset(targets) if targets is not None else None,
            rate_limit=rate["limit"] if rate else None,
            rate_interval=rate["interval"] if rate else None,
            version=version,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "max_value": str(self.max_value) if self.max_value is not None else None,
            "exposure": {"limit": str(self.exposure_limit), "window": self.exposure_window}
            if self.exposure_limit is not None
            else None,
            "allowed_targets": sorted(self.allowed_targets)
            if self.allowed_targets is not None
            else None,
            "rate": {"limit": self.rate_limit, "interval": self.rate_interval}
            if self.rate_limit is not None
            else None,
        }

    def axis(self, name: str) -> object:
        return self.to_json()[name]

    def with_axis(self, name: str, value: object) -> Envelope:
        data = self.to_json()
        data[name] = parse_axis_value(name, value)
        return replace(Envelope.from_json(data), version=self.version)

    def per_action_breach(self, value: Decimal | None, target: str | None) -> str | None:
        """Why one action is outside the per-action axes (ceiling, allowlist), or ``None``."""
        if self.allowed_targets is not None and target not in self.allowed_targets:
            return f"target {target!r} is not on the envelope's allowlist"
        if self.max_value is not None:
            if value is None:
                # A ceiling that cannot be checked is not a ceiling (deny by default).
                return "the value cannot be measured, so the envelope's ceiling cannot be checked"
            if value > self.max_value:
                return f"value {value} over the envelope's ceiling {self.max_value}"
        return None


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Anomaly thresholds for one class over a sliding ``window`` (seconds). ``None``: off.

    ``max_rejection_rate``: trips when rejected/decided exceeds it (0..1), once at least
    ``min_samples`` decisions were seen. ``max_value``: trips when the value proposed (and not
    rejected) in the window exceeds it. ``max_repeats``: trips when one fingerprint (or the
    class's repeat key: near-identical effects) arrives under more than this many operation
    ids. ``max_new_targets``: trips when more than this many proposals bring a never-seen
    value in a watched field (the class's ``new_target_fields``, else its ``target_field``).
    """

    window: float = 300.0
    max_rejection_rate: float | None = None
    min_samples: int = 10
    max_value: Decimal | None = None
    max_repeats: int | None = None
    max_new_targets: int | None = None

    def __post_init__(self) -> None:
        _seconds(self.window, "window")
        rate = self.max_rejection_rate
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1
        ):
            raise ControlError(f"{rate!r} must be a fraction in [0, 1)", field="max_rejection_rate")
        _count(self.min_samples, "min_samples")
        if self.max_value is not None:
            object.__setattr__(self, "max_value", _decimal(self.max_value, "max_value"))
        for name in ("max_repeats", "max_new_targets"):
            limit = getattr(self, name)
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
            ):
                raise ControlError(f"{limit!r} must be an integer >= 0", field=name)


@dataclass(frozen=True, slots=True)
class ApprovalRules:
    """How many distinct approvers ``multi_approve`` needs, and how long an approval stays open."""

    multi_approvers: int = 2
    ttl: float = 86400.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.multi_approvers, bool)
            or not isinstance(self.multi_approvers, int)
            or self.multi_approvers < 2
        ):
            raise ControlError("multi_approve needs at least 2 approvers", field="multi_approvers")
        _seconds(self.ttl, "ttl")


@dataclass(frozen=True, slots=True)
class ClassControls:
    """The persisted control state of one action class (defaults when never touched)."""

    action: str
    killed: bool = False
    kill_reason: str | None = None
    breaker_open: bool = False
    breaker_reason: str | None = None
    shadow: bool = False
    envelope: Envelope = field(default_factory=Envelope)
    updated_by: str | None = None
    updated_at: float | None = None

    @property
    def active(self) -> bool:
        """Whether any control can change what a new row of the class does: a switch, a
        breaker, shadow mode, or an envelope ever set (version 0 is the default one). A store
        journals a row of an inactive class without consulting the controls further (the
        same predicate as PostgreSQL's one-statement journal)."""
        return self.killed or self.breaker_open or self.shadow or self.envelope.version > 0

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "killed": self.killed,
            "kill_reason": self.kill_reason,
            "breaker_open": self.breaker_open,
            "breaker_reason": self.breaker_reason,
            "shadow": self.shadow,
            "envelope": self.envelope.to_json(),
            "envelope_version": self.envelope.version,
            "updated_by": self.updated_by,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class AuthorityStep:
    """One recorded change of one envelope axis (an expansion, a contraction or a reversal)."""

    id: int
    action: str
    axis: str
    old: object
    new: object
    evidence: Mapping[str, object]
    reverse_on: str
    operator: str
    at: float
    kind: str  # "step" or "reversal"
    reverses: int | None = None
    active: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "action": self.action,
            "axis": self.axis,
            "old": self.old,
            "new": self.new,
            "evidence": dict(self.evidence),
            "reverse_on": self.reverse_on,
            "operator": self.operator,
            "at": self.at,
            "kind": self.kind,
            "reverses": self.reverses,
            "active": self.active,
        }


class VerdictKind(StrEnum):
    """What the controls decided for a row about to be sent."""

    SEND = "send"
    SHADOW = "shadow"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The dispatch check's decision, as a value: send, shadow, or hold (``reason`` says why)."""

    kind: VerdictKind
    reason: str | None = None
    #: For a hold that time lifts (a full rate or exposure window): seconds after which a
    #: retry may pass. None: only an operator's change (switch, breaker, envelope) lifts it.
    retry_after: float | None = None

    @property
    def held(self) -> bool:
        return self.kind is VerdictKind.HOLD


@dataclass
class DispatchGuard:
    """What the gate hands the store so it can check controls in the dispatching transaction.

    Built by the gate from the action class and its own configuration; never from agent input
    beyond the validated effect (``value`` and ``target`` come from the class's value measure
    and target field). The store never writes to it: what it decided comes back as a value.
    """

    action: str
    value: Decimal | None = None
    target: str | None = None
    breaker: BreakerConfig | None = None
    correlation_id: str | None = None
    approvals_required: int = 0
    approval_ttl: float = 86400.0
    proposers: tuple[str, ...] = ()
    #: Whether completing the row's approvals releases it to the standing dispatcher (the
    #: caller submitted it to be sent), or leaves it to its caller (``Gate.propose``).
    dispatch_on_approval: bool = True
    #: What the repeat signal counts this effect under (the class's repeat key over the
    #: effect); None: the row's fingerprint.
    repeat_key: str | None = None
    #: ``(lane, field, value)`` per watched field for the new-target signal; None: ``target``
    #: in the class's own lane.
    watched: tuple[tuple[str, str, str], ...] | None = None
    #: Called with the journal's open transaction and its instant before anything is written
    #: (an evaluation token's re-check, docs/service.md); it raises to refuse. A guard that
    #: carries one always takes the full journal path.
    recheck: Callable[[Any, float], None] | None = None

    @property
    def value_micros(self) -> int | None:
        return None if self.value is None else to_micros(self.value)

    @property
    def plain(self) -> bool:
        """Nothing in the journal's transaction reads more than the class's control row: no
        breaker window to record, no recheck (a dialect's one-statement journal may run)."""
        return self.breaker is None and self.recheck is None


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an ``awaiting_approval`` row needs: N distinct approvers of this exact payload."""

    scope: str
    operation_id: str
    fingerprint: str
    required: int
    expires_at: float
    proposers: tuple[str, ...]
    #: Completing the approvals releases the row to the standing dispatcher.
    dispatch_on_approval: bool = False


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    approver: str
    verdict: str  # "approve" or "refuse"
    fingerprint: str
    reason: str | None
    at: float
    #: Approver roles the approver's verified credential asserted when approving.
    roles: tuple[str, ...] = ()
    #: The precondition's fingerprint bound to this approval (None: none, or unread).
    precondition: str | None = None
    #: When it was read (None: no precondition bound to this approval).
    precondition_at: float | None = None


@dataclass(frozen=True, slots=True)
class ApprovalOutcome:
    """The row after an approval or refusal, and how far its approvals have come."""

    operation: Any  # effectgate.store.base.Operation (kept loose to avoid an import cycle)
    approvals: int
    required: int
    expired: bool = False
    #: The approvals completed and released the row to the standing dispatcher.
    released: bool = False

    @property
    def complete(self) -> bool:
        return self.approvals >= self.required and not self.expired


@dataclass(frozen=True, slots=True)
class ShadowPair:
    """An agent's proposal in shadow mode and, when fed, what the incumbent actually did (by
    correlation id). Either side may be absent: a proposal the incumbent's outcome has not been
    fed for, or an incumbent outcome no proposal was recorded under.

    ``request`` is what would have been sent; None when the agent would not have acted (its
    proposal was rejected or waits for approval: ``outcome`` says which; or none was made).
    ``model`` and ``harness_version`` come from the intent's ``proposed_by`` audit field, for
    grouping reports only. ``proposed_at`` / ``incumbent_at``: when each side was recorded.
    """

    correlation_id: str
    action: str
    scope: str | None
    operation_id: str | None
    shadow_fingerprint: str | None
    request: Mapping[str, object] | None
    incumbent_fingerprint: str | None
    incumbent_effect: Mapping[str, object] | None
    incumbent_fed: bool
    outcome: str | None = None
    model: str | None = None
    harness_version: str | None = None
    proposed_at: float | None = None
    incumbent_at: float | None = None

    @property
    def agent_acted(self) -> bool:
        return self.request is not None

    @property
    def agrees(self) -> bool | None:
        """``None`` until the incumbent's outcome is fed; else whether both did the same thing.

        Neither acting is agreement; one acting and not the other, or both acting with
        different effects (by fingerprint), is disagreement.
        """
        if not self.incumbent_fed:
            return None
        agent = self.shadow_fingerprint if self.agent_acted else None
        return agent == self.incumbent_fingerprint

    @property
    def at(self) -> float | None:
        """When the case happened: the agent's proposal, else the incumbent's outcome."""
        return self.proposed_at if self.proposed_at is not None else self.incumbent_at


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert: a breaker trip or a maintenance rule (``kind``), once per ``subject``."""

    kind: str
    subject: str
    action: str | None
    message: str
    detail: Mapping[str, object]
    at: float

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "action": self.action,
            "message": self.message,
            "detail": dict(self.detail),
            "at": self.at,
        }
