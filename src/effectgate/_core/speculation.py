"""Speculative pre-execution (seed 000) as values: a class's declaration, the speculation
record, and the one pure decision taken at commit.

There is one key authority: the key effectgate sends a sandbox is the operation key it already
has (``scope:operation_id``). A sandbox that mints its own key is recorded beside it, never in
its place. :func:`decide_commit` checks, in order, the record's identity against the ledger
row's, the verdict and its remaining lifetime, and the sandbox key against the ledger key (or a
declared, stable mapping). Nothing here does I/O; :mod:`effectgate._execute.speculation`
applies the decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from effectgate._core.venue import VenueContract
from effectgate.errors import ConfigError, RegistryError

__all__ = [
    "CommitDecision",
    "CommitStep",
    "KeyStrategy",
    "Speculation",
    "SpeculationMode",
    "SpeculationRecord",
    "SpeculationVerdict",
    "check_horizon",
    "decide_commit",
]


class SpeculationMode(StrEnum):
    """Whether a class's calls are dry-run before they are committed."""

    #: Every dispatch needs a committable verdict; the adapter must be able to speculate.
    REQUIRED = "required"
    #: Speculate when the class's adapter can; otherwise dispatch as if ``off``.
    OPTIONAL = "optional"
    OFF = "off"


class KeyStrategy(StrEnum):
    """How a sandbox key that is not the ledger key is reconciled (default: refuse)."""

    #: Any difference is a divergence: the row is quarantined.
    REFUSE = "refuse"
    #: The sandbox is given the ledger key and declares it uses it; a different key anyway is
    #: a divergence.
    LEDGER_AUTHORITATIVE = "ledger_authoritative"
    #: The sandbox's key is recorded beside the ledger key as a declared mapping, checked at
    #: every commit; allowed only where the sandbox's keys outlive the verdict lifetime.
    SANDBOX_AUTHORITATIVE = "sandbox_authoritative"


class SpeculationVerdict(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"
    RETRYABLE_TIMEOUT = "RETRYABLE_TIMEOUT"


def _positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise RegistryError(f"speculation: {name} must be a finite number > 0")
    return float(value)


@dataclass(frozen=True, slots=True)
class Speculation:
    """An action class's speculation: ``[classes.NAME.speculation]``.

    ``verdict_lifetime``: seconds a verdict may be committed after it was given; it must exceed
    the retry horizon (the dispatch timeout plus its in-flight grace), checked when the
    configuration loads and at every commit. ``max_tries`` and ``max_wait``: the bound on
    re-speculation before the caller gets :class:`~effectgate.errors.SpeculationStalled`.
    """

    mode: SpeculationMode = SpeculationMode.REQUIRED
    verdict_lifetime: float = 60.0
    strategy: KeyStrategy = KeyStrategy.REFUSE
    max_tries: int = 3
    max_wait: float = 30.0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", SpeculationMode(self.mode))
            object.__setattr__(self, "strategy", KeyStrategy(self.strategy))
        except ValueError as exc:
            raise RegistryError(f"speculation: {exc}") from None
        object.__setattr__(
            self, "verdict_lifetime", _positive("verdict_lifetime", self.verdict_lifetime)
        )
        object.__setattr__(self, "max_wait", _positive("max_wait", self.max_wait))
        if isinstance(self.max_tries, bool) or not isinstance(self.max_tries, int):
            raise RegistryError("speculation: max_tries must be an integer >= 1")
        if self.max_tries < 1:
            raise RegistryError("speculation: max_tries must be an integer >= 1")

    @property
    def active(self) -> bool:
        return self.mode is not SpeculationMode.OFF

    def check_venue(self, venue: VenueContract) -> None:
        """The strategy's promises must be the venue contract's (its conformance kit verifies
        them): raise :class:`RegistryError` naming the missing one."""
        if self.strategy is KeyStrategy.LEDGER_AUTHORITATIVE and not venue.sandbox_uses_given_key:
            raise RegistryError(
                "speculation: strategy ledger_authoritative needs the venue to declare "
                "sandbox_uses_given_key = true"
            )
        if self.strategy is KeyStrategy.SANDBOX_AUTHORITATIVE:
            keep = venue.sandbox_key_persistence
            if keep is None or keep <= self.verdict_lifetime:
                raise RegistryError(
                    "speculation: strategy sandbox_authoritative needs the venue's "
                    f"sandbox_key_persistence ({keep}) to exceed verdict_lifetime "
                    f"({self.verdict_lifetime:g}s)"
                )


def check_horizon(name: str, spec: Speculation, horizon: float) -> None:
    """Condition 3 of seed 000: the verdict lifetime strictly exceeds the retry horizon."""
    if spec.active and not spec.verdict_lifetime > horizon:
        raise ConfigError(
            f"{name}: speculation verdict_lifetime ({spec.verdict_lifetime:g}s) must exceed the "
            f"retry horizon ({horizon:g}s: dispatch_timeout plus in_flight_grace)"
        )


@dataclass(frozen=True, slots=True)
class SpeculationRecord:
    """One speculation of one operation: both keys, the identity, the verdict.

    ``operation_key`` is the ledger key the sandbox was given; ``sandbox_key`` the key the
    sandbox says it used (None: it did not say). ``subject`` is the operation key the sandbox
    says it validated, ``fingerprint`` the row's at the time. ``attempt`` is how many times the
    proposal had arrived (audit only, never part of a key); ``seq`` numbers the speculations.
    """

    scope: str
    operation_id: str
    operation_key: str
    fingerprint: str
    sandbox_key: str | None
    verdict: SpeculationVerdict
    reason: str
    expires_at: float
    attempt: int
    seq: int = 0
    subject: str | None = None
    at: float = 0.0
    evidence: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "operation_id": self.operation_id,
            "ledger_key": self.operation_key,
            "sandbox_key": self.sandbox_key,
            "subject": self.subject,
            "fingerprint": self.fingerprint,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "expires_at": self.expires_at,
            "attempt": self.attempt,
            "seq": self.seq,
            "at": self.at,
            "evidence": dict(self.evidence),
        }


class CommitStep(StrEnum):
    COMMIT = "commit"
    REJECT = "reject"
    RESPECULATE = "respeculate"
    QUARANTINE = "quarantine"


@dataclass(frozen=True, slots=True)
class CommitDecision:
    step: CommitStep
    reason: str
    #: The sandbox key a sandbox-authoritative commit declares as the mapping (first time).
    declare: str | None = None


def decide_commit(
    record: SpeculationRecord | None,
    *,
    operation_key: str,
    fingerprint: str,
    spec: Speculation,
    mapping: str | None,
    now: float,
    horizon: float,
) -> CommitDecision:
    """What to do with the latest speculation of a ``validated`` row about to be dispatched.

    In order: identity (operation and fingerprint), verdict and remaining lifetime (a verdict
    that would expire inside the retry ``horizon`` is as good as expired: never committed),
    then the keys under the class's strategy. ``mapping``: the sandbox key a sandbox-authoritative
    commit declared earlier for this operation, if any.
    """
    if record is None:
        return CommitDecision(CommitStep.RESPECULATE, "no speculation recorded yet")
    subject = record.subject if record.subject is not None else record.operation_key
    if record.operation_key != operation_key or subject != operation_key:
        return CommitDecision(
            CommitStep.QUARANTINE,
            f"identity mismatch: the speculation is of {subject!r}, the ledger row is "
            f"{operation_key!r}",
        )
    if record.fingerprint != fingerprint:
        return CommitDecision(
            CommitStep.QUARANTINE,
            f"identity mismatch: speculated fingerprint {record.fingerprint[:12]}, ledger "
            f"fingerprint {fingerprint[:12]}",
        )
    if record.verdict is SpeculationVerdict.DENY:
        return CommitDecision(CommitStep.REJECT, f"sandbox denied: {record.reason}")
    if record.verdict is SpeculationVerdict.RETRYABLE_TIMEOUT:
        return CommitDecision(CommitStep.RESPECULATE, f"sandbox timed out: {record.reason}")
    if record.expires_at - now <= horizon:
        return CommitDecision(
            CommitStep.RESPECULATE,
            f"verdict expires at {record.expires_at:.3f}, inside the retry horizon of "
            f"{horizon:g}s from {now:.3f}",
        )
    sandbox = record.sandbox_key
    if sandbox == operation_key:
        return CommitDecision(CommitStep.COMMIT, "sandbox key is the ledger key")
    if spec.strategy is KeyStrategy.SANDBOX_AUTHORITATIVE and sandbox is not None:
        if mapping is None:
            return CommitDecision(
                CommitStep.COMMIT, "sandbox key declared as this operation's mapping", sandbox
            )
        if mapping == sandbox:
            return CommitDecision(CommitStep.COMMIT, "sandbox key follows the declared mapping")
        return CommitDecision(
            CommitStep.QUARANTINE,
            f"sandbox key {sandbox!r} is not the declared mapping {mapping!r}",
        )
    return CommitDecision(
        CommitStep.QUARANTINE,
        f"sandbox key {sandbox!r} differs from the ledger key {operation_key!r} "
        f"(strategy {spec.strategy.value})",
    )
