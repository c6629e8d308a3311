"""The paper venue over real HTTP (stdlib only), for end-to-end rehearsals.

Endpoints (JSON bodies; every ``/v1/orders`` and ``/v1/records`` call needs
``Authorization: Bearer <api_key>``):

- ``POST /v1/orders`` with ``Idempotency-Key``, body ``{"action": str, "effect": {...}}``:
  201 ``{"venue_id", "created"}``; 422 ``{"error": "rejected", "reason"}`` when the venue refuses.
  An injected fault (:meth:`PaperVenue.fail_next`) drops the connection without a reply.
- ``GET /v1/orders?key=K``: 200 ``{"venue_ids": [...]}`` (visible records only).
- ``GET /v1/records?after_key=&after_id=&limit=N``: 200 ``{"records": [...]}`` sorted by key, id.
- ``POST /v1/dry-runs`` with ``Idempotency-Key`` (only with a sandbox), body ``{"action",
  "effect", "attempt"}``: 200 ``{"verdict", "reason", "sandbox_key", "subject", "expires_in"}``;
  nothing is applied (:mod:`effectgate.adapters._paper_sandbox`).
- ``GET /v1/health``: 200 ``{"status": "ok"}`` (no credential needed, reveals nothing).
- ``GET /openapi.json``: this protocol as OpenAPI 3.1 (:mod:`effectgate.adapters._paper_openapi`;
  also ``docs/paper-venue.openapi.json``, explained in ``docs/paper-venue.md``).

The API key is never logged or echoed, and the server writes no access log.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from effectgate._execute.adapter import VenueRecord
from effectgate.adapters._paper_openapi import openapi
from effectgate.adapters._paper_sandbox import PaperSandbox, dry_run_reply
from effectgate.adapters.paper import PaperVenue, VenueRejection, submitted_version

__all__ = ["MAX_BODY_BYTES", "PaperVenueServer", "serve_paper_venue"]

MAX_BODY_BYTES = 64 * 1024
MAX_PAGE = 10_000
_MAX_DISCARD_BYTES = 16 * MAX_BODY_BYTES
_POLL_SECONDS = 0.05  # how long stop() may wait for the serve loop to notice
_MAX_KEY_CHARS = 255


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        venue: PaperVenue,
        api_key: str,
        sandbox: PaperSandbox | None = None,
    ) -> None:
        self.venue = venue
        self.sandbox = sandbox
        self.api_key = api_key.encode("utf-8")
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    # Track live connections so stop() can cut idle keep-alive ones: otherwise a handler thread
    # would keep answering a pooled client after the server was "stopped".
    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self.connections_lock:
            live = list(self.connections)
        for sock in live:
            with contextlib.suppress(OSError):  # already closed by its handler
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as the HTTP adapter's client expects
    timeout = 30  # an idle keep-alive connection does not hold a thread forever
    # Buffer the reply (flushed once per request) and send it without Nagle: headers and body
    # as separate small writes otherwise meet the client's delayed ACK, ~40 ms per request.
    wbufsize = -1
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet by default: no access log (and so no chance of logging a header)."""

    # -- routing ---------------------------------------------------------------------------

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/v1/dry-runs" and self.server.sandbox is not None:
            self._dry_run(self.server.sandbox)
            return
        if path != "/v1/orders":
            self._drain_or_close()
            self._send(HTTPStatus.NOT_FOUND, {"error": "not_found"})
            return
        body = self._read_body()
        if body is None:
            return
        if not self._authorised():
            return
        key = self.headers.get("Idempotency-Key", "")
        if not key or len(key) > _MAX_KEY_CHARS:
            self._send(HTTPStatus.BAD_REQUEST, {"error": "idempotency_key_required"})
            return
        parsed = _parse_order(body)
        if parsed is None:
            self._send(HTTPStatus.BAD_REQUEST, {"error": "invalid_body"})
            return
        action, effect = parsed
        try:
            answer = self.server.venue.submit(key, action, effect)
        except VenueRejection as exc:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": "rejected", "reason": exc.reason})
            return
        except ConnectionError:
            # An injected fault: the caller must not hear anything, as with a real lost reply.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        venue_id, created = answer
        reply: dict[str, object] = {"venue_id": venue_id, "created": created}
        version = submitted_version(self.server.venue, answer)
        if version is not None:
            reply["version"] = version
        self._send(HTTPStatus.CREATED, reply)

    def _dry_run(self, sandbox: PaperSandbox) -> None:
        body = self._read_body()
        if body is None or not self._authorised():
            return
        key = self.headers.get("Idempotency-Key", "")
        if not key or len(key) > _MAX_KEY_CHARS:
            self._send(HTTPStatus.BAD_REQUEST, {"error": "idempotency_key_required"})
            return
        status, reply = dry_run_reply(sandbox, key, body)
        self._send(HTTPStatus(status), reply)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        if parts.path == "/v1/health":
            self._send(HTTPStatus.OK, {"status": "ok"})
        elif parts.path == "/openapi.json":
            self._send(HTTPStatus.OK, openapi())
        elif parts.path == "/v1/orders":
            if self._authorised():
                self._get_orders(query)
        elif parts.path == "/v1/records":
            if self._authorised():
                self._get_records(query)
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": "not_found"})

    def _get_orders(self, query: dict[str, list[str]]) -> None:
        keys = query.get("key", [])
        if len(keys) != 1 or not keys[0]:
            self._send(HTTPStatus.BAD_REQUEST, {"error": "key_required"})
            return
        found = self.server.venue.find_versioned(keys[0])
        self._send(
            HTTPStatus.OK,
            {"venue_ids": [i for i, _ in found], "versions": {i: v for i, v in found}},
        )

    def _get_records(self, query: dict[str, list[str]]) -> None:
        after_key, after_id = query.get("after_key", []), query.get("after_id", [])
        limits = query.get("limit", ["1000"])
        if (
            len(after_key) > 1
            or len(after_id) > 1
            or len(after_key) != len(after_id)
            or len(limits) != 1
            or not limits[0].isdigit()
        ):
            self._send(HTTPStatus.BAD_REQUEST, {"error": "invalid_paging"})
            return
        limit = int(limits[0])
        if not 1 <= limit <= MAX_PAGE:
            self._send(HTTPStatus.BAD_REQUEST, {"error": "invalid_paging"})
            return
        after = VenueRecord(after_key[0], after_id[0]) if after_key else None
        page = self.server.venue.records_after(after, limit)
        self._send(
            HTTPStatus.OK,
            {"records": [{"operation_key": r.operation_key, "venue_id": r.venue_id} for r in page]},
        )

    # -- helpers ---------------------------------------------------------------------------

    def _authorised(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("utf-8"), self.server.api_key
        )
        if not ok:
            self._send(
                HTTPStatus.UNAUTHORIZED,
                {"error": "unauthorized"},
                extra={"WWW-Authenticate": "Bearer"},
            )
        return ok

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering 400/413 (and closing the connection)."""
        raw = self.headers.get("Content-Length")
        if raw is None or not raw.isdigit():
            self.close_connection = True
            self._send(HTTPStatus.BAD_REQUEST, {"error": "content_length_required"})
            return None
        length = int(raw)
        if length > MAX_BODY_BYTES:
            # Discard a moderately oversized body before answering: closing with unread input
            # makes the kernel send RST, which can destroy the 413 before the client reads it.
            if length <= _MAX_DISCARD_BYTES:
                self._discard(length)
            else:
                self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body_too_large"})
            return None
        return self.rfile.read(length)

    def _drain_or_close(self) -> None:
        raw = self.headers.get("Content-Length", "0")
        if raw.isdigit() and int(raw) <= MAX_BODY_BYTES:
            self._discard(int(raw))
        else:
            self.close_connection = True

    def _discard(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, MAX_BODY_BYTES))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _send(
        self, status: HTTPStatus, body: dict[str, Any], extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def _parse_order(body: bytes) -> tuple[str, dict[str, str | int | bool]] | None:
    """``(action, effect)`` from a POST body, or None if it is not exactly that shape."""
    try:
        doc = json.loads(body, parse_float=_refuse, parse_constant=_refuse)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or set(doc) != {"action", "effect"}:
        return None
    action, effect = doc["action"], doc["effect"]
    if not isinstance(action, str) or not action or not isinstance(effect, dict):
        return None
    if not all(isinstance(v, str | int | bool) for v in effect.values()):
        return None
    return action, effect


def _refuse(text: str) -> Any:
    raise ValueError(f"not allowed in an effect: {text}")  # floats, NaN, Infinity


class PaperVenueServer:
    """A running (or ready) HTTP front for a :class:`PaperVenue`. Bound at construction."""

    def __init__(
        self,
        venue: PaperVenue,
        *,
        host: str,
        port: int,
        api_key: str,
        sandbox: PaperSandbox | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("api_key must not be empty")
        self._server = _Server((host, port), venue, api_key, sandbox)
        self._thread: threading.Thread | None = None
        self._serving = False
        self._state_lock = threading.Lock()
        self.venue = venue

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321``."""
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> PaperVenueServer:
        """Serve on a background daemon thread; returns self."""
        with self._state_lock:
            if self._thread is None and not self._serving:
                self._serving = True
                self._thread = threading.Thread(
                    target=self._server.serve_forever,
                    kwargs={"poll_interval": _POLL_SECONDS},
                    name="paper-venue",
                    daemon=True,
                )
                self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until :meth:`stop` is called from another."""
        with self._state_lock:
            if self._serving:
                raise RuntimeError("already serving")
            self._serving = True
        self._server.serve_forever(poll_interval=_POLL_SECONDS)

    def stop(self) -> None:
        """Stop serving, cut open connections and release the port. Idempotent."""
        with self._state_lock:
            serving, self._serving = self._serving, False
            thread, self._thread = self._thread, None
        if serving:
            self._server.shutdown()  # only safe once serve_forever has been (or is being) called
        self._server.cut_connections()
        self._server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> PaperVenueServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PaperVenueServer(url={self.url!r})"  # never the api key


def serve_paper_venue(
    venue: PaperVenue,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str,
    sandbox: PaperSandbox | None = None,
) -> PaperVenueServer:
    """Bind an HTTP server for ``venue`` (port 0 picks a free port). Call ``start()`` to serve.

    ``sandbox``: serve its dry runs at ``POST /v1/dry-runs`` too."""
    return PaperVenueServer(venue, host=host, port=port, api_key=api_key, sandbox=sandbox)
