"""The evidence of a widening step, recomputed from the boundary's own records.

Two kinds, each over a closed time range ``[since, until)`` of one class, for the axis the step
moves:

* ``shadow_report``: the shadow comparisons of the class (:mod:`effectgate._execute.shadow`):
  how many cases were compared, agreed and disagreed, the disagreement rate;
* ``operations``: the rows the class journalled: how many, per state, how many were dispatched,
  the disagreement rate of the shadow comparisons in the range, and the figure of the axis
  (``max_value_seen``, ``value_dispatched``, ``targets_seen``; ``rate`` reads ``dispatched``).

:func:`measure` computes the figures and a digest over them and over the records counted;
``effectgate authority evidence`` prints that, and the step names it. :func:`verify` measures
again at the step and refuses anything that differs (the evidence is stale, or invented), so
``{"x": 1}`` is no longer evidence. What the step records is the recomputed figures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from effectgate._core.authority_evidence import (
    EVIDENCE_KINDS,
    compare,
    evidence_digest,
    parse_claim,
)
from effectgate._core.controls import AXES
from effectgate._core.intent import ActionClass, Registry
from effectgate._execute.shadow import build_report
from effectgate.errors import StepEvidenceRefused
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["MAX_WINDOW_ROWS", "measure", "verify"]

#: A window of operations larger than this is refused (narrow it): the figures are computed
#: from every row, in the operator's request.
MAX_WINDOW_ROWS = 100_000


def _shadow(
    store: Store, action: str, since: float, until: float
) -> tuple[dict[str, object], list[object]]:
    report = build_report(store.shadow_pairs(action), action, since=since, until=until)
    figures: dict[str, object] = {
        "cases": report.compared,
        "compared": report.compared,
        "agreed": len(report.agreed),
        "disagreed": len(report.disagreed),
        "awaiting_incumbent": len(report.awaiting_incumbent),
        "disagreement_rate": report.disagreement_rate,
    }
    records: list[Any] = sorted(
        [p.correlation_id, verdict, p.shadow_fingerprint, p.incumbent_fingerprint, p.model,
         p.harness_version]
        for verdict, cases in (("agreed", report.agreed), ("disagreed", report.disagreed))
        for p in cases
    )  # fmt: skip
    return figures, records


def _axis_figure(
    registry: Registry, action: str, axis: str, rows: list[Operation]
) -> dict[str, object]:
    cls = registry.get(action)
    sent = [r for r in rows if r.submitted_at is not None]
    if axis == "max_value":
        seen = [v for r in rows if (v := _value(cls, r)) is not None]
        return {"max_value_seen": str(max(seen)) if seen else None}
    if axis == "exposure":
        total = sum((v for r in sent if (v := _value(cls, r)) is not None), Decimal(0))
        return {"value_dispatched": str(total)}
    if axis == "allowed_targets":
        field = cls.target_field
        found = {str(r.effect[field]) for r in sent if field is not None and field in r.effect}
        return {"targets_seen": sorted(found)}
    return {}


def _value(cls: ActionClass, row: Operation) -> Decimal | None:
    return cls.value_of(row.effect) if cls.value_of is not None else None


def measure(
    store: Store, registry: Registry, action: str, axis: str, kind: str, since: float, until: float
) -> dict[str, object]:
    """The figures of ``kind`` for ``action`` over ``[since, until)``, for ``axis``, with the
    digest that binds them to the records counted (what a step names as its evidence)."""
    registry.get(action)  # raises UnknownActionClass
    if axis not in AXES:
        raise StepEvidenceRefused(f"unknown axis {axis!r}; axes: {', '.join(AXES)}", field="axis")
    if kind not in EVIDENCE_KINDS:
        raise StepEvidenceRefused(
            f"kind {kind!r}; one of: {', '.join(EVIDENCE_KINDS)}", field="evidence.kind"
        )
    for name, value in (("since", since), ("until", until)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise StepEvidenceRefused(f"{value!r} is not a time", field=f"evidence.{name}")
    since, until = float(since), float(until)
    if not since < until:
        raise StepEvidenceRefused("since must be before until", field="evidence.until")
    frame: dict[str, object] = {
        "kind": kind,
        "action": action,
        "axis": axis,
        "since": since,
        "until": until,
    }
    shadow, cases = _shadow(store, action, since, until)
    if kind == "shadow_report":
        figures, records = shadow, cases
    else:
        rows = store.operations_window(action, since, until, limit=MAX_WINDOW_ROWS + 1)
        if len(rows) > MAX_WINDOW_ROWS:
            raise StepEvidenceRefused(
                f"more than {MAX_WINDOW_ROWS} operations in the window: narrow it",
                field="evidence.since",
            )
        states = Counter(r.state.value for r in rows)
        figures = {
            "cases": len(rows),
            "states": dict(sorted(states.items())),
            "dispatched": sum(1 for r in rows if r.submitted_at is not None),
            "compared": shadow["compared"],
            "disagreement_rate": shadow["disagreement_rate"],
            **_axis_figure(registry, action, axis, rows),
        }
        records = [[r.op_key, r.state.value, r.fingerprint] for r in rows]
    out = {**frame, **figures}
    out["digest"] = evidence_digest(out, records)
    return out


def verify(
    store: Store,
    registry: Registry,
    action: str,
    axis: str,
    evidence: Mapping[str, object],
    *,
    now: float,
) -> dict[str, object]:
    """Recompute what ``evidence`` names and compare; return the figures to record (with
    ``verified_at``), or raise :class:`~effectgate.errors.StepEvidenceRefused` (its subclass
    ``StepEvidenceMismatch`` when the records say otherwise)."""
    claim = parse_claim(axis, evidence, now=now)
    if claim.figures.get("action", action) != action:
        raise StepEvidenceRefused(
            f"the evidence is for class {claim.figures['action']!r}, the step moves {action!r}",
            field="evidence.action",
        )
    measured = measure(store, registry, action, axis, claim.kind, claim.since, claim.until)
    compare(claim, measured)
    return {**measured, "verified_at": now}
