"""The console's quarantine queue (issues 12 and 17): list, show, resolve, take over.

Every read and write goes through :class:`~effectgate._execute.quarantine.QuarantineService`,
the same service as ``effectgate quarantine`` and ``/v1/admin/quarantine``: a resolution is
planned and applied there (invariant 10: a row that may have been dispatched is never released
for dispatch again), audited under the operator's name, and a refusal is flashed as
effectgate's own message and writes nothing. Operators only; a tenant operator sees and settles
its tenant's rows. Forms carry the session's CSRF token like every other console form.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from effectgate._core.principals import Capability
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._core.states import NON_TERMINAL, State
from effectgate._doors._shared.controls import visible_scope
from effectgate._doors._shared.models import describe
from effectgate._doors.console._session import Session
from effectgate._execute.quarantine import QuarantineService, QuarantineView
from effectgate._service import Service
from effectgate.errors import EffectgateError, PermissionDenied, ResolutionRefused
from effectgate.store.base import Operation

__all__ = ["add_quarantine_pages", "age_text", "resolution_from"]

Need = Callable[[Request, Capability], Awaitable[Session]]
Form = Callable[[Request, Session | None], Awaitable[dict[str, str]]]
Act = Callable[[Session, str, Callable[[], str]], Awaitable[Response]]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def age_text(seconds: float) -> str:
    """A wait as a person reads it: ``45s``, ``12m 03s``, ``5h 20m``, ``3d 4h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _listing(queue: QuarantineService, scope: str | None) -> dict[str, Any]:
    now = queue.clock()
    rows = [
        {
            "op": op,
            "age": age_text(now - op.updated_at),
            "since": _when(op.updated_at),
            "dispatched": op.submitted_at is not None,
            "why": op.detail or op.reason or "-",
        }
        for op in queue.list(scope, limit=500)
    ]
    return {"rows": rows, "count": len(rows)}


def _shown(view: QuarantineView) -> dict[str, Any]:
    def entries(trail: list[Any]) -> list[dict[str, Any]]:
        return [
            {"seq": e.seq, "at": _when(e.at), "kind": e.kind, "detail": e.detail_text}
            for e in trail
        ]

    outcome, message = describe(view.row)
    return {
        "view": view,
        "row": view.row,
        "outcome": outcome.value,
        "message": message,
        "specs": [
            {**s.to_dict(), "at": _when(s.at), "expires": _when(s.expires_at)}
            for s in view.speculations
        ],
        "speculative": entries(view.speculative_audit),
        "ledger": entries(view.ledger_audit),
        "outcomes": [o.value for o in ResolutionOutcome],
        "kinds": [k.value for k in EvidenceKind],
        "takeable": view.row.state in NON_TERMINAL and view.row.state is not State.QUARANTINED,
    }


def _text(fields: dict[str, str], name: str) -> str | None:
    value = fields.get(name, "").strip()
    return value or None


def resolution_from(fields: dict[str, str], by: str) -> Resolution:
    """The resolution a console form describes; :class:`ResolutionRefused` if it is not one."""
    reason = _text(fields, "reason")
    if reason is None:
        raise ResolutionRefused("give a reason: it goes into the audit log")
    # Resolution and Proof check the outcome and the evidence kind and refuse what is not one.
    return Resolution(
        outcome=cast(ResolutionOutcome, fields.get("outcome", "")),
        by=by,
        proof=Proof(
            cast(EvidenceKind, fields.get("evidence", "")),
            reference=_text(fields, "reference"),
            note=_text(fields, "note"),
        ),
        reason=reason,
        venue_id=_text(fields, "venue_id"),
    )


def add_quarantine_pages(
    router: APIRouter,
    service: Service,
    *,
    need: Need,
    form: Form,
    render: Callable[..., Response],
    guarded: Callable[[Callable[..., Awaitable[Response]]], Callable[..., Awaitable[Response]]],
    act: Act,
) -> None:
    queue = QuarantineService(
        service.store, clock=service.operator.clock, approval_ttl=service.config.approvals.ttl
    )

    @router.get("/console/quarantine")
    @guarded
    async def quarantine(request: Request) -> Response:
        session = await need(request, Capability.OPERATE)
        scope = visible_scope(session.principal, None)
        data = await run_in_threadpool(_listing, queue, scope)
        return render(request, "quarantine.html", session=session, csrf=session.csrf, **data)

    @router.get("/console/quarantine/{scope}/{operation_id}")
    @guarded
    async def show(request: Request, scope: str, operation_id: str) -> Response:
        session = await need(request, Capability.OPERATE)
        try:
            visible_scope(session.principal, scope)
        except PermissionDenied as exc:
            return render(request, "denied.html", 403, session=session, capability=exc.message)
        try:
            view = await run_in_threadpool(queue.show, scope, operation_id)
        except EffectgateError:
            return render(request, "missing.html", 404, session=session, what=operation_id)
        return render(
            request, "quarantine_row.html", session=session, csrf=session.csrf, **_shown(view)
        )

    @router.post("/console/quarantine/{scope}/{operation_id}/resolve")
    @guarded
    async def resolve(request: Request, scope: str, operation_id: str) -> Response:
        session = await need(request, Capability.OPERATE)
        fields = await form(request, session)
        who = session.principal

        def run() -> str:
            visible_scope(who, scope)
            row: Operation = queue.resolve(scope, operation_id, resolution_from(fields, who.name))
            return f"Resolved {operation_id} {fields['outcome']}: now {row.state.value}."

        return await act(session, f"/console/quarantine/{scope}/{operation_id}", run)

    @router.post("/console/quarantine/{scope}/{operation_id}/take-over")
    @guarded
    async def take_over(request: Request, scope: str, operation_id: str) -> Response:
        session = await need(request, Capability.OPERATE)
        fields = await form(request, session)
        who = session.principal

        def run() -> str:
            visible_scope(who, scope)
            reason = _text(fields, "reason")
            if reason is None:
                raise ResolutionRefused("give a reason: it goes into the audit log")
            queue.take_over(scope, operation_id, by=who.name, reason=reason)
            return f"Took {operation_id} into the quarantine queue: it waits for a resolution."

        return await act(session, f"/console/quarantine/{scope}/{operation_id}", run)
