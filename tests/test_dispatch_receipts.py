"""Dispatch ids and receipt bindings (docs/adapters.md, "Receipts"), and ``not_applied`` only
with proof that it cannot apply later, on both stores.

Invariant 3 (``submitted`` is durable before the adapter is called; an unsure outcome stays
uncertain, never failed) and invariant 9 (a retry is a new action with its own dispatch).
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._core.receipts import dispatch_id, proves_not_applied, request_digest
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._doors.cli.main import app
from effectgate._execute.adapter import (
    Adapter,
    OutboundRequest,
    Outcome,
    Receipt,
    not_sent,
    refusal,
)
from effectgate._execute.record import OUTCOME_UNKNOWN_ENTRY
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock


class _Answering(PaperAdapter):
    """The paper venue, whose every answer is replaced by ``answer`` (after really applying)."""

    answer: Receipt | None = None

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        real = super().execute(request, timeout=timeout)
        return self.answer if self.answer is not None else real


def _gate(store: Store, adapter: Adapter, process: str = "p-1") -> Gate:
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": adapter},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000000")), "cancel_order": LimitPolicy()}
        ),
        clock=ManualClock(),
        process_id=process,
    )


def _trail(store: Store, op: str) -> list[tuple[str, dict[str, object]]]:
    return [
        (e.kind, dict(e.detail))
        for e in store.audit_entries(scope="default", operation_id=op, limit=1000)
    ]


class TestDispatchId:
    @pytest.mark.parametrize(
        "calls",
        [
            [("s", "o", 1.5), ("s", "o", 1.5)],
            [("s", "o", 0.0), ("s", "o", -0.0), ("s", "o", 0.0)],
            [("s", "o", 2.0), ("s", "p", 2.0), ("t", "o", 2.0), ("s", "o", 2.0)],
        ],
    )
    def test_the_last_answer_kept_is_the_hash_of_the_arguments(
        self, calls: list[tuple[str, str, float]]
    ) -> None:
        """Invariant 3: a recovering process recomputes the id from the row, so the one-entry
        memo must answer exactly what the hash of its arguments is (0.0 and -0.0 are equal
        floats with different texts, hence different ids)."""
        for scope, op, at in calls:
            text = f"{scope}\x00{op}\x00{at!r}".encode()
            assert dispatch_id(scope, op, at) == "d-" + hashlib.sha256(text).hexdigest()[:24]
        assert dispatch_id("s", "o", 0.0) != dispatch_id("s", "o", -0.0)

    def test_each_dispatch_has_an_id_journalled_with_submitted_and_bound_in_its_receipt(
        self, store: Store
    ) -> None:
        """Invariant 3: the id comes from what the ``submitted`` write journalled (so a
        recovering process finds the same one), and the receipt's entry carries it with the
        request digest and the evidence reference."""
        venue = PaperVenue()
        gate = _gate(store, PaperAdapter(venue))
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert row.state is State.ACKNOWLEDGED and row.submitted_at is not None
        expected = dispatch_id("default", "op-1", row.submitted_at)
        assert row.dispatch_id == expected and expected.startswith("d-")
        # Read back fresh (a recovering process): the same id.
        again = store.get("default", "op-1")
        assert again is not None and again.dispatch_id == expected
        journalled = [d for k, d in _trail(store, "op-1") if d.get("state") == "submitted"]
        assert journalled and journalled[0]["dispatch_id"] == expected
        receipt = [d for k, d in _trail(store, "op-1") if d.get("state") == "acknowledged"][-1]
        assert receipt["dispatch_id"] == expected
        assert receipt["request_sha256"] == request_digest(row.op_key, row.action, row.fingerprint)
        assert receipt["evidence"] == row.venue_id
        assert "venue_version" in receipt
        # A different row's dispatch has a different id; a row never sent has none.
        other = gate.submit("submit_order", "op-2", EXAMPLE_ORDER)
        assert other.dispatch_id not in (None, expected)
        held = gate.propose("submit_order", "op-3", EXAMPLE_ORDER)
        assert held.state is State.VALIDATED and held.dispatch_id is None
        # Dispatched later (the validated -> submitted path): the same rule, in its entry.
        sent = gate.dispatch("op-3")
        assert sent.state is State.ACKNOWLEDGED and sent.dispatch_id is not None
        entries = _trail(store, "op-3")
        assert [d["dispatch_id"] for k, d in entries if d.get("state") == "submitted"] == [
            sent.dispatch_id
        ]

    def test_the_request_digest_binds_what_the_adapter_was_handed(self) -> None:
        one = request_digest("default:op-1", "submit_order", "a" * 64)
        assert one != request_digest("default:op-2", "submit_order", "a" * 64)
        assert one != request_digest("default:op-1", "cancel_order", "a" * 64)
        assert one != request_digest("default:op-1", "submit_order", "b" * 64)

    def test_ops_show_reports_the_dispatch_id(self, tmp_path: object) -> None:
        from pathlib import Path

        from effectgate.store.sqlite import SQLiteStore

        path = Path(str(tmp_path)) / "l.db"
        ledger = SQLiteStore(str(path))
        try:
            row = _gate(ledger, PaperAdapter(PaperVenue())).submit(
                "submit_order", "op-1", EXAMPLE_ORDER
            )
        finally:
            ledger.close()
        out = CliRunner().invoke(app, ["ops", "show", "op-1", "--store", f"sqlite:///{path}"])
        assert out.exit_code == 0, out.output
        doc = json.loads(out.stdout)
        assert doc["dispatch_id"] == row.dispatch_id


class TestNotAppliedNeedsProof:
    def test_a_venue_refusal_settles_failed_with_the_proof_journalled(self, store: Store) -> None:
        venue = PaperVenue(max_quantity=1000)
        gate = _gate(store, PaperAdapter(venue))
        row = gate.submit("submit_order", "op-1", {**EXAMPLE_ORDER, "quantity": "5000"})
        assert row.state is State.FAILED and "venue rejected" in (row.detail or "")
        failed = [d for k, d in _trail(store, "op-1") if d.get("state") == "failed"][-1]
        proof = failed["proof"]
        assert isinstance(proof, dict) and proof["kind"] == "venue_refusal"
        assert failed["dispatch_id"] == row.dispatch_id

    def test_not_applied_with_evidence_that_proves_nothing_stays_uncertain(
        self, store: Store
    ) -> None:
        """Invariant 3: an adapter claiming not_applied with the venue's record of the effect
        (or an attestation) has not shown it cannot apply later: the row stays submitted and
        the reconciler settles it."""
        adapter = _Answering(PaperVenue())
        adapter.answer = Receipt(
            Outcome.NOT_APPLIED, proof=Proof(EvidenceKind.VENUE_RECORD, reference="ord-9")
        )
        row = _gate(store, adapter).submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert row.state is State.SUBMITTED
        unknown = [d for k, d in _trail(store, "op-1") if k == OUTCOME_UNKNOWN_ENTRY][-1]
        assert "does not prove" in str(unknown["error"])
        assert unknown["dispatch_id"] == row.dispatch_id

    def test_a_text_is_not_proof(self, store: Store) -> None:
        """A receipt built with a bare text as proof is refused at construction; the adapter
        raising leaves the row uncertain (invariant 3)."""
        with pytest.raises(ValueError, match="needs a Proof"):
            Receipt(Outcome.NOT_APPLIED, proof="venue said no")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="needs a Proof"):
            Receipt(Outcome.NOT_APPLIED)

        class _Texting(PaperAdapter):
            def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
                super().execute(request, timeout=timeout)
                return Receipt(Outcome.NOT_APPLIED, proof="no")  # type: ignore[arg-type]

        venue = PaperVenue()
        row = _gate(store, _Texting(venue)).submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert row.state is State.SUBMITTED
        assert venue.find("default:op-1"), "it did apply: failed would have been a lie"

    def test_which_evidence_proves_not_applied(self) -> None:
        assert proves_not_applied(refusal("venue rejected: too large"))
        assert proves_not_applied(not_sent("connection refused before any byte"))
        assert proves_not_applied(Proof(EvidenceKind.PROVIDER_CONSOLE, reference="case-1"))
        assert not proves_not_applied(Proof(EvidenceKind.VENUE_RECORD, reference="ord-1"))
        assert not proves_not_applied(Proof(EvidenceKind.OPERATOR_ATTESTATION, note="looked at it"))
        assert not proves_not_applied("venue rejected")


class TestVenueVersion:
    @pytest.mark.parametrize("wire", ["in_process", "http"])
    def test_the_receipt_and_its_journalled_transition_carry_the_record_s_version(
        self, store: Store, wire: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Invariant 3: the receipt's transition binds the venue's version of the record it
        answered about (docs/paper-venue.md, "Record versions"), in process and over HTTP."""
        from effectgate.adapters._paper_server import serve_paper_venue
        from effectgate.adapters.http import HttpVenueAdapter
        from test_budgets_value import _cancel

        venue = PaperVenue(strict_orders=True)
        with serve_paper_venue(venue, api_key="versions-key") as server:
            monkeypatch.setenv("EFFECTGATE_TEST_VERSIONS_KEY", "versions-key")
            adapter: Adapter = (
                PaperAdapter(venue)
                if wire == "in_process"
                else HttpVenueAdapter(
                    server.url, credential_env="EFFECTGATE_TEST_VERSIONS_KEY", timeout=5.0
                )
            )
            try:
                gate = _gate(store, adapter)
                placed = gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
                assert placed.state is State.ACKNOWLEDGED and placed.venue_id is not None
                cancelled = gate.submit("cancel_order", "op-2", _cancel(placed.venue_id))
                assert cancelled.state is State.ACKNOWLEDGED
            finally:
                if isinstance(adapter, HttpVenueAdapter):
                    adapter.close()
        for op, ref in (("op-1", placed.venue_id), ("op-2", cancelled.venue_id)):
            receipt = [d for _, d in _trail(store, op) if d.get("state") == "acknowledged"]
            assert receipt[-1]["venue_version"] == "1"  # as of the answer: both new records
            assert receipt[-1]["evidence"] == ref
        assert venue.version(placed.venue_id) == 2  # the cancel changed the order
