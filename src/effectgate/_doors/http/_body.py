"""The HTTP edge for request bodies: who may send one, of what type, how many bytes.

:class:`BodyGate` is ASGI middleware in front of the whole API, so the order holds on every
route, present and future, whatever the framework would do with a body: a request that carries
one is authenticated from its headers (401), its ``Content-Type`` must be JSON (415), its
declared length must fit the cap (413), and it is read with the count running, so reading stops
as soon as it passes the cap (413, chunked bodies and lying headers included). Only then does
the app run, on the screened bytes replayed from memory. Roles, rate limits and parsing stay
with the routes. The framework's own body parsing is never used for intents: the action
endpoint hands the raw bytes to the core's strict parser, after :func:`refuse_deep`.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effectgate._doors._shared.models import problem_for
from effectgate._doors._shared.offload import offload
from effectgate._service import TokenBook
from effectgate.errors import (
    BadRequest,
    BodyTooLarge,
    EffectgateError,
    IntentError,
    UnsupportedMediaType,
)

__all__ = ["PRINCIPAL_KEY", "PROBLEM_JSON", "BodyGate", "refuse_deep"]

PROBLEM_JSON = "application/problem+json"
#: Where BodyGate leaves the principal it authenticated, for the route's own check.
PRINCIPAL_KEY = "effectgate.principal"
_JSON_CHARSETS = frozenset({"utf-8", "utf8"})


class BodyGate:
    """Authenticate, type-check and cap every request body before the app reads it.

    ``skip`` names paths with their own gate (the MCP door checks its token and its cap, and
    its SDK its content types). A request without a body passes untouched: its route
    authenticates it as before, and a bodiless PUT or DELETE needs no ``Content-Type``.
    ``skip_prefixes``: path prefixes with their own gate (the console: a session cookie, CSRF,
    small form bodies).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenBook,
        cap: int,
        skip: Collection[str] = (),
        skip_prefixes: Collection[str] = (),
    ) -> None:
        self.app = app
        self._tokens = tokens
        self._cap = cap
        self._skip = frozenset(skip)
        self._prefixes = tuple(skip_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"].removeprefix(scope.get("root_path", "")) in self._skip
            or scope["path"].removeprefix(scope.get("root_path", "")).startswith(self._prefixes)
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if "transfer-encoding" not in headers and (length is None or length.strip("0") == ""):
            await self.app(scope, receive, send)
            return
        try:
            # Whatever the route, a body from an unknown caller is never read, let alone parsed.
            # The lookup reads the ledger: in a worker thread, never on the event loop.
            who = await offload(self._tokens.from_header, headers.get("authorization"))
            wrong_type = _not_json(headers.get("content-type"))
            if wrong_type is not None:
                raise UnsupportedMediaType(wrong_type)
            body = await _read_capped(receive, length, self._cap)
        except EffectgateError as exc:
            status, doc, extra = problem_for(exc)
            await JSONResponse(doc, status_code=status, headers=extra, media_type=PROBLEM_JSON)(
                scope, receive, send
            )
            return
        if body is None:  # the client left mid-body: nobody to answer
            return
        await self.app({**scope, PRINCIPAL_KEY: who}, _replay(body, receive), send)


def _not_json(content_type: str | None) -> str | None:
    """Why ``content_type`` is not JSON, or None when it is (UTF-8, as RFC 8259 requires)."""
    if content_type is None:
        return "a request body needs Content-Type: application/json"
    media, _, params = content_type.partition(";")
    if media.strip().lower() != "application/json":
        return f"Content-Type {media.strip()[:100]!r} is not accepted: send application/json"
    for param in params.split(";"):
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in _JSON_CHARSETS:
            return (
                f"charset {charset[:40]!r} is not accepted: send application/json encoded as UTF-8"
            )
    return None


async def _read_capped(receive: Receive, declared: str | None, cap: int) -> bytes | None:
    """The body, or :class:`BodyTooLarge` as soon as it exceeds ``cap`` bytes.

    None when the client disconnects before the end of the body.
    """
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        if int(declared) > cap:
            raise BodyTooLarge(f"body of {int(declared)} bytes exceeds the {cap}-byte limit")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(f"body exceeds the {cap}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the screened body once, then the client's events."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def refuse_deep(raw: bytes, max_depth: int) -> None:
    """Refuse JSON nested deeper than ``max_depth`` with one linear scan, before any parser.

    Brackets inside strings do not count. Cheap when there are few brackets: a document with
    at most ``max_depth`` of them cannot be too deep, so the scan is skipped.
    """
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > max_depth:
                raise IntentError(f"nested deeper than {max_depth} levels", reason="too_deep")
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
