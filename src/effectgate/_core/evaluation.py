"""An evaluation as a value, and its token: a signed digest of what it covered. Pure, no I/O.

``Gate.evaluate`` (docs/service.md, "Evaluate without writing") answers what would happen to an
action now; its token binds a later submit to that answer. The token is
``base64url(payload) "." base64url(HMAC-SHA256(secret, payload))``; the payload is canonical
JSON of the principal, scope, action, fingerprint, the decision and policy version, the digest
of the class's controls, the store's active policy version, the budget headroom quoted (what
is left after this action, per budget) and the expiry. :func:`stale_reason` compares a
verified payload with the state a submit reads now: any change it covers, or headroom below
the quote, makes it stale.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from effectgate.errors import EvaluationTokenInvalid

__all__ = [
    "TOKEN_VERSION",
    "BudgetQuote",
    "Evaluation",
    "StateQuote",
    "sign_token",
    "stale_reason",
    "verify_token",
]

TOKEN_VERSION: Final = 2
_MAX_TOKEN: Final = 8192


@dataclass(frozen=True, slots=True)
class BudgetQuote:
    """One budget an action draws on: its limit, what is used, what this action would reserve,
    and what would be left after it (negative: it does not fit)."""

    name: str
    limit: int
    used: int
    reserve: int
    unit: str

    @property
    def left(self) -> int:
        return self.limit - self.used - self.reserve

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "unit": self.unit,
            "limit": self.limit,
            "used": self.used,
            "reserve": self.reserve,
            "left": self.left,
        }


@dataclass(frozen=True, slots=True)
class StateQuote:
    """What a token covers of the state a submit would meet (all of it read, none written)."""

    allowed: bool
    tier: str
    policy_version: str
    controls: str  # digest of the class's control row (switch, breaker, shadow, envelope)
    budgets: tuple[BudgetQuote, ...] = ()
    #: The store's active governed policy version (None: none is active): a policy another
    #: replica activated counts as a change even before this process follows it.
    active_policy: str | None = None
    #: The breaker's forecast for this proposal: True, it would trip the class's breaker;
    #: False, it would not; None, no closed breaker watches the class (an open one is in
    #: ``controls``). A token that quoted False is stale once the window says True.
    breaker_trips: bool | None = None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What would happen to one action now, and the token that binds a submit to it.

    ``outcome``: what a submit would do now: ``dispatch`` (sent at once), ``shadowed``,
    ``awaiting_approval``, ``held`` (a control holds it) or ``rejected``; under an operation
    id already journalled, ``replay`` (the same payload) or ``conflict`` (another one).
    ``reasons``: every finding, in the order of the path (policy, grants, controls, budgets,
    preconditions, speculation, approvals).
    """

    action: str
    scope: str
    fingerprint: str
    outcome: str
    reasons: tuple[str, ...]
    state: StateQuote
    controls: Mapping[str, object]
    approvals: Mapping[str, object] | None
    speculation: Mapping[str, object] | None
    evaluated_at: float
    expires_at: float
    token: str
    checks: tuple[Mapping[str, object], ...] = field(default=())
    #: The breaker's forecast (None: no breaker watches the class): ``open``, ``would_trip``
    #: and the ``signals`` this proposal would cross (a submit would trip it and hold the row).
    breaker: Mapping[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "scope": self.scope,
            "fingerprint": self.fingerprint,
            "outcome": self.outcome,
            "reasons": list(self.reasons),
            "decision": {
                "allowed": self.state.allowed,
                "tier": self.state.tier,
                "policy_version": self.state.policy_version,
            },
            "controls": dict(self.controls),
            "budgets": [b.to_dict() for b in self.state.budgets],
            "checks": [dict(c) for c in self.checks],
            "breaker": None if self.breaker is None else dict(self.breaker),
            "approvals": None if self.approvals is None else dict(self.approvals),
            "speculation": None if self.speculation is None else dict(self.speculation),
            "evaluated_at": self.evaluated_at,
            "expires_at": self.expires_at,
            "evaluation_token": self.token,
        }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, b"effectgate-evaluation." + payload, hashlib.sha256).digest()


def sign_token(
    secret: bytes,
    *,
    principal: str | None,
    scope: str,
    action: str,
    fingerprint: str,
    state: StateQuote,
    expires_at: float,
) -> str:
    """The token of an evaluation (see the module doc)."""
    payload = {
        "v": TOKEN_VERSION,
        "principal": principal,
        "scope": scope,
        "action": action,
        "fingerprint": fingerprint,
        "allowed": state.allowed,
        "tier": state.tier,
        "policy_version": state.policy_version,
        "controls": state.controls,
        "active_policy": state.active_policy,
        "budgets": {b.name: b.left for b in state.budgets},
        "breaker_trips": state.breaker_trips,
        "exp": expires_at,
    }
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return f"{_b64(raw)}.{_b64(_mac(secret, raw))}"


def verify_token(
    secret: bytes, token: object, *, principal: str | None, scope: str, action: str
) -> dict[str, Any]:
    """The payload of a token this secret signed for this principal, scope and class; else
    :class:`~effectgate.errors.EvaluationTokenInvalid`."""
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN or token.count(".") != 1:
        raise EvaluationTokenInvalid("not an evaluation token", reason="malformed")
    body, sig = token.split(".")
    try:
        raw, given = _unb64(body), _unb64(sig)
    except (binascii.Error, ValueError):
        raise EvaluationTokenInvalid("not an evaluation token", reason="malformed") from None
    if not hmac.compare_digest(_mac(secret, raw), given):
        raise EvaluationTokenInvalid(
            "the evaluation token's signature does not verify (altered, or not issued here)",
            reason="signature",
        )
    payload = json.loads(raw)
    if not isinstance(payload, dict) or payload.get("v") != TOKEN_VERSION:
        raise EvaluationTokenInvalid("unknown evaluation token version", reason="version")
    for key, want in (("principal", principal), ("scope", scope), ("action", action)):
        if payload.get(key) != want:
            raise EvaluationTokenInvalid(
                f"the evaluation token was issued for another {key}", reason=key
            )
    return payload


def stale_reason(
    payload: Mapping[str, Any], *, fingerprint: str, state: StateQuote, now: float
) -> tuple[str, str] | None:
    """Why a verified token no longer holds, as ``(reason, message)``; None when it does."""
    if now >= float(payload["exp"]):
        return "expired", "the evaluation token has expired; evaluate again"
    if payload["fingerprint"] != fingerprint:
        return "fingerprint", "this payload differs from the one evaluated (fingerprint)"
    if (payload["allowed"], payload["tier"], payload["policy_version"]) != (
        state.allowed,
        state.tier,
        state.policy_version,
    ):
        return "policy", (
            f"the policy changed since the evaluation (was {payload['policy_version']} "
            f"{payload['tier']}, now {state.policy_version} {state.tier})"
        )
    if payload["active_policy"] != state.active_policy:
        return "policy", (
            f"the active policy changed since the evaluation (was {payload['active_policy']}, "
            f"now {state.active_policy})"
        )
    if payload["controls"] != state.controls:
        return "controls", "the class's controls changed since the evaluation"
    # Only a change for the worse: the signals since the evaluation now trip the breaker.
    if payload.get("breaker_trips") is False and state.breaker_trips:
        return "breaker", (
            "the breaker's window changed since the evaluation: this proposal would now trip "
            "the class's breaker"
        )
    now_left = {b.name: b.left for b in state.budgets}
    for name, quoted in sorted(payload["budgets"].items()):
        if name in now_left and now_left[name] < int(quoted):
            return "budget", f"{name}: headroom {now_left[name]} is below the {quoted} quoted"
        if name not in now_left:
            return "budget", f"{name}: the budget quoted is no longer the one in force"
    return None
