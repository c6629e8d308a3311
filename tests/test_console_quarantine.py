"""The console's quarantine queue (issues 12 and 17) over HTTP against a live server: who may
see and act, what a refused resolution changes (nothing), release of a never-dispatched row."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from agentkit import BIG, ORDER
from effectgate._core.states import State
from effectgate._doors.console._quarantine import age_text, resolution_from
from effectgate.errors import ResolutionRefused
from effectgate.integrations import EffectgateClient
from effectgate.testing import PaperService, paper_service


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def logged_in(ps: PaperService, token: str) -> tuple[httpx.Client, str]:
    b = httpx.Client(base_url=ps.url, follow_redirects=True, timeout=10)
    pre = csrf_of(b.get("/console/login"))
    page = b.post("/console/login", data={"csrf": pre, "token": token, "next": "/console"})
    assert page.status_code == 200 and "Log out" in page.text, page.text
    return b, csrf_of(page)


def state(ps: PaperService, op: str, scope: str = "default") -> State:
    row = ps.service.store.get(scope, op)
    assert row is not None
    return row.state


def audit_count(ps: PaperService) -> int:
    return len(ps.service.store.audit_entries(limit=100_000))


def lost_reply(ps: PaperService, op: str) -> None:
    ps.venue.fail_next(1, after_apply=True)
    client = EffectgateClient(ps.url, ps.harness_token)
    assert client.propose("submit_order", op, ORDER).outcome == "uncertain"


class TestWhoMaySeeTheQueue:
    def test_an_approver_is_refused_and_a_tenant_operator_sees_only_its_tenant(
        self, ps: PaperService
    ) -> None:
        b, _ = logged_in(ps, ps.approver_token)
        assert b.get("/console/quarantine").status_code == 403
        assert b.get("/console/quarantine/default/anything").status_code == 403
        other = ps.service.store.create_principal(
            "q-tenant-op", "operator", "other", created_by="test", now=time.time()
        ).token
        b, _ = logged_in(ps, other)
        assert b.get("/console/quarantine/default/anything").status_code == 403


class TestResolvingFromTheConsole:
    def test_a_release_of_a_dispatched_row_is_refused_and_writes_nothing(
        self, ps: PaperService
    ) -> None:
        """Invariant 10 (a quarantined row that may have been dispatched is never released to
        dispatch again)."""
        lost_reply(ps, "q.lost")
        b, csrf = logged_in(ps, ps.operator_token)
        page = b.post(
            "/console/quarantine/default/q.lost/take-over",
            data={"csrf": csrf, "reason": "nobody can read this venue"},
        )
        assert "Took q.lost into the quarantine queue" in page.text
        assert state(ps, "q.lost") is State.QUARANTINED
        listing = b.get("/console/quarantine").text
        assert "q.lost" in listing and "may have been" in listing
        before = audit_count(ps)
        page = b.post(
            "/console/quarantine/default/q.lost/resolve",
            data={
                "csrf": csrf_of(page),
                "outcome": "released",
                "evidence": "operator_attestation",
                "note": "I am sure",
                "reason": "try again",
            },
        )
        assert "Refused (resolution_refused)" in page.text and "never released" in page.text
        assert state(ps, "q.lost") is State.QUARANTINED and audit_count(ps) == before

    def test_a_form_without_its_csrf_token_changes_nothing(self, ps: PaperService) -> None:
        lost_reply(ps, "q.csrf")
        b, csrf = logged_in(ps, ps.operator_token)
        b.post(
            "/console/quarantine/default/q.csrf/take-over", data={"csrf": csrf, "reason": "stuck"}
        )
        before = audit_count(ps)
        got = b.post(
            "/console/quarantine/default/q.csrf/resolve",
            data={"outcome": "failed", "evidence": "venue_refusal", "reason": "x"},
        )
        assert got.status_code == 403
        assert state(ps, "q.csrf") is State.QUARANTINED and audit_count(ps) == before

    def test_a_never_dispatched_row_is_released_back_to_a_new_approval_round(
        self, ps: PaperService
    ) -> None:
        client = EffectgateClient(ps.url, ps.harness_token)
        assert client.propose("submit_order", "q.wait", BIG).waiting
        b, csrf = logged_in(ps, ps.operator_token)
        page = b.get("/console/quarantine/default/q.wait")
        assert 'id="take-over"' in page.text
        page = b.post(
            "/console/quarantine/default/q.wait/take-over",
            data={"csrf": csrf, "reason": "checking the counterparty first"},
        )
        assert "never: it can be released back" in page.text
        page = b.post(
            "/console/quarantine/default/q.wait/resolve",
            data={
                "csrf": csrf_of(page),
                "outcome": "released",
                "evidence": "never_dispatched",
                "reason": "counterparty checked",
            },
        )
        assert "Resolved q.wait released: now awaiting_approval" in page.text
        assert state(ps, "q.wait") is State.AWAITING_APPROVAL
        # Approvals are never skipped: the approver approves the new round, then it is sent.
        before = ps.venue.effect_count
        ps.approve("q.wait")
        assert client.get("q.wait").outcome == "done"
        assert ps.venue.effect_count == before + 1

    def test_a_resolution_without_evidence_is_refused_with_its_reason(
        self, ps: PaperService
    ) -> None:
        lost_reply(ps, "q.noproof")
        b, csrf = logged_in(ps, ps.operator_token)
        page = b.post(
            "/console/quarantine/default/q.noproof/take-over",
            data={"csrf": csrf, "reason": "stuck"},
        )
        page = b.post(
            "/console/quarantine/default/q.noproof/resolve",
            data={
                "csrf": csrf_of(page),
                "outcome": "applied",
                "evidence": "venue_record",
                "reason": "it is there",
            },
        )
        assert "Refused (resolution_refused)" in page.text and "reference is required" in page.text
        assert state(ps, "q.noproof") is State.QUARANTINED


class TestFormParsing:
    def test_unknown_outcome_and_evidence_kinds_are_refused(self) -> None:
        base = {"outcome": "applied", "evidence": "venue_record", "reference": "V-1", "reason": "r"}
        assert resolution_from(base, "alice").venue_id == "V-1"
        for bad in ({"outcome": "done"}, {"evidence": "hearsay"}, {"reason": "  "}):
            with pytest.raises(ResolutionRefused):
                resolution_from({**base, **bad}, "alice")

    def test_ages_read_as_people_read_them(self) -> None:
        assert [age_text(s) for s in (5, 125, 3 * 3600 + 60, 2 * 86400 + 7200)] == [
            "5s",
            "2m 05s",
            "3h 01m",
            "2d 2h",
        ]
