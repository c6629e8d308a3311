"""Staged authority's evidence is checked (issue 39 item 11), on every store.

A step that widens an envelope axis names evidence the boundary recomputes from its own records
(a shadow report or a window of operations, by digest); a step that tightens is never undone by
a breaker trip; ``manual`` alone is no reversal condition. Seed 001's staged authority: "evidence
buys a larger envelope", so the evidence must be the boundary's, not the operator's word.
Invariant 7 (a breaker stops the class at once) is what a trip's reversal serves: it may only
narrow the envelope.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from effectgate import BreakerConfig, ControlError, State
from effectgate.errors import StepEvidenceMismatch, StepEvidenceRefused
from effectgate.store.roles import Store
from test_controls import INTENT, World, make_world, order


def fill(w: World, n: int = 3) -> tuple[float, float]:
    """``n`` distinct orders journalled in a window that is closed once this returns."""
    start = w.clock()
    for i in range(n):
        w.gate.submit("submit_order", f"clean-{i}", order(str(i + 1)))
    w.clock.advance(10)
    return start, w.clock()


def cap(w: World, value: str = "1000") -> None:
    w.operator.step(
        "submit_order", "max_value", value, evidence={"note": "initial"}, operator="alice"
    )


def shadow_window(w: World) -> tuple[float, float]:
    """Three shadow cases, the incumbent's outcome fed for each: one disagrees."""
    op = w.operator
    op.set_shadow("submit_order", True, operator="alice")
    start = w.clock()
    for i, qty in enumerate(["1", "2", "3"]):
        w.gate.submit("submit_order", f"s-{i}", order(qty), correlation_id=f"t-{i}")
    op.feed_incumbent("t-0", "submit_order", order("1"), source="desk")
    op.feed_incumbent("t-1", "submit_order", order("2"), source="desk")
    op.feed_incumbent("t-2", "submit_order", order("9"), source="desk")
    w.clock.advance(10)
    op.set_shadow("submit_order", False, operator="alice")
    return start, w.clock()


class TestWideningNeedsCheckedEvidence:
    def test_a_bare_mapping_is_refused_and_changes_nothing(self, store: Store) -> None:
        """`{"x": 1}` is not evidence: refused with its own error naming the field."""
        w = make_world(store)
        cap(w)
        before = len(list(store.iter_audit()))
        with pytest.raises(StepEvidenceRefused) as info:
            w.operator.step("submit_order", "max_value", "2000", evidence={"x": 1}, operator="b")
        assert info.value.code == "evidence_unverified" and info.value.field == "evidence.kind"
        assert w.operator.envelope("submit_order").max_value == Decimal("1000")
        assert len(w.operator.history()) == 1 and len(list(store.iter_audit())) == before

    def test_lifting_an_axis_is_a_widening_too(self, store: Store) -> None:
        w = make_world(store)
        cap(w)
        with pytest.raises(StepEvidenceRefused):
            w.operator.step("submit_order", "max_value", None, evidence={"x": 1}, operator="b")
        w.operator.step(
            "submit_order", "allowed_targets", ["XYZ-PERP"], evidence={"n": 1}, operator="a"
        )
        with pytest.raises(StepEvidenceRefused):
            w.operator.step(
                "submit_order",
                "allowed_targets",
                ["XYZ-PERP", "ABC"],
                evidence={"x": 1},
                operator="b",
            )

    def test_a_window_of_operations_is_recomputed_at_the_step(self, store: Store) -> None:
        """The figures and digest `step_evidence` gave are checked again; what is recorded is
        the boundary's own count (operations, states, dispatched, the axis's figure)."""
        w = make_world(store)
        cap(w)
        since, until = fill(w)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=since, until=until
        )
        assert proof["cases"] == 3 and proof["dispatched"] == 3
        assert proof["states"] == {"acknowledged": 3} and proof["max_value_seen"] == "300"
        assert str(proof["digest"]).startswith("sha256:")
        step = w.operator.step(
            "submit_order", "max_value", "2000", evidence=json.loads(json.dumps(proof)),
            operator="bob",
        )  # fmt: skip
        assert step.active and step.reverse_on == "breaker_trip"
        assert step.evidence == {**proof, "verified_at": w.clock()}
        assert w.operator.envelope("submit_order").max_value == Decimal("2000")

    @pytest.mark.parametrize(
        ("change", "error", "field"),
        [
            ({"cases": 30}, StepEvidenceMismatch, "evidence.cases"),
            ({"max_value_seen": "9000"}, StepEvidenceMismatch, "evidence.max_value_seen"),
            ({"digest": "sha256:" + "0" * 64}, StepEvidenceMismatch, "evidence.digest"),
            ({"digest": "abc"}, StepEvidenceRefused, "evidence.digest"),
            ({"axis": "rate"}, StepEvidenceRefused, "evidence.axis"),
            ({"action": "cancel_order"}, StepEvidenceRefused, "evidence.action"),
            ({"clean_actions": 500}, StepEvidenceRefused, "evidence.clean_actions"),
            ({"until": 9e9}, StepEvidenceRefused, "evidence.until"),
            ({"since": "yesterday"}, StepEvidenceRefused, "evidence.since"),
        ],
    )
    def test_evidence_that_differs_from_the_records_is_refused(
        self, store: Store, change: dict, error: type, field: str
    ) -> None:
        w = make_world(store)
        cap(w)
        since, until = fill(w)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=since, until=until
        )
        with pytest.raises(error) as info:
            w.operator.step(
                "submit_order", "max_value", "2000", evidence={**proof, **change}, operator="b"
            )
        assert info.value.field == field
        assert w.operator.envelope("submit_order").max_value == Decimal("1000")

    def test_a_window_whose_records_changed_is_stale(self, store: Store) -> None:
        """The digest binds the records: a row of the window that moved since is refused."""
        w = make_world(store)
        cap(w)
        start = w.clock()
        w.gate.propose("submit_order", "later", order("1"))  # validated, not yet dispatched
        w.clock.advance(10)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=start, until=w.clock()
        )
        assert w.gate.dispatch("later").state is State.ACKNOWLEDGED
        with pytest.raises(StepEvidenceMismatch):
            w.operator.step("submit_order", "max_value", "2000", evidence=proof, operator="b")

    def test_an_empty_window_proves_nothing(self, store: Store) -> None:
        w = make_world(store)
        cap(w)
        w.clock.advance(10)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=1.0, until=w.clock()
        )
        with pytest.raises(StepEvidenceRefused, match="nothing to judge"):
            w.operator.step("submit_order", "max_value", "2000", evidence=proof, operator="b")

    def test_a_shadow_report_is_recomputed_at_the_step(self, store: Store) -> None:
        """A shadow report over a closed range: compared, agreed, disagreed and the
        disagreement rate, by digest; a rate edited down is refused."""
        w = make_world(store)
        w.operator.step(
            "submit_order", "rate", {"limit": 1, "interval": 60}, evidence={"n": 1}, operator="a"
        )
        since, until = shadow_window(w)
        proof = w.operator.step_evidence(
            "submit_order", "rate", kind="shadow_report", since=since, until=until
        )
        assert (proof["compared"], proof["disagreed"]) == (3, 1)
        assert proof["disagreement_rate"] == pytest.approx(1 / 3)
        with pytest.raises(StepEvidenceMismatch, match="disagreement_rate"):
            w.operator.step(
                "submit_order", "rate", {"limit": 5, "interval": 60},
                evidence={**proof, "disagreement_rate": 0.0}, operator="b",
            )  # fmt: skip
        w.operator.step(
            "submit_order", "rate", {"limit": 5, "interval": 60}, evidence=proof, operator="b"
        )
        assert w.operator.envelope("submit_order").rate_limit == 5

    def test_the_store_refuses_a_widening_the_boundary_did_not_check(self, store: Store) -> None:
        """Below the Operator: a widening whose evidence carries no ``verified_at`` (the mark
        of the recomputation) is refused in the store's transaction."""
        w = make_world(store)
        cap(w)
        since, until = fill(w)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=since, until=until
        )
        with pytest.raises(StepEvidenceRefused, match="not recomputed"):
            store.apply_authority_step(
                "submit_order", "max_value", "2000", evidence=proof, reverse_on=None,
                operator="b", now=w.clock(),
            )  # fmt: skip


class TestReversal:
    def test_manual_alone_is_not_a_reversal_condition_for_a_widening(self, store: Store) -> None:
        w = make_world(store)
        cap(w)
        since, until = fill(w)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=since, until=until
        )
        with pytest.raises(ControlError) as info:
            w.operator.step(
                "submit_order", "max_value", "2000", evidence=proof, operator="b",
                reverse_on="manual",
            )  # fmt: skip
        assert info.value.field == "reverse_on" and "alone" in str(info.value)
        assert w.operator.envelope("submit_order").max_value == Decimal("1000")

    def test_a_tightening_step_is_never_loosened_by_a_breaker_trip(self, store: Store) -> None:
        """A cap set from nothing is a tightening: a trip leaves it (on main it was reversed
        to no cap at all, loosening the class as the breaker opened)."""
        w = make_world(store, breakers={"submit_order": BreakerConfig(window=60, max_repeats=2)})
        step = w.operator.step(
            "submit_order", "max_value", "1000", evidence={"note": "cap"}, operator="alice"
        )
        assert not step.active and step.reverse_on == "manual"
        for i in range(3):
            w.gate.submit("submit_order", f"dup-{i}", INTENT)
        assert w.store.controls("submit_order").breaker_open
        assert w.operator.envelope("submit_order").max_value == Decimal("1000")

    def test_a_trip_does_not_undo_a_tightening_made_after_a_widening(self, store: Store) -> None:
        """1000 -> 4000 (widening, breaker_trip), then 4000 -> 500 (tightening): the trip
        reverses the widening but the axis stays at 500, not 1000."""
        w = make_world(store, breakers={"submit_order": BreakerConfig(window=60, max_repeats=2)})
        cap(w)
        since, until = fill(w)
        proof = w.operator.step_evidence(
            "submit_order", "max_value", kind="operations", since=since, until=until
        )
        w.operator.step("submit_order", "max_value", "4000", evidence=proof, operator="bob")
        w.operator.step(
            "submit_order", "max_value", "500", evidence={"note": "incident"}, operator="carol"
        )
        for i in range(3):
            w.gate.submit("submit_order", f"dup-{i}", INTENT)
        assert w.store.controls("submit_order").breaker_open
        assert w.operator.envelope("submit_order").max_value == Decimal("500")
        reversal = w.operator.history("submit_order")[-1]
        assert (reversal.kind, reversal.old, reversal.new) == ("reversal", "500", "500")

    def test_a_tightening_names_no_breaker_trip(self, store: Store) -> None:
        w = make_world(store)
        with pytest.raises(ControlError) as info:
            w.operator.step(
                "submit_order", "max_value", "1000", evidence={"n": 1}, operator="a",
                reverse_on="breaker_trip",
            )  # fmt: skip
        assert info.value.field == "reverse_on"
        assert w.operator.history() == []


def test_the_cli_gives_the_evidence_and_the_step_checks_it(tmp_path) -> None:
    """`effectgate authority evidence` prints what `authority step` names; `{"x": 1}` exits 1."""
    from effectgate import SQLiteStore

    path = tmp_path / "ledger.db"
    store = SQLiteStore(str(path))
    w = make_world(store)
    cap(w)
    since, until = fill(w)
    store.close()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "effectgate", *args],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "EFFECTGATE_STORE": f"sqlite:///{path}", "COLUMNS": "200"},
        )  # fmt: skip

    bad = cli("authority", "step", "submit_order", "max_value", '"2000"', "--evidence", '{"x":1}')
    assert bad.returncode == 1 and "evidence.kind" in bad.stderr + bad.stdout
    got = cli(
        "authority", "evidence", "submit_order", "max_value", "--kind", "operations",
        "--since", repr(since), "--until", repr(until),
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    step = cli("authority", "step", "submit_order", "max_value", '"2000"', "--evidence", got.stdout)
    assert step.returncode == 0, step.stderr + step.stdout
    assert "reverses on breaker_trip" in step.stdout
