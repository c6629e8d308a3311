"""Staged authority's rules as values: which steps widen an axis, what evidence a widening needs,
and how a reversal stays inside every tightening. Pure, no I/O.

A step that widens an envelope axis must name evidence the boundary can recompute from its own
records: a shadow report or a window of operations of the class, over a closed time range, with
the figures and the digest the boundary gave for it (:func:`parse_claim` checks its shape, the
execute layer recomputes it and :func:`compare` says what differs). A step that only tightens
needs a note, no proof, and no breaker trip ever undoes it: a reversal sets an axis to the
narrower of its current value and the value before the step it reverses (:func:`narrowest`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from effectgate.errors import ControlError, StepEvidenceMismatch, StepEvidenceRefused

__all__ = [
    "AUTOMATIC_REVERSALS",
    "EVIDENCE_KINDS",
    "EvidenceClaim",
    "compare",
    "evidence_digest",
    "narrowest",
    "parse_claim",
    "reversal_for",
    "widens",
]

#: What a widening step may name as its evidence: a shadow report of the class over a time
#: range, or the class's operations journalled in one.
EVIDENCE_KINDS: Final = ("shadow_report", "operations")
#: The conditions that reverse a widening step automatically (``manual`` is none of them: an
#: operator can always step back by hand, so naming it alone names nothing that fires).
AUTOMATIC_REVERSALS: Final = (
    "breaker_trip",
    "breaker_trip:rejection_rate",
    "breaker_trip:value_rate",
    "breaker_trip:repeats",
    "breaker_trip:new_targets",
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: Keys of a claim that are not figures: where the window is and what it proves.
_FRAME = ("kind", "axis", "since", "until", "digest")


def _pair(value: object, keys: tuple[str, str]) -> tuple[Decimal, float]:
    if not isinstance(value, Mapping):
        raise ControlError(f"{value!r} is not a {keys[0]} and {keys[1]}", field="axis")
    return Decimal(str(value[keys[0]])), float(value[keys[1]])


def widens(axis: str, old: object, new: object) -> bool:
    """Whether moving ``axis`` from ``old`` to ``new`` (canonical forms, None: unconstrained)
    allows anything the old value did not, on any of its dimensions."""
    if old is None:
        return False
    if new is None:
        return True
    if axis == "max_value":
        return Decimal(str(new)) > Decimal(str(old))
    if axis == "allowed_targets":
        return not set(_targets(new)) <= set(_targets(old))
    keys = ("limit", "window") if axis == "exposure" else ("limit", "interval")
    was, now = _pair(old, keys), _pair(new, keys)
    return now[0] > was[0] or now[1] < was[1]


def _targets(value: object) -> list[str]:
    return [str(t) for t in value] if isinstance(value, list | tuple) else []


def narrowest(axis: str, a: object, b: object) -> object:
    """The value of ``axis`` that allows only what both ``a`` and ``b`` allow (canonical)."""
    if a is None:
        return b
    if b is None:
        return a
    if axis == "max_value":
        return str(min(Decimal(str(a)), Decimal(str(b))))
    if axis == "allowed_targets":
        return sorted(set(_targets(a)) & set(_targets(b)))
    second = "window" if axis == "exposure" else "interval"
    pa, pb = _pair(a, ("limit", second)), _pair(b, ("limit", second))
    limit = min(pa[0], pb[0])
    out: dict[str, object] = {"limit": str(limit) if axis == "exposure" else int(limit)}
    out[second] = max(pa[1], pb[1])
    return out


def reversal_for(widening: bool, reverse_on: str | None) -> str:
    """The reversal condition a step records. A widening step names an automatic one (default
    ``breaker_trip``); a tightening step is reversed only by hand (``manual``), since a breaker
    undoing it would loosen the envelope in the middle of the trouble that tripped it."""
    if widening:
        cond = reverse_on or "breaker_trip"
        if cond == "manual":
            raise ControlError(
                "'manual' alone is not a reversal condition: a step that widens an axis names "
                f"the breaker trip that undoes it ({', '.join(AUTOMATIC_REVERSALS)}); an "
                "operator can always step back by hand",
                field="reverse_on",
            )
        if cond not in AUTOMATIC_REVERSALS:
            raise ControlError(
                f"unknown reversal condition {cond!r}; one of: {', '.join(AUTOMATIC_REVERSALS)}",
                field="reverse_on",
            )
        return cond
    if reverse_on in (None, "manual"):
        return "manual"
    if reverse_on in AUTOMATIC_REVERSALS:
        raise ControlError(
            f"a step that tightens an axis is never reversed by a breaker trip ({reverse_on!r} "
            "would loosen it); leave reverse_on out",
            field="reverse_on",
        )
    raise ControlError(
        f"unknown reversal condition {reverse_on!r}; one of: manual, "
        f"{', '.join(AUTOMATIC_REVERSALS)}",
        field="reverse_on",
    )


def evidence_digest(figures: Mapping[str, object], records: list[Any]) -> str:
    """``sha256:`` over the canonical JSON of the window's figures and the records it counted
    (what a later recomputation must reproduce exactly)."""
    body = json.dumps(
        {"figures": dict(figures), "records": records},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
        default=str,
    )
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class EvidenceClaim:
    """What a widening step says it rests on: the window, and the figures and digest claimed."""

    kind: str
    axis: str
    since: float
    until: float
    digest: str
    figures: Mapping[str, object]


def _time(evidence: Mapping[str, object], name: str) -> float:
    value = evidence.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StepEvidenceRefused(
            f"{value!r} is not a time (epoch seconds): the window the evidence covers",
            field=f"evidence.{name}",
        )
    return float(value)


def parse_claim(axis: str, evidence: object, *, now: float) -> EvidenceClaim:
    """Check the shape of a widening step's evidence; the figures are compared later."""
    if not isinstance(evidence, Mapping) or evidence.get("kind") not in EVIDENCE_KINDS:
        got = evidence.get("kind") if isinstance(evidence, Mapping) else None
        raise StepEvidenceRefused(
            f"a step that widens {axis} names evidence the boundary checks from its own "
            f"records: kind {' or '.join(map(repr, EVIDENCE_KINDS))} with its window, figures "
            f"and digest (`effectgate authority evidence`), not {got!r}",
            field="evidence.kind",
        )
    if evidence.get("axis") != axis:
        raise StepEvidenceRefused(
            f"the evidence is for axis {evidence.get('axis')!r}, the step moves {axis!r}",
            field="evidence.axis",
        )
    since, until = _time(evidence, "since"), _time(evidence, "until")
    if not since < until:
        raise StepEvidenceRefused("since must be before until", field="evidence.until")
    if until > now:
        raise StepEvidenceRefused(
            "the window has not closed yet: its figures could still change", field="evidence.until"
        )
    digest = evidence.get("digest")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise StepEvidenceRefused(
            "the digest the boundary gave for this window (sha256:<64 hex>)",
            field="evidence.digest",
        )
    figures = {k: v for k, v in evidence.items() if k not in _FRAME}
    return EvidenceClaim(str(evidence["kind"]), axis, since, until, digest, figures)


def compare(claim: EvidenceClaim, measured: Mapping[str, object]) -> None:
    """Refuse the claim unless every figure it names, and its digest, are what the boundary
    recomputed (``measured``: the figures and ``digest``); an empty window proves nothing."""
    for name, value in sorted(claim.figures.items()):
        if name not in measured:
            raise StepEvidenceRefused(
                f"{name!r} is not a figure of a {claim.kind} window", field=f"evidence.{name}"
            )
        if measured[name] != value:
            raise StepEvidenceMismatch(
                f"the records say {measured[name]!r}, the evidence {value!r}",
                field=f"evidence.{name}",
            )
    if measured.get("digest") != claim.digest:
        raise StepEvidenceMismatch(
            "the window's records changed since this digest was taken (or it was never the "
            "boundary's): take the evidence again",
            field="evidence.digest",
        )
    if not measured.get("cases"):
        raise StepEvidenceRefused(
            "the window holds nothing to judge by (no operations, or no compared cases)",
            field="evidence.since",
        )
