"""The quarantine queue and its resolution service, the state-table changes they need, a new
approval round, and a venue with no read view: on every store, and through the CLI and HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler
from effectgate._core.intent import Registry
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._core.states import RELEASABLE, TERMINAL, TRANSITIONS, State, check_transition
from effectgate._core.venue import ReadView, VenueContract
from effectgate._doors.http.app import create_app
from effectgate._execute.adapter import DryRun, OutboundRequest
from effectgate._execute.quarantine import QuarantineService
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import InvalidTransition, ResolutionRefused
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store import SQLiteStore
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import AGENT_A, OPERATOR, ORDER, SCOPED_OPERATOR, bearer, config_text

INTENT = dict(EXAMPLE_ORDER)


def gate_for(
    store: Store, clock: ManualClock, venue: PaperVenue, read_view: str = "lagging"
) -> Gate:
    ac = replace(submit_order_class(), venue=VenueContract(read_view=ReadView(read_view)))
    return Gate(
        store=store,
        registry=Registry([ac, cancel_order_class()]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900"))}
        ),
        clock=clock,
    )


def attest(outcome: str, note: str = "checked with the venue's support") -> Resolution:
    return Resolution(
        outcome=ResolutionOutcome(outcome),
        by="alice",
        proof=Proof(EvidenceKind.OPERATOR_ATTESTATION, note=note),
        reason="settled by hand",
    )


class TestStateTable:
    """The state table: quarantine is a queue, not an end; terminal rows stay inert."""

    def test_quarantined_is_not_terminal(self) -> None:
        assert State.QUARANTINED not in TERMINAL

    def test_every_non_terminal_state_may_enter_the_queue(self) -> None:
        for state in set(State) - TERMINAL - {State.QUARANTINED}:
            assert check_transition(state, State.QUARANTINED) is State.QUARANTINED

    def test_the_queue_never_leads_to_a_dispatch(self) -> None:
        """Invariant 10: no way out of quarantine leads to submitted."""
        assert State.SUBMITTED not in TRANSITIONS[State.QUARANTINED]
        with pytest.raises(InvalidTransition):
            check_transition(State.QUARANTINED, State.SUBMITTED)
        assert TRANSITIONS[State.QUARANTINED] == {State.ACKNOWLEDGED, State.FAILED} | RELEASABLE

    def test_the_two_last_moment_moves_of_a_validated_row(self) -> None:
        assert check_transition(State.VALIDATED, State.REJECTED) is State.REJECTED
        assert check_transition(State.VALIDATED, State.AWAITING_APPROVAL) is (
            State.AWAITING_APPROVAL
        )

    def test_terminal_rows_have_no_way_out(self) -> None:
        for state in TERMINAL:
            assert not TRANSITIONS.get(state)


def quarantined_row(store: Store, clock: ManualClock, *, dispatched: bool) -> Gate:
    venue = PaperVenue(clock=clock)
    gate = gate_for(store, clock, venue)
    if dispatched:
        venue.fail_next(1, after_apply=True)
        assert gate.submit("submit_order", "op-1", INTENT).state is State.SUBMITTED
        expected = State.SUBMITTED
    else:
        assert gate.propose("submit_order", "op-1", INTENT).state is State.VALIDATED
        expected = State.VALIDATED
    store.quarantine(
        "default",
        "op-1",
        expected,
        kind="test",
        reason="needs a human",
        record={"why": "test"},
        by="alice",
        now=clock(),
    )
    return gate


class TestResolution:
    """Invariant 10: a quarantined row leaves only by an operator's audited resolution with
    evidence, and one that may have been dispatched is never dispatched again."""

    def test_applied_with_the_venue_record(self, store: Store) -> None:
        clock = ManualClock()
        quarantined_row(store, clock, dispatched=True)
        service = QuarantineService(store, clock=clock)
        resolution = Resolution(
            outcome=ResolutionOutcome.APPLIED,
            by="alice",
            proof=Proof(EvidenceKind.VENUE_RECORD, reference="V-000001"),
            reason="the venue shows it",
        )
        row = service.resolve("default", "op-1", resolution)
        assert row.state is State.ACKNOWLEDGED and row.venue_id == "V-000001"
        stored = store.get("default", "op-1")
        assert stored is not None and stored.venue_id == "V-000001"
        last = store.audit_entries(scope="default", operation_id="op-1")[-1]
        assert last.detail["resolution"]["proof"]["kind"] == "venue_record"
        assert last.detail["by"] == "alice"

    def test_failed_with_proof(self, store: Store) -> None:
        clock = ManualClock()
        quarantined_row(store, clock, dispatched=True)
        row = QuarantineService(store, clock=clock).resolve("default", "op-1", attest("failed"))
        assert row.state is State.FAILED

    def test_a_row_that_may_have_been_dispatched_is_never_released(self, store: Store) -> None:
        clock = ManualClock()
        gate = quarantined_row(store, clock, dispatched=True)
        before = len(store.audit_entries(scope="default", operation_id="op-1"))
        with pytest.raises(ResolutionRefused, match="never released"):
            QuarantineService(store, clock=clock).resolve("default", "op-1", attest("released"))
        assert len(store.audit_entries(scope="default", operation_id="op-1")) == before
        row = gate.submit("submit_order", "op-1", INTENT)  # a retry sends nothing
        assert row.state is State.QUARANTINED and row.replayed

    def test_a_never_dispatched_row_is_released_to_where_it_was(self, store: Store) -> None:
        clock = ManualClock()
        gate = quarantined_row(store, clock, dispatched=False)
        resolution = Resolution(
            outcome=ResolutionOutcome.RELEASED,
            by="alice",
            proof=Proof(EvidenceKind.NEVER_DISPATCHED),
            reason="false alarm",
        )
        row = QuarantineService(store, clock=clock).resolve("default", "op-1", resolution)
        assert row.state is State.VALIDATED
        assert gate.dispatch("op-1").state is State.ACKNOWLEDGED

    def test_a_row_awaiting_approval_goes_back_to_its_approvals(self, store: Store) -> None:
        clock = ManualClock()
        gate = gate_for(store, clock, PaperVenue(clock=clock))
        big = {**INTENT, "quantity": "9.5"}
        assert gate.submit("submit_order", "op-1", big).state is State.AWAITING_APPROVAL
        service = QuarantineService(store, clock=clock)
        service.take_over("default", "op-1", by="alice", reason="looks odd")
        row = service.resolve("default", "op-1", attest("released", "checked: fine"))
        assert row.state is State.AWAITING_APPROVAL

    @pytest.mark.parametrize(
        ("outcome", "proof", "match"),
        [
            ("applied", Proof(EvidenceKind.NEVER_DISPATCHED), "cannot prove applied"),
            ("failed", Proof(EvidenceKind.RECIPIENT_CONFIRMATION, note="got it"), "cannot prove"),
        ],
    )
    def test_evidence_that_does_not_prove_the_outcome_is_refused(
        self, outcome: str, proof: Proof, match: str
    ) -> None:
        with pytest.raises(ResolutionRefused, match=match):
            Resolution(outcome=ResolutionOutcome(outcome), by="a", proof=proof, reason="r")

    def test_an_attestation_needs_its_reason(self) -> None:
        with pytest.raises(ResolutionRefused, match="attestation"):
            Proof(EvidenceKind.OPERATOR_ATTESTATION)
        with pytest.raises(ResolutionRefused, match="reference"):
            Proof(EvidenceKind.VENUE_RECORD)

    def test_a_row_not_in_the_queue_is_refused(self, store: Store) -> None:
        clock = ManualClock()
        gate_for(store, clock, PaperVenue(clock=clock)).submit("submit_order", "op-1", INTENT)
        with pytest.raises(ResolutionRefused, match="not quarantined"):
            store.resolve_quarantine("default", "op-1", attest("applied"), now=clock())

    def test_a_system_actor_cannot_resolve(self, store: Store) -> None:
        clock = ManualClock()
        quarantined_row(store, clock, dispatched=True)
        bad = replace(attest("failed"), by="system:robot")
        with pytest.raises(ResolutionRefused, match="system"):
            store.resolve_quarantine("default", "op-1", bad, now=clock())

    def test_the_queue_lists_and_measures_its_rows(self, store: Store) -> None:
        clock = ManualClock()
        quarantined_row(store, clock, dispatched=True)
        clock.advance(30)
        service = QuarantineService(store, clock=clock)
        assert [r.operation_id for r in service.list()] == ["op-1"]
        assert service.list("other") == []
        count, age = service.summary()
        assert count == 1 and age == pytest.approx(30)
        view = service.show("default", "op-1")
        assert view.quarantined_from is State.SUBMITTED and view.dispatched
        assert store.quarantined_from("default", "op-1") is State.SUBMITTED


class TestNewApprovalRound:
    """validated -> awaiting_approval: earlier approvals no longer count, the same approver may
    approve again, and the round has its own expiry (invariant 11)."""

    def test_a_new_round(self, store: Store) -> None:
        clock = ManualClock()
        gate = gate_for(store, clock, PaperVenue(clock=clock))
        big = {**INTENT, "quantity": "9.5"}
        row = gate.submit("submit_order", "op-1", big, dispatch=False)
        store.decide_approval(
            "default",
            "op-1",
            approver="bob",
            fingerprint=row.fingerprint,
            approve=True,
            reason=None,
            now=clock(),
        )
        assert store.get("default", "op-1").state is State.VALIDATED  # type: ignore[union-attr]
        again = store.reopen_approval(
            "default",
            "op-1",
            reason="precondition changed",
            required=1,
            ttl=60.0,
            by="system:precheck",
            now=clock(),
        )
        assert again.state is State.AWAITING_APPROVAL
        assert store.list_approvals("default", "op-1") == []
        request = store.approval_request("default", "op-1")
        assert request is not None and request.expires_at == clock() + 60.0
        out = store.decide_approval(
            "default",
            "op-1",
            approver="bob",
            fingerprint=row.fingerprint,
            approve=True,
            reason=None,
            now=clock(),
        )
        assert out.operation.state is State.VALIDATED
        entry = [
            e
            for e in store.audit_entries(scope="default", operation_id="op-1")
            if e.kind == "transition" and e.detail.get("approval_round") == "new"
        ]
        assert entry and entry[0].detail["earlier_approvals"][0]["approver"] == "bob"

    def test_the_new_round_expires_on_its_own(self, store: Store) -> None:
        clock = ManualClock()
        gate = gate_for(store, clock, PaperVenue(clock=clock))
        gate.propose("submit_order", "op-1", INTENT)
        store.reopen_approval(
            "default", "op-1", reason="again", required=1, ttl=5.0, by="alice", now=clock()
        )
        clock.advance(10)
        expired = store.expire_approvals(now=clock())
        assert [r.operation_id for r in expired] == ["op-1"]
        assert store.get("default", "op-1").state is State.DENIED  # type: ignore[union-attr]


class TestVenueWithoutReadView:
    """Invariants 4 and 10: absence at a venue with no read view is never written off as
    failed; past the horizon the uncertain row goes to the operators' queue."""

    @pytest.mark.parametrize(
        ("read_view", "expected"), [("none", State.QUARANTINED), ("lagging", State.FAILED)]
    )
    def test_an_uncertain_row_past_its_horizon(
        self, store: Store, read_view: str, expected: State
    ) -> None:
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        gate = gate_for(store, clock, venue, read_view)
        venue.fail_next(1, after_apply=False)
        assert gate.submit("submit_order", "op-1", INTENT).state is State.SUBMITTED
        rec = Reconciler(
            store=store,
            registry=gate.registry,
            adapters={"paper": PaperAdapter(venue)},
            clock=clock,
        )
        rec.run_once()
        assert store.get("default", "op-1").state is State.SUBMITTED  # type: ignore[union-attr]
        clock.advance(61)
        rec.run_once()
        assert store.get("default", "op-1").state is expected  # type: ignore[union-attr]
        if expected is State.QUARANTINED:
            row = QuarantineService(store, clock=clock).resolve(
                "default",
                "op-1",
                Resolution(
                    outcome=ResolutionOutcome.FAILED,
                    by="alice",
                    proof=Proof(EvidenceKind.PROVIDER_CONSOLE, reference="ticket-42"),
                    reason="provider says never received",
                ),
            )
            assert row.state is State.FAILED


# --- front doors -----------------------------------------------------------------------------


class _Diverging(PaperAdapter):
    """A venue fake whose sandbox always mints its own key."""

    @property
    def can_speculate(self) -> bool:
        return True

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        return DryRun("ALLOW", "fine", "sbx-own-key", 120.0)


SPECULATION = """
[classes.submit_order.speculation]
mode = "required"
verdict_lifetime = 60
"""


@pytest.fixture
def service(tmp_path: Path, store: Store) -> Iterator[Service]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db") + SPECULATION
    svc = Service(
        parse_config(text, "test.toml"), adapters={"venue": _Diverging(PaperVenue())}, store=store
    )
    yield svc
    svc.close()


class TestQuarantineOverHTTP:
    """The operator API: the divergence reaches the agent as its own error; the operator
    lists, shows and resolves through the same service as the CLI."""

    def test_divergence_queue_and_resolution(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            r = client.post(
                "/v1/actions/submit_order",
                content=json.dumps(ORDER).encode(),
                headers=bearer(
                    AGENT_A, **{"Idempotency-Key": "op-1", "Content-Type": "application/json"}
                ),
            )
            assert r.status_code == 409, r.text
            problem = r.json()
            assert problem["code"] == "key_namespace_divergence"
            assert problem["ledger_key"] == "alpha:op-1"
            assert problem["sandbox_key"] == "sbx-own-key"
            listing = client.get("/v1/admin/quarantine", headers=bearer(OPERATOR)).json()
            assert listing["count"] == 1 and listing["rows"][0]["operation_id"] == "op-1"
            shown = client.get("/v1/admin/quarantine/alpha/op-1", headers=bearer(OPERATOR))
            view = shown.json()
            assert view["ledger_key"] == "alpha:op-1" and view["sandbox_keys"] == ["sbx-own-key"]
            assert [e["kind"] for e in view["audit"]["speculative"]].count("speculation") == 1
            assert any(e["kind"] == "transition" for e in view["audit"]["ledger"])
            bad = client.post(
                "/v1/admin/quarantine/alpha/op-1/resolve",
                headers=bearer(OPERATOR),
                json={"outcome": "applied", "proof": {"kind": "never_dispatched"}, "reason": "x"},
            )
            assert bad.status_code == 409 and bad.json()["code"] == "resolution_refused"
            ok = client.post(
                "/v1/admin/quarantine/alpha/op-1/resolve",
                headers=bearer(OPERATOR),
                json={
                    "outcome": "failed",
                    "proof": {"kind": "operator_attestation", "note": "never sent: divergence"},
                    "reason": "closing it",
                },
            )
            assert ok.status_code == 200, ok.text
            assert ok.json()["state"] == "failed"
            other = client.get("/v1/admin/quarantine/beta/op-1", headers=bearer(SCOPED_OPERATOR))
            assert other.status_code == 403


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EFFECTGATE_STORE": url, "COLUMNS": "200"},
    )


class TestQuarantineCLI:
    """``effectgate quarantine list|show|resolve`` over a real ledger file."""

    def test_list_show_resolve(self, tmp_path: Path) -> None:
        path = tmp_path / "ledger.db"
        store = SQLiteStore(str(path))
        try:
            quarantined_row(store, ManualClock(), dispatched=True)
        finally:
            store.close()
        url = f"sqlite:///{path}"
        listed = cli(url, "quarantine", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["count"] == 1
        shown = cli(url, "quarantine", "show", "op-1")
        assert shown.returncode == 0, shown.stderr
        assert "ledger key : default:op-1" in shown.stdout
        refused = cli(
            url,
            "quarantine",
            "resolve",
            "op-1",
            "--outcome",
            "released",
            "--evidence",
            "never_dispatched",
            "--reason",
            "oops",
        )
        assert refused.returncode != 0
        done = cli(
            url,
            "quarantine",
            "resolve",
            "op-1",
            "--outcome",
            "applied",
            "--evidence",
            "venue_record",
            "--reference",
            "V-000001",
            "--reason",
            "found it",
        )
        assert done.returncode == 0, done.stderr
        assert "acknowledged" in done.stdout


class TestReleaseOpensANewRound:
    """A row released back to awaiting_approval gets a new approval round of its own: its old
    round may have expired while it waited in the queue (invariant 11), and earlier approvals
    no longer count."""

    def test_release_after_the_old_round_expired(self, store: Store) -> None:
        clock = ManualClock()
        gate = gate_for(store, clock, PaperVenue(clock=clock))
        big = {**INTENT, "quantity": "9.5"}
        row = gate.submit("submit_order", "op-1", big)
        service = QuarantineService(store, clock=clock, approval_ttl=600.0)
        service.take_over("default", "op-1", by="alice", reason="suspicious")
        clock.advance(2 * 86400)  # the original round (one day) has long expired
        released = service.resolve("default", "op-1", attest("released", "checked: fine"))
        assert released.state is State.AWAITING_APPROVAL
        request = store.approval_request("default", "op-1")
        assert request is not None and request.expires_at == clock() + 600.0
        assert store.expire_approvals(now=clock()) == []
        out = store.decide_approval(
            "default",
            "op-1",
            approver="bob",
            fingerprint=row.fingerprint,
            approve=True,
            reason=None,
            now=clock(),
        )
        assert out.operation.state is State.VALIDATED


class TestQuarantineAgedAlert:
    """Invariant 11: a row left in the queue past its class's hold bound pages."""

    def test_a_row_waiting_too_long_pages_once(self, store: Store) -> None:
        from effectgate._execute.maintenance import check_maintenance

        clock = ManualClock()
        gate = quarantined_row(store, clock, dispatched=True)
        assert not [
            a
            for a in check_maintenance(store, gate.registry, None, now=clock())
            if a.kind == "quarantine-aged"
        ]
        clock.advance(61)  # past the hold bound (the 60s visibility horizon)
        raised = check_maintenance(store, gate.registry, None, now=clock())
        assert [a.kind for a in raised].count("quarantine-aged") == 1
        again = check_maintenance(store, gate.registry, None, now=clock())
        assert "quarantine-aged" not in [a.kind for a in again]


class TestQueueMetrics:
    def test_the_queue_size_and_age_are_scraped(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            client.post(
                "/v1/actions/submit_order",
                content=json.dumps(ORDER).encode(),
                headers=bearer(
                    AGENT_A, **{"Idempotency-Key": "op-1", "Content-Type": "application/json"}
                ),
            )
            text = client.get("/metrics", headers=bearer(OPERATOR)).text
        assert "effectgate_quarantine_size 1.0" in text
        assert "effectgate_quarantine_oldest_age_seconds" in text
