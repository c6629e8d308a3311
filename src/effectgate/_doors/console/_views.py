"""What each console page shows, read from the ledger (synchronous: run in the threadpool).

Each loader takes the service and the scope filter the principal may see (``None``: every
scope, an operator of ``*``) and returns plain data for a template. Nothing here writes.
"""

from __future__ import annotations

import time
from typing import Any

from effectgate._core.states import NON_TERMINAL, State
from effectgate._doors._shared.models import describe
from effectgate._doors.console._charts import Chart, age_buckets, chart, per_minute
from effectgate._service import Service
from effectgate.store.base import Operation

__all__ = ["approvals", "controls", "dashboard", "divergences", "operation", "operations"]

_PENDING_LIMIT = 200
_TRAIL_LIMIT = 500


def _row(op: Operation, service: Service) -> dict[str, Any]:
    outcome, message = describe(op)
    return {
        "op": op,
        "outcome": outcome.value,
        "message": message,
        "updated": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(op.updated_at)),
    }


def approvals(service: Service, scope: str | None) -> list[dict[str, Any]]:
    """Pending approvals: the intent, its fingerprint, the policy's reason, the approvals so
    far, and every payload refused under the same id (``idempotency_conflict`` audit lines)."""
    store = service.store
    out = []
    for op in store.list_operations(
        state=State.AWAITING_APPROVAL, scope=scope, limit=_PENDING_LIMIT
    ):
        req = store.approval_request(op.scope, op.operation_id)
        got = store.list_approvals(op.scope, op.operation_id)
        trail = store.audit_entries(
            scope=op.scope, operation_id=op.operation_id, limit=_TRAIL_LIMIT
        )
        conflicts = [
            {"at": _when(e.at), "offered": str(e.detail.get("offered_fingerprint", ""))}
            for e in trail
            if e.kind == "idempotency_conflict"
        ]
        out.append(
            {
                **_row(op, service),
                "intent": dict(op.intent),
                "required": req.required if req else 1,
                "expires": _when(req.expires_at) if req else None,
                "approvers": [a.approver for a in got if a.verdict == "approve"],
                "conflicts": conflicts,
            }
        )
    return out


def controls(service: Service) -> list[dict[str, Any]]:
    held = service.store.count_held()
    return [
        {"c": c, "held": held.get(c.action, 0), "changed": _when(c.updated_at)}
        for c in service.operator.status()
    ]


def divergences(service: Service, scope: str | None) -> list[dict[str, Any]]:
    return [
        {"d": d, "seen": _when(d.first_seen)}
        for d in service.store.list_divergences_in(scope, limit=1000)
    ]


def operations(
    service: Service,
    scope: str | None,
    *,
    state: State | None,
    action: str | None,
    operation_id: str | None,
) -> list[dict[str, Any]]:
    if operation_id:
        scopes = [scope] if scope else sorted({"default", *_known_scopes(service)})
        found = [service.store.get(s, operation_id) for s in scopes]
        return [_row(op, service) for op in found if op is not None]
    rows = service.store.list_operations(state=state, action=action, scope=scope, limit=200)
    return [_row(op, service) for op in rows]


def operation(service: Service, scope: str, operation_id: str) -> dict[str, Any] | None:
    op = service.store.get(scope, operation_id)
    if op is None:
        return None
    trail = service.store.audit_entries(scope=scope, operation_id=operation_id, limit=_TRAIL_LIMIT)
    return {
        **_row(op, service),
        "intent": dict(op.intent),
        "effect": dict(op.effect),
        # Non-terminal: in the quarantine queue, or an operator may take it over into it.
        "queue": op.state in NON_TERMINAL,
        "trail": [
            {"seq": e.seq, "at": _when(e.at), "kind": e.kind, "detail": e.detail_text}
            for e in trail
        ],
    }


def dashboard(service: Service, scope: str | None) -> dict[str, Any]:
    """Dispatch rates per class, counts by state, holds, uncertain rows by age, divergences
    and alarms. The dispatch log is the envelope's (kept at least a day), so the rates cost an
    indexed range read per window."""
    store = service.store
    now = time.time()
    by_state: dict[str, int] = {s.value: 0 for s in State}
    if scope is None:
        for (_, state), n in store.count_by_state().items():
            by_state[state] = by_state.get(state, 0) + n
    uncertain = store.list_operations(state=State.SUBMITTED, scope=scope, limit=1000)
    ages = [now - (op.submitted_at or op.updated_at) for op in uncertain]
    charts: list[Chart] = [chart("Uncertain rows by age", age_buckets(ages), key="age")]
    if scope is None:  # the counters span every tenant: an operator of '*' only
        charts = [
            chart(
                "Dispatch rate, last 5 minutes",
                per_minute(store.count_dispatched(now - 300), 300),
                key="class",
                column="per minute",
                empty="nothing sent",
            ),
            chart(
                "Dispatch rate, last hour",
                per_minute(store.count_dispatched(now - 3600), 3600),
                key="class",
                column="per minute",
                empty="nothing sent",
            ),
            chart("Operations by state", by_state, key="state"),
            chart(
                "Held by a control, per class",
                dict(sorted(store.count_held().items())),
                key="class",
                empty="nothing held",
            ),
            *charts,
            chart(
                "Divergences by kind",
                dict(sorted(store.count_divergences().items())),
                key="kind",
                empty="none",
            ),
        ]
    return {
        "charts": charts,
        "alerts": [{"a": a, "at": _when(a.at)} for a in store.list_alerts_in(scope, limit=20)],
        "uncertain": len(uncertain),
        "oldest": round(max(ages), 1) if ages else None,
    }


def _known_scopes(service: Service) -> set[str]:
    return {p.scope for p in service.store.list_principals() if p.scope != "*"}


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
