"""The console's pages and their forms (see ``_routes`` for login, sessions and CSRF).

A form posts, the action runs through the same ``Operator`` or ``Gate`` call as the HTTP API
(audited there under the principal's name), the outcome is flashed, and the browser is sent back
to the page (303). A refusal from effectgate (a stale fingerprint, a self-approval, a scoped
operator reaching past its tenant) is flashed as effectgate's own message and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from effectgate._core.principals import Capability, Principal
from effectgate._core.states import State
from effectgate._doors._shared.controls import visible_scope
from effectgate._doors.console import _views as views
from effectgate._doors.console._quarantine import add_quarantine_pages
from effectgate._doors.console._session import Session
from effectgate._service import Service
from effectgate.errors import ControlError, EffectgateError, PermissionDenied

__all__ = ["add_pages"]

Need = Callable[[Request, Capability], Awaitable[Session]]
Form = Callable[[Request, Session | None], Awaitable[dict[str, str]]]


def add_pages(
    router: APIRouter,
    service: Service,
    *,
    need: Need,
    form: Form,
    render: Callable[..., Response],
    to: Callable[[str], Response],
    guarded: Callable[[Callable[..., Awaitable[Response]]], Callable[..., Awaitable[Response]]],
) -> None:
    op = service.operator

    async def act(session: Session, back: str, fn: Callable[[], str]) -> Response:
        """Run ``fn`` (in the threadpool), flash what it says or effectgate's refusal."""
        try:
            session.flash.append(await run_in_threadpool(fn))
        except EffectgateError as exc:
            session.flash.append(f"Refused ({exc.code}): {exc.message}")
        return to(back)

    def reason_of(fields: dict[str, str]) -> str:
        reason = fields.get("reason", "").strip()
        if not reason:
            raise ControlError("give a reason: it goes into the audit log")
        if len(reason) > 500:
            raise ControlError("the reason is longer than 500 characters")
        return reason

    def everywhere(who: Principal, what: str) -> None:
        if who.scope != "*":
            raise PermissionDenied(f"{what} acts on every tenant: needs an operator of scope '*'")

    # --- dashboard ----------------------------------------------------------------------

    @router.get("/console")
    @guarded
    async def dashboard(request: Request) -> Response:
        session = await need(request, Capability.APPROVE)
        if not session.principal.may(Capability.OPERATE):
            return to("/console/approvals")
        scope = visible_scope(session.principal, None)
        data = await run_in_threadpool(views.dashboard, service, scope)
        partial = request.headers.get("hx-request") and not request.headers.get("hx-boosted")
        name = "_charts.html" if partial else "dashboard.html"
        return render(request, name, session=session, csrf=session.csrf, **data)

    # --- approvals ----------------------------------------------------------------------

    @router.get("/console/approvals")
    @guarded
    async def approvals(request: Request) -> Response:
        session = await need(request, Capability.APPROVE)
        scope = visible_scope(session.principal, None)
        rows = await run_in_threadpool(views.approvals, service, scope)
        return render(request, "approvals.html", session=session, csrf=session.csrf, rows=rows)

    @router.post("/console/approvals/{scope}/{operation_id}")
    @guarded
    async def decide(request: Request, scope: str, operation_id: str) -> Response:
        session = await need(request, Capability.APPROVE)
        fields = await form(request, session)
        who = session.principal

        def run() -> str:
            visible_scope(who, scope)
            reason = reason_of(fields)
            verdict = fields.get("verdict")
            if verdict not in ("approve", "refuse"):
                raise ControlError("verdict must be approve or refuse")
            fn = op.approve if verdict == "approve" else op.refuse
            out = fn(
                operation_id,
                fingerprint=fields.get("fingerprint", ""),
                approver=who.name,
                scope=scope,
                reason=reason,
            )
            row = out.operation
            if out.released and row.state is State.VALIDATED:
                # As over the API: dispatch now, the controls checked in that transaction.
                row = service.gate.dispatch(operation_id, scope=scope)
            if verdict == "refuse":
                return f"Refused {operation_id}: it ends {row.state.value}."
            if not out.complete:
                return f"Approved {operation_id}: {out.approvals} of {out.required} approvals."
            return f"Approved {operation_id}: now {row.state.value}."

        return await act(session, "/console/approvals", run)

    # --- kill switches and breakers -------------------------------------------------------

    @router.get("/console/controls")
    @guarded
    async def controls(request: Request) -> Response:
        session = await need(request, Capability.OPERATE)
        rows = await run_in_threadpool(views.controls, service)
        return render(request, "controls.html", session=session, csrf=session.csrf, rows=rows)

    @router.post("/console/controls/{action}/{control}")
    @guarded
    async def flip(request: Request, action: str, control: str) -> Response:
        session = await need(request, Capability.OPERATE)
        fields = await form(request, session)
        who = session.principal

        def run() -> str:
            everywhere(who, "a kill switch or a breaker")
            reason = reason_of(fields)
            if control == "kill":
                op.kill(action, operator=who.name, reason=reason)
                return f"Kill switch on for {action}: every new dispatch is held."
            if control == "release":
                op.release(action, operator=who.name, reason=reason)
                return f"Kill switch off for {action}; held rows are dispatched by the dispatcher."
            if control == "reset-breaker":
                op.reset_breaker(action, operator=who.name, reason=reason)
                return f"Breaker closed for {action}."
            raise ControlError(f"unknown control {control!r}")

        return await act(session, "/console/controls", run)

    # --- divergences; the quarantine queue (in ``_quarantine``) ------------------------------

    @router.get("/console/divergences")
    @guarded
    async def divergences(request: Request) -> Response:
        session = await need(request, Capability.OPERATE)
        scope = visible_scope(session.principal, None)
        rows = await run_in_threadpool(views.divergences, service, scope)
        return render(request, "divergences.html", session=session, csrf=session.csrf, rows=rows)

    add_quarantine_pages(
        router, service, need=need, form=form, render=render, guarded=guarded, act=act
    )

    # --- operations and their audit trail -------------------------------------------------

    @router.get("/console/operations")
    @guarded
    async def operations(
        request: Request, operation_id: str = "", state: str = "", action: str = "", scope: str = ""
    ) -> Response:
        session = await need(request, Capability.OPERATE)
        error = None
        rows: list[dict[str, Any]] = []
        try:
            visible = visible_scope(session.principal, scope.strip() or None)
            wanted = State(state) if state else None
            rows = await run_in_threadpool(
                lambda: views.operations(
                    service,
                    visible,
                    state=wanted,
                    action=action.strip() or None,
                    operation_id=operation_id.strip() or None,
                )
            )
        except (ValueError, EffectgateError) as exc:
            error = getattr(exc, "message", None) or f"unknown state {state!r}"
        return render(
            request,
            "operations.html",
            session=session,
            csrf=session.csrf,
            rows=rows,
            error=error,
            states=[s.value for s in State],
            q={"operation_id": operation_id, "state": state, "action": action, "scope": scope},
        )

    @router.get("/console/operations/{scope}/{operation_id}")
    @guarded
    async def operation(request: Request, scope: str, operation_id: str) -> Response:
        session = await need(request, Capability.OPERATE)
        try:
            visible_scope(session.principal, scope)
        except PermissionDenied as exc:
            return render(request, "denied.html", 403, session=session, capability=exc.message)
        row = await run_in_threadpool(views.operation, service, scope, operation_id)
        if row is None:
            return render(request, "missing.html", 404, session=session, what=operation_id)
        return render(request, "operation.html", session=session, csrf=session.csrf, row=row)

    # --- audit verification ---------------------------------------------------------------

    @router.get("/console/audit")
    @guarded
    async def audit(request: Request) -> Response:
        session = await need(request, Capability.OPERATE)
        return render(request, "audit.html", session=session, csrf=session.csrf, result=None)

    @router.post("/console/audit")
    @guarded
    async def verify(request: Request) -> Response:
        session = await need(request, Capability.OPERATE)
        await form(request, session)
        try:
            everywhere(session.principal, "verifying the whole audit log")
            result = (await run_in_threadpool(op.verify_audit)).to_dict()
        except EffectgateError as exc:
            session.flash.append(f"Refused ({exc.code}): {exc.message}")
            return to("/console/audit")
        return render(request, "audit.html", session=session, csrf=session.csrf, result=result)
