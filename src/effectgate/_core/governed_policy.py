"""Policy as a governed artefact: its canonical document, hash, diff and replay (pure, no I/O).

A policy document is the ``[policies.*]`` limits as canonical JSON (keys sorted, decimals as
text). Its hash (``sha256:<hex>``) is the version every decision made under it records, so the
audit names exactly which policy decided. :func:`diff_documents` says what a proposal changes;
:func:`replay` decides recorded intents again under a proposed policy and reports every
decision that would change, with counts per class.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from effectgate._core.intent import Registry
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate.errors import PolicyError

__all__ = [
    "ActivePolicy",
    "PolicyProposal",
    "RecordedDecision",
    "ReplayReport",
    "diff_documents",
    "document_of",
    "policy_hash",
    "policy_set",
    "replay",
]

_KEYS = ("max_value", "approve_above", "allowed_targets")


def document_of(limits: Mapping[str, LimitPolicy]) -> dict[str, dict[str, object]]:
    """The canonical document of per-class limits (decimals as text, targets sorted)."""
    out: dict[str, dict[str, object]] = {}
    for action in sorted(limits):
        p = limits[action]
        out[action] = {
            "max_value": None if p.max_value is None else str(p.max_value),
            "approve_above": None if p.approve_above is None else str(p.approve_above),
            "allowed_targets": None if p.allowed_targets is None else sorted(p.allowed_targets),
        }
    return out


def canonical_text(document: Mapping[str, object]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def policy_hash(document: Mapping[str, object]) -> str:
    return "sha256:" + hashlib.sha256(canonical_text(document).encode()).hexdigest()


def policy_set(document: Mapping[str, object], registry: Registry) -> PolicySet:
    """The policy a document describes, each limit versioned by the document's hash."""
    version = policy_hash(document)
    policies = PolicySet()
    for action, raw in document.items():
        if action not in registry:
            raise PolicyError(f"policy names no action class {action!r}")
        if not isinstance(raw, Mapping) or set(raw) - set(_KEYS):
            raise PolicyError(f"{action}: a limit has only {', '.join(_KEYS)}")
        targets = raw.get("allowed_targets")

        def dec(key: str, limit: Mapping[str, object] = raw) -> Decimal | None:
            v = limit.get(key)
            return None if v is None else Decimal(str(v))

        policies.set(
            action,
            LimitPolicy(
                dec("max_value"),
                version=version,
                approve_above=dec("approve_above"),
                allowed_targets=None if targets is None else frozenset(map(str, targets)),
            ),
        )
    return policies


def diff_documents(old: Mapping[str, object] | None, new: Mapping[str, object]) -> list[str]:
    """One line per change: a class added or removed, or a limit that changed."""
    before: Mapping[str, object] = old or {}
    lines: list[str] = []
    for action in sorted(set(before) | set(new)):
        if action not in new:
            lines.append(f"- {action}: removed (deny by default)")
            continue
        if action not in before:
            lines.append(f"+ {action}: {canonical_text(new[action])}")  # type: ignore[arg-type]
            continue
        a, b = before[action], new[action]
        if not isinstance(a, Mapping) or not isinstance(b, Mapping):
            continue
        for key in _KEYS:
            if a.get(key) != b.get(key):
                lines.append(f"~ {action}.{key}: {a.get(key)} -> {b.get(key)}")
    return lines


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """One recorded proposal: what it asked, and what the policy of the day decided."""

    scope: str
    operation_id: str
    action: str
    effect: Mapping[str, str | int | bool]
    allowed: bool
    tier: str
    policy_version: str


@dataclass
class ReplayReport:
    replayed: int = 0
    changed: list[dict[str, object]] = field(default_factory=list)
    #: Per class: {"allow->deny": n, "deny->allow": n, "tier": n}.
    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "replayed": self.replayed,
            "changed": self.changed,
            "counts": {a: dict(c) for a, c in sorted(self.counts.items())},
        }


def replay(
    recorded: Iterable[RecordedDecision], registry: Registry, proposed: PolicySet
) -> ReplayReport:
    """Decide each recorded intent again under ``proposed``; report every changed decision."""
    report = ReplayReport()
    for r in recorded:
        if r.action not in registry:
            continue
        report.replayed += 1
        new = proposed.decide_effect(registry.get(r.action), r.effect)
        if new.allowed != r.allowed:
            kind = "allow->deny" if r.allowed else "deny->allow"
        elif new.allowed and new.tier.value != r.tier:
            kind = "tier"
        else:
            continue
        report.counts.setdefault(r.action, Counter())[kind] += 1
        report.changed.append(
            {
                "scope": r.scope,
                "operation_id": r.operation_id,
                "action": r.action,
                "change": kind,
                "was": {"allowed": r.allowed, "tier": r.tier, "policy": r.policy_version},
                "now": {"allowed": new.allowed, "tier": new.tier.value, "reason": new.reason},
            }
        )
    return report


@dataclass(frozen=True, slots=True)
class PolicyProposal:
    """A proposed policy version: ``open`` until another principal approves it (``applied``),
    or ``loaded`` (applied by its author where approval is not required)."""

    proposal_id: str
    policy_hash: str
    document: str
    base_hash: str | None
    author: str
    created_at: float
    state: str
    decided_by: str | None = None
    decided_at: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "proposal_id": self.proposal_id,
            "policy_hash": self.policy_hash,
            "base_hash": self.base_hash,
            "author": self.author,
            "created_at": self.created_at,
            "state": self.state,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "note": self.note,
            "document": json.loads(self.document),
        }


@dataclass(frozen=True, slots=True)
class ActivePolicy:
    policy_hash: str
    document: str
    activated_at: float
    activated_by: str
    proposal_id: str
