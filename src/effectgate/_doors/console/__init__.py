"""The operator console: server-rendered pages at ``/console`` in ``effectgate serve``.

Jinja2 templates, a stylesheet and htmx (vendored, ``static/``; no node build and no CDN). Every
page works without JavaScript: links and forms are plain HTML, and htmx only boosts them (no
full reload) and refreshes the dashboard's charts. Login exchanges an operator or approver token
for a server-side session (``_session``); every form carries a CSRF token. What each role sees,
and why the console never holds more than the principal's own authority: docs/console.md.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from effectgate._doors.console._routes import HERE, console_router
from effectgate._service import Service

__all__ = ["PREFIX", "mount_console"]

PREFIX = "/console"


def mount_console(app: FastAPI, service: Service) -> None:
    """Add the console's routes and static files to ``app``."""
    app.include_router(console_router(service))
    app.mount(
        f"{PREFIX}/static", StaticFiles(directory=str(HERE / "static")), name="console-static"
    )
