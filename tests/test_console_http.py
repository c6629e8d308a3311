"""The operator console's gate (issue 17), over HTTP against a live server: the login exchange,
sessions, CSRF, roles and what a refused form changes (nothing but the audit log)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from effectgate.testing import PaperService, paper_service


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def browser(ps: PaperService) -> httpx.Client:
    return httpx.Client(base_url=ps.url, follow_redirects=True, timeout=10)


def logged_in(ps: PaperService, token: str) -> tuple[httpx.Client, str]:
    b = browser(ps)
    pre = csrf_of(b.get("/console/login"))
    page = b.post("/console/login", data={"csrf": pre, "token": token, "next": "/console"})
    assert page.status_code == 200 and "Log out" in page.text, page.text
    return b, csrf_of(page)


def token_for(ps: PaperService, name: str, role: str, scope: str) -> str:
    return ps.service.store.create_principal(
        name, role, scope, created_by="test", now=time.time()
    ).token


class TestLoginExchange:
    def test_the_login_form_needs_its_own_csrf_value(self, ps: PaperService) -> None:
        b = browser(ps)
        b.get("/console/login")
        got = b.post("/console/login", data={"csrf": "forged", "token": ps.operator_token})
        assert got.status_code == 403 and "eg_console" not in b.cookies

    def test_agent_and_harness_tokens_are_not_let_in(self, ps: PaperService) -> None:
        agent = token_for(ps, "console-agent", "agent", "default")
        for token in (agent, ps.harness_token):
            b = browser(ps)
            pre = csrf_of(b.get("/console/login"))
            got = b.post("/console/login", data={"csrf": pre, "token": token})
            assert got.status_code == 401 and "for operators and approvers" in got.text
            assert "eg_console" not in b.cookies

    def test_the_session_cookie_is_httponly_strict_and_scoped_to_the_console(
        self, ps: PaperService
    ) -> None:
        b = browser(ps)
        pre = csrf_of(b.get("/console/login"))
        got = b.post(
            "/console/login", data={"csrf": pre, "token": ps.operator_token}, follow_redirects=False
        )
        assert got.status_code == 303
        cookie = next(c for c in got.headers.get_list("set-cookie") if c.startswith("eg_console="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert ps.operator_token not in cookie

    def test_next_never_leaves_the_console(self, ps: PaperService) -> None:
        b = browser(ps)
        pre = csrf_of(b.get("/console/login"))
        got = b.post(
            "/console/login",
            data={"csrf": pre, "token": ps.operator_token, "next": "//evil.example/x"},
            follow_redirects=False,
        )
        assert got.headers["location"] == "/console"

    def test_failed_logins_are_throttled_per_address(self) -> None:
        with paper_service() as own:  # its own server: the failures count per process
            self._throttled(own)

    def _throttled(self, ps: PaperService) -> None:
        b = browser(ps)
        pre = csrf_of(b.get("/console/login"))
        codes = [
            b.post("/console/login", data={"csrf": pre, "token": f"wrong-{i}"}).status_code
            for i in range(11)
        ]
        assert codes[:10] == [401] * 10 and codes[10] == 429
        # Even the right token waits out the window: guessing gets no faster by mixing in one.
        got = b.post("/console/login", data={"csrf": pre, "token": ps.operator_token})
        assert got.status_code == 429


class TestSessions:
    def test_a_revoked_token_ends_its_session_at_the_next_request(self, ps: PaperService) -> None:
        token = token_for(ps, "console-revoked", "operator", "*")
        b, _ = logged_in(ps, token)
        assert b.get("/console/controls").url.path == "/console/controls"
        ps.service.store.revoke_principal("console-revoked", revoked_by="test", now=time.time())
        assert b.get("/console/controls").url.path == "/console/login"

    def test_logout_closes_the_session_and_is_audited(self, ps: PaperService) -> None:
        token = token_for(ps, "console-out", "operator", "*")
        b, csrf = logged_in(ps, token)
        old = b.cookies["eg_console"]
        b.post("/console/logout", data={"csrf": csrf})
        replay = browser(ps)
        replay.cookies.set("eg_console", old, path="/console")
        assert replay.get("/console").url.path == "/console/login"
        kinds = [
            (e.kind, e.detail.get("principal"))
            for e in ps.service.store.audit_entries(limit=100_000)
        ]
        assert ("console_login", "console-out") in kinds
        assert ("console_logout", "console-out") in kinds

    def test_pages_carry_a_content_security_policy(self, ps: PaperService) -> None:
        b, _ = logged_in(ps, ps.operator_token)
        got = b.get("/console/approvals")
        assert "script-src 'self'" in got.headers["content-security-policy"]
        assert got.headers["x-frame-options"] == "DENY"
        assert got.headers["cache-control"] == "no-store"


class TestFormsThatAct:
    def test_a_form_without_the_session_csrf_changes_nothing(self, ps: PaperService) -> None:
        """Invariant 7 (operators only, deliberately): a cross-site post cannot flip a switch."""
        b, _ = logged_in(ps, ps.operator_token)
        got = b.post("/console/controls/submit_order/kill", data={"reason": "x"})
        assert got.status_code == 403
        got = b.post("/console/controls/submit_order/kill", data={"reason": "x", "csrf": "no"})
        assert got.status_code == 403
        assert not ps.service.store.controls("submit_order").killed

    def test_a_kill_switch_needs_a_reason(self, ps: PaperService) -> None:
        b, csrf = logged_in(ps, ps.operator_token)
        got = b.post("/console/controls/submit_order/kill", data={"reason": " ", "csrf": csrf})
        assert "Refused (invalid_control): give a reason" in got.text
        assert not ps.service.store.controls("submit_order").killed

    def test_an_approver_has_the_approvals_queue_only(self, ps: PaperService) -> None:
        b, csrf = logged_in(ps, ps.approver_token)
        assert b.get("/console/controls").status_code == 403
        got = b.post("/console/controls/submit_order/kill", data={"reason": "x", "csrf": csrf})
        assert got.status_code == 403 and not ps.service.store.controls("submit_order").killed

    def test_a_tenant_operator_cannot_flip_a_switch_for_every_tenant(
        self, ps: PaperService
    ) -> None:
        token = token_for(ps, "console-alpha", "operator", "alpha")
        b, csrf = logged_in(ps, token)
        got = b.post("/console/controls/submit_order/kill", data={"reason": "x", "csrf": csrf})
        assert "Refused (forbidden)" in got.text
        assert not ps.service.store.controls("submit_order").killed
        assert b.get("/console/operations/default/anything").status_code == 403

    def test_a_stale_fingerprint_is_refused_and_nothing_is_sent(self, ps: PaperService) -> None:
        """Invariant 2: the approval binds the payload the approver saw."""
        from agentkit import BIG
        from effectgate.integrations import EffectgateClient

        client = EffectgateClient(ps.url, ps.harness_token)
        assert client.propose("submit_order", "http.stale", BIG).waiting
        b, csrf = logged_in(ps, ps.approver_token)
        before = ps.venue.effect_count
        got = b.post(
            "/console/approvals/default/http.stale",
            data={"csrf": csrf, "fingerprint": "0" * 64, "reason": "ok", "verdict": "approve"},
        )
        assert "Refused (approval_fingerprint_mismatch)" in got.text
        assert ps.venue.effect_count == before and client.get("http.stale").waiting


class TestAgentTextIsInert:
    def test_what_an_agent_wrote_is_escaped_on_the_page(self, ps: PaperService) -> None:
        """The intent is untrusted: its free text reaches the approver as text, never markup."""
        from agentkit import BIG
        from effectgate.integrations import EffectgateClient

        client = EffectgateClient(ps.url, ps.harness_token)
        evil = {**BIG, "rationale": '<script>alert("x")</script><img src=x onerror=alert(1)>'}
        assert client.propose("submit_order", "http.xss", evil).waiting
        b, _ = logged_in(ps, ps.approver_token)
        page = b.get("/console/approvals").text
        assert "&lt;script&gt;" in page and "<script>alert" not in page
        assert "<img src=x" not in page


class TestChartData:
    def test_ages_fall_in_their_buckets_and_rates_are_per_minute(self) -> None:
        from effectgate._doors.console._charts import age_buckets, chart, per_minute

        got = age_buckets([0.5, 59.9, 60.0, 599, 3600, 86400 * 3])
        assert got == {"under 1 min": 2, "1-10 min": 2, "10-60 min": 0, "1-24 h": 1, "over 24 h": 1}
        assert per_minute({"b": 30, "a": 3}, 300) == {"a": 0.6, "b": 6.0}
        c = chart("t", {"x": 2, "y": 4}, key="k")
        assert [(b.percent, b.shown) for b in c.bars] == [(50.0, "2"), (100.0, "4")]
        assert chart("t", {"x": 0}, key="k").bars[0].percent == 0.0
