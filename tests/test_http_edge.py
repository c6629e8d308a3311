"""The HTTP edge (issue 11, item 3), against a real uvicorn on a loopback port: what happens to
a request before any handler sees its body. Authentication first, then the media type, then
the byte cap while reading; no redirects; an unknown action names the ones that exist; one
Idempotency-Key per request. Bad input: every refusal is problem+json and writes nothing."""

from __future__ import annotations

import json
import re
import select
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from servicekit import AGENT_A, OPERATOR, ORDER, bearer, config_text, uvicorn_thread

CAP = 65536  # the default max_body_bytes
HUGE = 100 * 1024 * 1024
JSON = {"Content-Type": "application/json"}

#: Every route that takes a body (one action route stands for all: one handler makes them):
#: (method, path, a body it accepts, the role's token). The OpenAPI test keeps this complete.
BODY_ROUTES = [
    ("POST", "/v1/actions/submit_order", ORDER, AGENT_A),
    ("PUT", "/v1/admin/kill/submit_order", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/kill/submit_order/rehearsals", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/breakers/submit_order/reset", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/approvals/alpha/op-1/approve", {"fingerprint": "0" * 64}, OPERATOR),
    ("POST", "/v1/admin/approvals/alpha/op-1/refuse", {"fingerprint": "0" * 64}, OPERATOR),
    (
        "POST",
        "/v1/admin/envelope/submit_order/step",
        {"axis": "max_value", "value": "1", "evidence": {"n": 1}},
        OPERATOR,
    ),
    (
        "POST",
        "/v1/admin/shadow/incumbent",
        {"correlation_id": "c", "action": "submit_order", "intent": None},
        OPERATOR,
    ),
    ("POST", "/v1/admin/tokens", {"name": "n", "role": "agent", "scope": "alpha"}, OPERATOR),
    (
        "POST",
        "/v1/admin/quarantine/alpha/op-1/resolve",
        {"outcome": "failed", "proof": {"kind": "venue_refusal"}, "reason": "r"},
        OPERATOR,
    ),
    ("POST", "/v1/admin/quarantine/alpha/op-1/take-over", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/holds", {"scope": "alpha", "reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/holds/h-1/release", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/prune", {"before": "2000-01-01T00:00:00Z"}, OPERATOR),
    (
        "POST",
        "/v1/admin/continuations/alpha/op-1/retry",
        {
            "proof": {"ground": "permanent_absence", "kind": "venue_refusal"},
            "seq": 1,
            "predecessor": "0" * 64,
        },
        OPERATOR,
    ),
    (
        "POST",
        "/v1/runs/run-1/calls",
        {
            "slot": "t-1",
            "call_id": "c",
            "kind": "tool",
            "tool": "t",
            "request_digest": "0" * 64,
            "request_bytes": 1,
        },
        AGENT_A,  # a harness's route; the edge checks the body before the role (and a config
    ),  # file's tokens are agents or operators only)
    (
        "PUT",
        "/v1/runs/run-1/calls/t-1/completion",
        {"call_id": "c", "result_digest": "0" * 64, "result_bytes": 1},
        AGENT_A,
    ),
    ("POST", "/v1/admin/runs/alpha/run-1/seal", {"reason": "r"}, OPERATOR),
    # Budgets (issue 14): harness routes, checked at the edge before the role.
    ("PUT", "/v1/runs/run-1/budget", {"max_steps": 1}, AGENT_A),
    ("POST", "/v1/runs/run-1/budget/steps", {"configured_output": 1}, AGENT_A),
    ("POST", "/v1/runs/run-1/budget/tokens", {"reported_tokens": 1}, AGENT_A),
    ("POST", "/v1/plans", {"plan_id": "p", "plan_digest": "0" * 64}, AGENT_A),
    ("POST", "/v1/plans/p/reservations", {"reservation_id": "r"}, AGENT_A),
    ("POST", "/v1/plans/p/settlements", {"reservation_id": "r"}, AGENT_A),
    (
        "POST",
        "/v1/admin/grants",
        {"holder": "h", "actions": ["submit_order"], "expires_in": 60},
        OPERATOR,
    ),
    (
        "POST",
        "/v1/admin/grants/gr_0/delegate",
        {"holder": "h", "actions": ["submit_order"], "expires_in": 60},
        OPERATOR,
    ),
    ("POST", "/v1/admin/grants/revoke", {"holder": "h"}, OPERATOR),
    ("POST", "/v1/admin/policies", {"policy": "[policies.cancel_order]\n"}, OPERATOR),
    ("POST", "/v1/admin/policies/pp_0000000000000000/reject", {"reason": "r"}, OPERATOR),
    ("POST", "/v1/admin/policies/load", {"policy": "[policies.cancel_order]\n"}, OPERATOR),
    ("POST", "/v1/admin/policies/replay", {"policy": "[policies.cancel_order]\n"}, OPERATOR),
]
ROUTE_IDS = [f"{m} {p}" for m, p, _, _ in BODY_ROUTES]


@dataclass
class Live:
    url: str
    service: Service
    venue: PaperVenue

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    def controls_changed(self) -> bool:
        return any(
            c.killed or c.shadow or c.envelope.version for c in self.service.store.list_controls()
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp: Path = tmp_path_factory.mktemp("edge")
    cfg = parse_config(
        config_text(
            store_url=f"sqlite:///{tmp}/l.db",
            service="[service.rate_limit]\nper_second = 10000\nburst = 10000",
        ),
        "test.toml",
    )
    venue = PaperVenue()
    service = Service(cfg, adapters={"venue": PaperAdapter(venue)})
    with uvicorn_thread(create_app(service, mcp_http=False)) as url:
        yield Live(url, service, venue)
    service.close()


@pytest.fixture
def clean(live: Live) -> Iterator[Live]:
    """The live service, checked unchanged afterwards: nothing dispatched, no control moved."""
    effects, rows = live.venue.effect_count, live.service.store.count_by_state()
    principals = live.service.store.list_principals(include_revoked=True)
    yield live
    assert live.venue.effect_count == effects
    assert live.service.store.count_by_state() == rows
    assert live.service.store.list_principals(include_revoked=True) == principals
    assert not live.controls_changed()


@dataclass
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # body bytes the client got onto the wire before the answer came
    finished: bool  # the client sent the whole body

    def json(self) -> dict[str, object]:
        doc = json.loads(self.body)
        assert isinstance(doc, dict)
        return doc


def send_until_answered(
    port: int, head: bytes, chunks: Iterator[bytes], timeout: float = 60.0
) -> RawReply:
    """Send ``head`` then ``chunks`` on a raw socket, stopping as soon as the server answers.

    A server that reads the whole body before answering lets the client finish; one that
    answers from the headers answers while most of the body is still unsent.
    """
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(head)
        sock.setblocking(False)
        sent, finished, writable = 0, False, True
        pending: bytes | None = b""
        reply = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not _complete(reply):
            r, w, _ = select.select([sock], [sock] if writable else [], [], 0.5)
            if r:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                reply += data
                writable = False  # the answer has begun: stop sending, as a client would
                continue
            if w:
                if not pending:
                    pending = next(chunks, None)
                    if pending is None:
                        finished, writable = True, False
                        continue
                try:
                    n = sock.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    writable = False
                    continue
                sent += n
                pending = pending[n:]
    finally:
        sock.close()
    head_part, _, body = reply.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.1 "):
        raise AssertionError(f"no answer (sent {sent} bytes, finished={finished}): {reply!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return RawReply(int(lines[0].split()[1]), headers, body, sent, finished)


def _complete(reply: bytes) -> bool:
    head, sep, body = reply.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value)
    return False


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def spaces(total: int, size: int = 65536) -> Iterator[bytes]:
    """``total`` bytes of JSON whitespace, in ``size`` pieces."""
    while total > 0:
        yield b" " * min(size, total)
        total -= size


def chunked(pieces: Iterator[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    yield b"0\r\n\r\n"


def assert_problem(reply: RawReply | httpx.Response, status: int, code: str) -> dict[str, object]:
    got = reply.status_code if isinstance(reply, httpx.Response) else reply.status
    assert got == status, reply.text if isinstance(reply, httpx.Response) else reply.body
    assert reply.headers["content-type"] == "application/problem+json"
    doc = reply.json()
    assert doc["status"] == status and doc["code"] == code
    return doc


class TestAuthenticationBeforeBody:
    @pytest.mark.parametrize(("method", "path", "payload", "token"), BODY_ROUTES, ids=ROUTE_IDS)
    def test_unauthenticated_huge_body_is_401_before_it_is_sent(
        self, clean: Live, method: str, path: str, payload: object, token: str
    ) -> None:
        """A 100 MB body without a token is answered 401 from the headers: the server neither
        buffers nor parses it (before: the admin routes read and parsed it all, then 400)."""
        head = request_head(
            method, path, {**JSON, "Content-Length": str(HUGE), "Idempotency-Key": "edge-huge"}
        )
        reply = send_until_answered(clean.port, head, spaces(HUGE))
        assert_problem(reply, 401, "unauthenticated")
        assert reply.headers["www-authenticate"] == "Bearer"
        assert not reply.finished and reply.sent < HUGE // 2

    def test_unauthenticated_endless_chunked_body_is_401(self, clean: Live) -> None:
        """Without a Content-Length there is nothing to check up front: still 401 at once."""
        head = request_head(
            "PUT", "/v1/admin/kill/submit_order", {**JSON, "Transfer-Encoding": "chunked"}
        )
        reply = send_until_answered(clean.port, head, chunked(spaces(HUGE)))
        assert_problem(reply, 401, "unauthenticated")
        assert not reply.finished

    @pytest.mark.parametrize(("method", "path", "payload", "token"), BODY_ROUTES, ids=ROUTE_IDS)
    @pytest.mark.parametrize("auth", [None, "Bearer wrong-token", "Basic b3BzOm9wcw=="])
    def test_deeply_nested_body_without_a_valid_token_is_401(
        self, clean: Live, method: str, path: str, payload: object, token: str, auth: str | None
    ) -> None:
        """A body nested 100,000 deep is not looked at without a valid token: 401, not 400."""
        deep = b'{"reason": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        headers = {**JSON, "Idempotency-Key": "edge-deep"}
        if auth:
            headers["Authorization"] = auth
        r = httpx.request(method, f"{clean.url}{path}", content=deep, headers=headers)
        assert_problem(r, 401, "unauthenticated")

    def test_deep_nesting_under_the_cap_with_a_token_is_400(self, clean: Live) -> None:
        """Authenticated, under the cap, too deep: refused as bad input, never a 5xx."""
        deep = b'{"reason": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
        r = httpx.put(
            f"{clean.url}/v1/admin/kill/submit_order",
            content=deep,
            headers=bearer(OPERATOR, **JSON),
        )
        assert r.status_code == 400
        assert r.headers["content-type"] == "application/problem+json"


class TestBodyCap:
    @pytest.mark.parametrize(("method", "path", "payload", "token"), BODY_ROUTES, ids=ROUTE_IDS)
    def test_declared_oversized_body_is_413_on_every_route(
        self, clean: Live, method: str, path: str, payload: object, token: str
    ) -> None:
        """The action routes' cap holds on every route: one byte over it is 413
        body_too_large, whatever the body says (before: the admin routes had no cap)."""
        assert isinstance(payload, dict)
        raw = json.dumps(payload).encode()
        raw = raw[:-1] + b" " * (CAP + 1 - len(raw)) + b"}"
        assert len(raw) == CAP + 1
        r = httpx.request(
            method,
            f"{clean.url}{path}",
            content=raw,
            headers=bearer(token, **JSON, **{"Idempotency-Key": "edge-cap"}),
        )
        assert_problem(r, 413, "body_too_large")

    @pytest.mark.parametrize(("method", "path", "payload", "token"), BODY_ROUTES, ids=ROUTE_IDS)
    def test_streamed_body_stops_being_read_past_the_cap(
        self, clean: Live, method: str, path: str, payload: object, token: str
    ) -> None:
        """A chunked body (no length to check) is read only up to the cap, then 413 while
        the client is still sending."""
        head = request_head(
            method,
            path,
            bearer(
                token, **JSON, **{"Transfer-Encoding": "chunked", "Idempotency-Key": "edge-stream"}
            ),
        )
        reply = send_until_answered(clean.port, head, chunked(spaces(HUGE, 4096)))
        assert_problem(reply, 413, "body_too_large")
        assert not reply.finished and reply.sent < HUGE // 2

    def test_body_of_exactly_the_cap_is_read(self, live: Live) -> None:
        """The cap is inclusive: a body of exactly max_body_bytes reaches the handler."""
        raw = b'{"reason": "at the cap"' + b" " * (CAP - 24) + b"}"
        assert len(raw) == CAP
        r = httpx.put(
            f"{live.url}/v1/admin/kill/cancel_order", content=raw, headers=bearer(OPERATOR, **JSON)
        )
        try:
            assert r.status_code == 200, r.text
            assert r.json()["killed"] is True and r.json()["kill_reason"] == "at the cap"
        finally:
            httpx.delete(f"{live.url}/v1/admin/kill/cancel_order", headers=bearer(OPERATOR))


class TestMediaType:
    @pytest.mark.parametrize(("method", "path", "payload", "token"), BODY_ROUTES, ids=ROUTE_IDS)
    @pytest.mark.parametrize(
        "ctype",
        [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            None,
            "application/jsonx",
            "application/json; charset=latin-1",
        ],
    )
    def test_a_body_that_is_not_declared_json_is_415(
        self, clean: Live, method: str, path: str, payload: object, token: str, ctype: str | None
    ) -> None:
        """A body is JSON or it is refused (415) before anything reads it: before, the action
        route dispatched a text/plain body and the admin routes answered 400."""
        headers = bearer(token, **{"Idempotency-Key": "edge-type"})
        if ctype is not None:
            headers["Content-Type"] = ctype
        r = httpx.request(
            method, f"{clean.url}{path}", content=json.dumps(payload), headers=headers
        )
        doc = assert_problem(r, 415, "unsupported_media_type")
        assert "application/json" in str(doc["detail"])

    @pytest.mark.parametrize(
        "ctype",
        [
            "application/json",
            "application/json; charset=utf-8",
            'Application/JSON; charset="UTF-8"',
        ],
    )
    def test_json_is_accepted_with_or_without_a_utf8_charset(self, live: Live, ctype: str) -> None:
        """The 415 rule refuses what is not JSON, not how the JSON type is spelled."""
        key = f"edge-ok-{uuid.uuid4().hex}"
        r = httpx.post(
            f"{live.url}/v1/actions/submit_order",
            content=json.dumps(ORDER),
            headers=bearer(AGENT_A, **{"Content-Type": ctype, "Idempotency-Key": key}),
        )
        assert r.status_code == 201, r.text

    def test_authentication_comes_before_the_media_type(self, clean: Live) -> None:
        """An unauthenticated caller learns nothing about what the route accepts."""
        r = httpx.post(
            f"{clean.url}/v1/actions/submit_order",
            content="x",
            headers={"Content-Type": "text/plain", "Idempotency-Key": "edge-t"},
        )
        assert_problem(r, 401, "unauthenticated")

    def test_requests_without_a_body_need_no_content_type(self, live: Live) -> None:
        """The optional bodies stay optional: PUT/DELETE without a body and without a type."""
        ops = bearer(OPERATOR)
        try:
            assert (
                httpx.put(f"{live.url}/v1/admin/kill/cancel_order", headers=ops).status_code == 200
            )
        finally:
            assert (
                httpx.delete(f"{live.url}/v1/admin/kill/cancel_order", headers=ops).status_code
                == 200
            )


class TestMcpDoor:
    def test_mcp_keeps_its_own_gate_beside_the_edge(self, live: Live) -> None:
        """/mcp is left to its own gate (token before body, its own cap, the SDK's content
        types): JSON-RPC over application/json still works, a huge anonymous body is still
        401 before it is sent, and a non-JSON body is still refused."""
        rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        accept = {"Accept": "application/json, text/event-stream"}
        with uvicorn_thread(create_app(live.service, mcp_http=True)) as url:
            r = httpx.post(f"{url}/mcp", content=rpc, headers=bearer(AGENT_A, **JSON, **accept))
            assert r.status_code == 200, r.text
            assert "submit_order" in {t["name"] for t in r.json()["result"]["tools"]}
            r = httpx.post(
                f"{url}/mcp",
                content=rpc,
                headers=bearer(AGENT_A, **accept, **{"Content-Type": "text/plain"}),
            )
            assert r.status_code in (400, 415) and "tools" not in r.text
            head = request_head("POST", "/mcp", {**JSON, **accept, "Content-Length": str(HUGE)})
            reply = send_until_answered(int(urlsplit(url).port or 0), head, spaces(HUGE))
            assert reply.status == 401 and not reply.finished


class TestIdempotencyKeyHeader:
    @pytest.mark.parametrize("keys", [["edge-k1", "edge-k2"], ["edge-k3", "edge-k3"]])
    def test_two_idempotency_key_headers_are_400(self, clean: Live, keys: list[str]) -> None:
        """One request, one operation id: two headers (even equal) are refused, not 'the
        first one wins'."""
        headers = [("Authorization", f"Bearer {AGENT_A}"), ("Content-Type", "application/json")]
        headers += [("Idempotency-Key", k) for k in keys]
        r = httpx.post(
            f"{clean.url}/v1/actions/submit_order", content=json.dumps(ORDER), headers=headers
        )
        doc = assert_problem(r, 400, "invalid_idempotency_key")
        assert "one Idempotency-Key" in str(doc["detail"])

    def test_a_combined_list_is_not_a_key(self, clean: Live) -> None:
        """The folded form a proxy makes of two headers is refused the same way."""
        r = httpx.post(
            f"{clean.url}/v1/actions/submit_order",
            content=json.dumps(ORDER),
            headers=bearer(AGENT_A, **JSON, **{"Idempotency-Key": "a-1, a-2"}),
        )
        assert_problem(r, 400, "invalid_idempotency_key")


class TestNoRedirects:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/v1/actions/submit_order/"),
            ("GET", "/v1/actions/"),
            ("GET", "/v1/operations/op-1/"),
            ("GET", "/healthz/"),
            ("GET", "/v1/admin/kill/"),
            ("PUT", "/v1/admin/kill/submit_order/"),
            ("GET", "/openapi.json/"),
        ],
    )
    def test_trailing_slash_is_404_and_never_echoes_the_host(
        self, clean: Live, method: str, path: str
    ) -> None:
        """No redirect is built from the client's Host header (before: 307 with
        Location: http://<Host>/...)."""
        headers = bearer(
            OPERATOR if "/admin/" in path else AGENT_A,
            **JSON,
            **{"Host": "attacker.example", "Idempotency-Key": "edge-slash"},
        )
        r = httpx.request(
            method,
            f"{clean.url}{path}",
            headers=headers,
            content=json.dumps(ORDER) if method != "GET" else None,
            follow_redirects=False,
        )
        assert_problem(r, 404, "not_found")
        assert "location" not in r.headers and "attacker.example" not in r.text

    def test_unknown_path_is_problem_404(self, clean: Live) -> None:
        r = httpx.get(f"{clean.url}/v2/nothing", headers=bearer(AGENT_A))
        assert_problem(r, 404, "not_found")


class TestUnknownAction:
    def test_unknown_action_lists_the_actions_that_exist(self, clean: Live) -> None:
        """A caller that misnamed the action learns which names exist (before: a bare 'Not
        Found')."""
        r = httpx.post(
            f"{clean.url}/v1/actions/no_such_thing",
            content=json.dumps(ORDER),
            headers=bearer(AGENT_A, **JSON, **{"Idempotency-Key": "edge-u"}),
        )
        doc = assert_problem(r, 404, "unknown_action_class")
        assert doc["actions"] == ["cancel_order", "submit_order"]
        assert "no_such_thing" in str(doc["detail"])
        assert "cancel_order" in str(doc["detail"]) and "submit_order" in str(doc["detail"])

    def test_the_list_is_for_authenticated_agents_only(self, clean: Live) -> None:
        """Action names are not told to anonymous callers, nor to operator tokens."""
        r = httpx.post(
            f"{clean.url}/v1/actions/no_such_thing",
            content=b"{}",
            headers={**JSON, "Idempotency-Key": "edge-u"},
        )
        assert_problem(r, 401, "unauthenticated")
        assert "submit_order" not in r.text
        r = httpx.post(
            f"{clean.url}/v1/actions/no_such_thing",
            content=b"{}",
            headers=bearer(OPERATOR, **JSON, **{"Idempotency-Key": "edge-u"}),
        )
        assert_problem(r, 403, "forbidden")
        assert "submit_order" not in r.text

    def test_the_catch_all_route_is_not_published(self, live: Live) -> None:
        """The contract lists the real actions only; the catch-all is an error path."""
        paths = httpx.get(f"{live.url}/openapi.json").json()["paths"]
        assert "/v1/actions/{action}" not in paths and "/v1/actions/submit_order" in paths


class TestOpenApi:
    def test_every_body_route_declares_413_and_415(self, tmp_path: Path) -> None:
        """The published contract says what the edge answers where a body is taken."""
        cfg = parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db"), "test.toml")
        service = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
        try:
            with TestClient(create_app(service, mcp_http=False)) as c:
                doc = c.get("/openapi.json").json()
        finally:
            service.close()
        with_body = [
            (m.upper(), re.compile(re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"))
            for p, item in doc["paths"].items()
            for m, op in item.items()
            if "requestBody" in op
        ]
        for method, path, _, _ in BODY_ROUTES:
            assert any(m == method and t.match(path) for m, t in with_body), (method, path)
        for m, t in with_body:  # a new body route gets its line in BODY_ROUTES
            assert t.pattern.startswith("/v1/actions/") or any(
                m == method and t.match(path) for method, path, _, _ in BODY_ROUTES
            ), t.pattern
        for path, item in doc["paths"].items():
            for method, op in item.items():
                if "requestBody" in op:
                    assert {"413", "415"} <= set(op["responses"]), (method, path)
                    assert list(op["requestBody"]["content"]) == ["application/json"]
