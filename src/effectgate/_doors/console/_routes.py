"""The console's routes: login, the pages, and the forms that act (each behind CSRF).

Roles: an approver sees the approvals queue only; an operator sees every page. An operator
limited to one tenant sees that tenant's rows; a kill switch or a breaker acts on every tenant,
so flipping one needs an operator of ``*`` (as over the API). Every action goes through the same
``Operator`` and ``Gate`` calls as the HTTP API and is audited there under the principal's name.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from effectgate._core.principals import Capability, Principal
from effectgate._doors.console._session import (
    COOKIE,
    PRE_COOKIE,
    LoginThrottle,
    Session,
    Sessions,
    same,
)
from effectgate._service import Service
from effectgate.errors import EffectgateError, PermissionDenied

__all__ = ["console_router"]

HERE: Final = Path(__file__).parent
_FORM_CAP: Final = 16 * 1024
_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: (path, label, capability) of the navigation, in order.
NAV: Final = (
    ("/console", "Dashboard", Capability.OPERATE),
    ("/console/approvals", "Approvals", Capability.APPROVE),
    ("/console/controls", "Kill switches and breakers", Capability.OPERATE),
    ("/console/divergences", "Divergences", Capability.OPERATE),
    ("/console/quarantine", "Quarantine", Capability.OPERATE),
    ("/console/operations", "Operations", Capability.OPERATE),
    ("/console/audit", "Audit", Capability.OPERATE),
)


class _Stop(Exception):
    """Leave the handler with this response (a redirect to the login, a refusal)."""

    def __init__(self, response: Response) -> None:
        super().__init__("stop")
        self.response = response


def console_router(service: Service) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    sessions = Sessions()
    throttle = LoginThrottle()

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        session: Session | None = ctx.get("session")
        who = session.principal if session else None
        nav = [(p, label) for p, label, cap in NAV if who is not None and who.may(cap)]
        flash = list(session.flash) if session else []
        ctx.setdefault("csrf", session.csrf if session else "")
        if session:
            session.flash.clear()
        out = templates.TemplateResponse(
            request,
            name,
            {"who": who, "nav": nav, "flash": flash, "path": request.url.path, **ctx},
            status_code=status,
        )
        out.headers.update(_HEADERS)
        return out

    def to(path: str) -> Response:
        return RedirectResponse(path, status_code=303, headers=_HEADERS)

    async def need(request: Request, capability: Capability) -> Session:
        session = sessions.get(request.cookies.get(COOKIE))
        if session is None:
            raise _Stop(to(f"/console/login?next={quote(request.url.path)}"))
        try:  # authenticated again on every request: a revoked token ends the session
            who = await run_in_threadpool(service.tokens.from_token, session.token)
        except EffectgateError:
            sessions.close(request.cookies.get(COOKIE))
            raise _Stop(to("/console/login")) from None
        session.principal = who
        if not who.may(capability):
            raise _Stop(
                render(request, "denied.html", 403, session=session, capability=capability.value)
            )
        return session

    async def form(request: Request, session: Session | None) -> dict[str, str]:
        """The urlencoded form, capped, with its CSRF token checked against the session."""
        if request.headers.get("content-type", "").split(";")[0].strip() != (
            "application/x-www-form-urlencoded"
        ):
            raise _Stop(Response("forms only", status_code=415, headers=_HEADERS))
        body = await request.body()
        if len(body) > _FORM_CAP:
            raise _Stop(Response("form too large", status_code=413, headers=_HEADERS))
        fields = {
            k: v[0]
            for k, v in parse_qs(
                body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=20
            ).items()
        }
        expected = session.csrf if session else request.cookies.get(PRE_COOKIE, "")
        if not expected or not same(fields.get("csrf", ""), expected):
            raise _Stop(Response("CSRF token missing or wrong", status_code=403, headers=_HEADERS))
        return fields

    def guarded(fn: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        @functools.wraps(fn)  # FastAPI reads the parameters through __wrapped__
        async def run(*args: Any, **kwargs: Any) -> Response:
            try:
                return await fn(*args, **kwargs)
            except _Stop as stop:
                return stop.response

        return run

    # --- login --------------------------------------------------------------------------

    @router.get("/console/login")
    @guarded
    async def login_page(request: Request, next: str = "/console") -> Response:
        pre = secrets.token_urlsafe(24)
        out = render(request, "login.html", csrf=pre, next=_local(next), error=None)
        out.set_cookie(
            PRE_COOKIE,
            pre,
            httponly=True,
            samesite="strict",
            path="/console",
            secure=request.url.scheme == "https",
            max_age=3600,
        )
        return out

    @router.post("/console/login")
    @guarded
    async def login(request: Request) -> Response:
        fields = await form(request, None)
        client = request.client.host if request.client else "?"
        nxt = _local(fields.get("next", "/console"))
        if throttle.blocked(client):
            return render(
                request,
                "login.html",
                429,
                csrf=fields["csrf"],
                next=nxt,
                error="Too many failed logins from this address; wait a few minutes.",
            )
        token = fields.get("token", "").strip()
        try:
            who: Principal = await run_in_threadpool(service.tokens.from_token, token)
            if not (who.may(Capability.OPERATE) or who.may(Capability.APPROVE)):
                raise PermissionDenied("the console is for operators and approvers")
        except EffectgateError as exc:
            throttle.failed(client)
            return render(
                request,
                "login.html",
                401,
                csrf=fields["csrf"],
                next=nxt,
                error=f"Token not accepted: {exc.message}",
            )
        sid, _ = sessions.open(who, token)
        await run_in_threadpool(_audit, service, "console_login", who)
        start = nxt if nxt != "/console" or who.may(Capability.OPERATE) else "/console/approvals"
        out = to(start)
        out.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            path="/console",
            secure=request.url.scheme == "https",
        )
        out.delete_cookie(PRE_COOKIE, path="/console")
        return out

    @router.post("/console/logout")
    @guarded
    async def logout(request: Request) -> Response:
        session = sessions.get(request.cookies.get(COOKIE))
        if session is not None:
            await form(request, session)
            sessions.close(request.cookies.get(COOKIE))
            await run_in_threadpool(_audit, service, "console_logout", session.principal)
        out = to("/console/login")
        out.delete_cookie(COOKIE, path="/console")
        return out

    from effectgate._doors.console._pages import add_pages

    add_pages(router, service, need=need, form=form, render=render, to=to, guarded=guarded)
    return router


def _local(path: str) -> str:
    """Only a path inside the console may follow a login (no open redirect)."""
    if path.startswith("/console") and "//" not in path and "\\" not in path:
        return path
    return "/console"


def _audit(service: Service, kind: str, who: Principal) -> None:
    service.store.append_audit(
        kind, {"principal": who.name, "role": who.role.value, "scope": who.scope}, now=time.time()
    )
