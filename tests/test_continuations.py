"""Continuations (docs/continuations.md): a retry or a compensation is a new, separately
authorised action in the reserved namespace, fenced and admitted only with proof. Invariant 9
(nothing retries a mutation automatically; a retry or compensation needs proof), on both stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, State, Tier
from effectgate._core.continuation import ContinuationProof, Ground
from effectgate._core.controls import to_micros
from effectgate._core.effects import MAX_COMPENSATIONS
from effectgate._core.intent import ActionClass, EffectClass, Registry
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate._execute.budgets import budget_dispatch_check
from effectgate._execute.continuations import ContinuationService
from effectgate._execute.predispatch import InTxCheck
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ContinuationRefused
from effectgate.examples import EXAMPLE_ORDER, SubmitOrder, cancel_order_class, notional
from effectgate.store.base import Operation
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock
from runkit import tool_call

INTENT = dict(EXAMPLE_ORDER)
VALUE = to_micros(Decimal("500000"))  # INTENT at quantity 5000 (price 100)


def registry(
    *,
    retries: int = 7,
    read_view: ReadView = ReadView.LAGGING,
    revisions: tuple[tuple[str, str], ...] = (("reconcile", "paper-read-1"),),
) -> Registry:
    submit = ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter="paper",
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=60.0,
        key_retention=86400.0,
        value_of=notional,
        target_field="instrument",
        tier_floor=Tier.VALIDATE,
        retries=retries,
        compensation="cancel_order",
        venue=VenueContract(
            honours_key=KeyHonour.HONOURED, read_view=read_view, revisions=revisions
        ),
    )
    return Registry([submit, cancel_order_class()])


class World:
    def __init__(
        self, store: Store, *, admission_checks: Sequence[InTxCheck] = (), **reg: object
    ) -> None:
        self.clock = ManualClock()
        self.venue = PaperVenue(clock=self.clock, strict_orders=True, max_quantity=1000)
        self.adapter = CountingAdapter(PaperAdapter(self.venue))
        reg_ = registry(**reg)  # type: ignore[arg-type]
        policy = PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000000")), "cancel_order": LimitPolicy()}
        )

        def gate(process: str) -> Gate:
            return Gate(
                store=store,
                registry=reg_,
                adapters={"paper": self.adapter},
                policy=policy,
                clock=self.clock,
                process_id=process,
                admission_checks=list(admission_checks),
            )

        self.agent_gate = gate("process-a")  # the original's process
        self.ops_gate = gate("process-b")  # another process continues
        self.service = ContinuationService(self.ops_gate)
        self.store = store

    def proof(self, ground: Ground, kind: EvidenceKind, ref: str | None, ttl: float = 300.0):
        return ContinuationProof(ground, Proof(kind, ref, note="seen"), self.clock() + ttl)

    def failed_original(self, op: str = "op-1") -> None:
        row = self.agent_gate.submit(
            "submit_order", op, {**INTENT, "quantity": "5000"}, principal="agent-1"
        )
        assert row.state is State.FAILED  # the venue refused it: over its maximum


@pytest.fixture
def w(store: Store) -> World:
    return World(store)


class TestCompensationEndToEnd:
    def test_submit_order_compensated_by_cancel_order_on_the_paper_venue(self, w: World) -> None:
        """Invariant 9: an applied order is undone by its declared compensation, a new row in
        the reserved namespace; the venue's order is cancelled; the original is unchanged."""
        original = w.agent_gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
        assert original.state is State.ACKNOWLEDGED and original.venue_id
        assert w.venue.order_state(original.venue_id) == "open"
        chain = w.service.chain("op-1")
        out = w.service.compensate(
            "op-1",
            {**_cancel(original.venue_id)},
            proof=w.proof(Ground.APPLIED_EFFECT, EvidenceKind.VENUE_RECORD, original.venue_id),
            by="alice",
            seq=chain.next_seq,
            predecessor=chain.predecessor_digest or "",
        )
        assert out.operation_id == "cont:op-1:1" and out.state is State.ACKNOWLEDGED
        assert w.venue.order_state(original.venue_id) == "cancelled"
        assert w.store.get("default", "op-1") == original  # the original is immutable
        shown = w.service.chain("op-1").to_dict()
        assert shown["continuations"][0]["kind"] == "compensate"  # type: ignore[index]
        assert shown["continuations"][0]["state"] == "acknowledged"  # type: ignore[index]
        kinds = [e.kind for e in w.store.audit_entries(scope="default", operation_id="op-1")]
        assert "continuation_linked" in kinds


class TestRetryUnderItsOwnKey:
    def test_a_retry_is_a_new_dispatch_under_the_continuations_own_key(self, w: World) -> None:
        """Invariant 9: the retry is a new row sent under its own key, with its own dispatch id
        (docs/adapters.md, "Receipts"); the original's row is unchanged."""
        w.failed_original()
        original = w.store.get("default", "op-1")
        assert original is not None
        chain = w.service.chain("op-1")
        row = w.service.retry(
            "op-1",
            proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "refusal"),
            by="alice",
            seq=1,
            predecessor=chain.predecessor_digest or "",
        )
        assert w.adapter.requests[-1].operation_key == "default:cont:op-1:1"
        assert row.dispatch_id is not None and row.dispatch_id != original.dispatch_id
        assert w.store.get("default", "op-1") == original
        shown = w.service.chain("op-1").to_dict()["continuations"]
        assert shown[0]["dispatch_id"] == row.dispatch_id  # type: ignore[index]


class TestFencing:
    def test_stale_predecessor_is_refused(self, w: World) -> None:
        """A continuation naming a predecessor observation that no longer holds is refused."""
        w.failed_original()
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "refusal"),
                by="alice",
                seq=1,
                predecessor="0" * 64,
            )
        assert err.value.reason == "stale_predecessor"
        assert w.store.continuations("default", "op-1") == []

    def test_wrong_sequence_is_refused(self, w: World) -> None:
        w.failed_original()
        chain = w.service.chain("op-1")
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "refusal"),
                by="alice",
                seq=2,
                predecessor=chain.predecessor_digest or "",
            )
        assert err.value.reason == "stale_sequence"

    def test_expired_proof_is_refused(self, w: World) -> None:
        w.failed_original()
        chain = w.service.chain("op-1")
        proof = w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r", ttl=10)
        w.clock.advance(11)
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1", proof=proof, by="alice", seq=1, predecessor=chain.predecessor_digest or ""
            )
        assert err.value.reason == "proof_expired"

    def test_the_original_worker_is_refused(self, w: World) -> None:
        """The original's proposer may not authorise its continuation, and the process that
        dispatched the original may not dispatch it: that one admits it but leaves it
        validated, and another process sends it."""
        w.failed_original()
        chain = w.service.chain("op-1")
        proof = w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r")
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1", proof=proof, by="agent-1", seq=1, predecessor=chain.predecessor_digest or ""
            )
        assert err.value.reason == "original_worker"
        sent = w.adapter.execute_calls
        row = ContinuationService(w.agent_gate).retry(
            "op-1", proof=proof, by="alice", seq=1, predecessor=chain.predecessor_digest or ""
        )
        assert row.state is State.VALIDATED and w.adapter.execute_calls == sent
        assert "not dispatched" in (row.detail or "")
        # The same process asked again still does not send it; another process does.
        assert w.agent_gate.dispatch(row.operation_id).state is State.VALIDATED
        assert w.ops_gate.dispatch(row.operation_id).state is State.FAILED  # still too large
        assert w.adapter.execute_calls == sent + 1

    def test_an_assertion_is_not_proof(self, w: World) -> None:
        with pytest.raises(ContinuationRefused) as err:
            w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.OPERATOR_ATTESTATION, None)
        assert err.value.reason == "bad_proof"


class TestBounds:
    def test_at_most_seven_retries(self, w: World) -> None:
        """Each retry is refused by the venue (too large) and a new one is admitted, up to 7."""
        w.failed_original()
        for n in range(1, 8):
            chain = w.service.chain("op-1")
            row = w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r"),
                by="alice",
                seq=n,
                predecessor=chain.predecessor_digest or "",
            )
            assert row.state is State.FAILED and row.operation_id == f"cont:op-1:{n}"
        chain = w.service.chain("op-1")
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r"),
                by="alice",
                seq=8,
                predecessor=chain.predecessor_digest or "",
            )
        assert err.value.reason == "retries_exhausted"

    def test_at_most_eight_compensations(self, w: World) -> None:
        """Eight compensations the venue refuses (each a new, separately admitted row); the
        ninth is refused at admission."""
        original = w.agent_gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
        assert original.venue_id
        wrong = {**_cancel(original.venue_id), "instrument": "OTHER-PERP"}
        for n in range(1, MAX_COMPENSATIONS + 2):
            chain = w.service.chain("op-1")
            proof = w.proof(Ground.APPLIED_EFFECT, EvidenceKind.VENUE_RECORD, original.venue_id)
            if n > MAX_COMPENSATIONS:
                with pytest.raises(ContinuationRefused) as err:
                    w.service.compensate(
                        "op-1",
                        wrong,
                        proof=proof,
                        by="alice",
                        seq=n,
                        predecessor=chain.predecessor_digest or "",
                    )
                assert err.value.reason == "compensations_exhausted"
                break
            row = w.service.compensate(
                "op-1",
                wrong,
                proof=proof,
                by="alice",
                seq=n,
                predecessor=chain.predecessor_digest or "",
            )
            assert row.state is State.FAILED  # the venue refused: not that instrument's order
        assert len(w.store.continuations("default", "op-1")) == MAX_COMPENSATIONS
        assert w.venue.order_state(original.venue_id) == "open"


class TestAbsenceProof:
    def test_written_off_row_without_authoritative_reads_is_refused(self, store: Store) -> None:
        """A write-off as absent past the horizon is not proof of permanent absence at a venue
        whose read view is only lagging."""
        w = World(store)
        w.venue.fail_next(1, after_apply=False)
        row = w.agent_gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
        assert row.state is State.SUBMITTED
        store.transition(
            "default",
            "op-1",
            State.SUBMITTED,
            State.FAILED,
            now=w.clock(),
            detail="absent at the venue 60s after submission",
        )
        chain = w.service.chain("op-1")
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "none"),
                by="alice",
                seq=1,
                predecessor=chain.predecessor_digest or "",
            )
        assert err.value.reason == "absence_unproven"

    def test_authoritative_reads_make_the_write_off_proof(self, store: Store) -> None:
        w = World(store, read_view=ReadView.AUTHORITATIVE)
        w.venue.fail_next(1, after_apply=False)
        w.agent_gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
        store.transition(
            "default",
            "op-1",
            State.SUBMITTED,
            State.FAILED,
            now=w.clock(),
            detail="absent at the venue 60s after submission",
        )
        chain = w.service.chain("op-1")
        row = w.service.retry(
            "op-1",
            proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "none"),
            by="alice",
            seq=1,
            predecessor=chain.predecessor_digest or "",
        )
        assert row.state is State.ACKNOWLEDGED and w.venue.effect_count == 1


class TestLostAcknowledgement:
    def test_the_same_continuation_again_is_observed_not_admitted(self, w: World) -> None:
        w.failed_original()
        chain = w.service.chain("op-1")
        args = dict(
            proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r"),
            by="alice",
            seq=1,
            predecessor=chain.predecessor_digest or "",
        )
        first = w.service.retry("op-1", **args)  # type: ignore[arg-type]
        again = w.service.retry("op-1", **args)  # type: ignore[arg-type]
        assert again == first and len(w.store.continuations("default", "op-1")) == 1
        assert w.adapter.execute_calls == 2  # the original and ONE retry


def _cancel(venue_id: str) -> dict[str, object]:
    return {
        "intent_version": "1",
        "action": "cancel_order",
        "instrument": INTENT["instrument"],
        "order_ref": venue_id,
        "rationale": "undo",
        "context_digest": INTENT["context_digest"],
        "proposed_by": INTENT["proposed_by"],
    }


class TestTierAndApproval:
    def test_a_continuation_runs_at_no_lower_tier_and_its_workers_cannot_approve(
        self, store: Store
    ) -> None:
        """The original needed an approval, so its retry does too (even though the policy would
        let the retry's own value through); neither the original's proposer nor the retry's
        authoriser may approve it; another approver does and a standing dispatcher of another
        process sends it."""
        from effectgate import Dispatcher, Operator
        from effectgate.errors import SelfApproval

        w = World(store)
        w.agent_gate.policy = PolicySet(
            {
                "submit_order": LimitPolicy(Decimal("1000000"), approve_above=Decimal("100")),
                "cancel_order": LimitPolicy(),
            }
        )
        big = {**INTENT, "quantity": "5000"}  # over the venue's maximum: refused when sent
        row = w.agent_gate.submit("submit_order", "op-1", big, principal="agent-1")
        assert row.state is State.AWAITING_APPROVAL
        op = Operator(store=store, registry=w.agent_gate.registry, clock=w.clock)
        op.approve("op-1", fingerprint=row.fingerprint, approver="bob")
        Dispatcher(w.agent_gate, owner="process-a").run_once()
        assert w.agent_gate.get("op-1").state is State.FAILED
        chain = w.service.chain("op-1")
        retry = w.service.retry(
            "op-1",
            proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "refused"),
            by="alice",
            seq=1,
            predecessor=chain.predecessor_digest or "",
        )
        assert retry.state is State.AWAITING_APPROVAL and retry.tier == "approve"
        for who in ("agent-1", "alice"):
            with pytest.raises(SelfApproval):
                op.approve(retry.operation_id, fingerprint=retry.fingerprint, approver=who)
        op.approve(retry.operation_id, fingerprint=retry.fingerprint, approver="carol")
        # The process that dispatched the original leases it but does not send it.
        sent = w.adapter.execute_calls
        Dispatcher(w.agent_gate, owner="process-a").run_once()
        assert w.adapter.execute_calls == sent
        # Another process sends it once the first one's lease has expired.
        w.clock.advance(61)
        Dispatcher(w.ops_gate, owner="process-b").run_once()
        assert w.adapter.execute_calls == sent + 1
        assert w.ops_gate.get(retry.operation_id).state is State.FAILED  # the venue refused


class TestChargedToThePlansValue:
    """A continuation of an original whose run was admitted under a leaf of a value-bound plan
    is charged its declared value on that leaf, in its own dispatch transaction (invariant 12:
    budgets never overdraw; invariant 9: a continuation is a separately charged action)."""

    def _world(self, store: Store, *, value_bound: bool = True) -> World:
        from test_budgets_value import leaf, plan

        w = World(store, admission_checks=[budget_dispatch_check])
        # The original (5000 at 100) is worth 500,000; the leaf has room for it and one retry.
        store.open_plan_account("default", plan(2_000_000 if value_bound else None), now=w.clock(),
                                actor="h")  # fmt: skip
        store.reserve(
            "default", leaf(value=1_100_000 if value_bound else None), now=w.clock(), actor="h"
        )
        store.admit_run("default", "run-1", "plan-v", "leaf-a", now=w.clock(), actor="h")
        call = tool_call("t-1", run="run-1")
        store.record_run_call("default", call, now=w.clock(), actor="h")
        original = w.agent_gate.submit(
            "submit_order", "op-1", {**INTENT, "quantity": "5000"}, run_call=call.ref
        )
        assert original.state is State.FAILED  # sent, and refused by the venue
        return w

    def _retry(self, w: World, seq: int) -> Operation:
        chain = w.service.chain("op-1")
        return w.service.retry(
            "op-1",
            proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r"),
            by="alice",
            seq=seq,
            predecessor=chain.predecessor_digest or "",
        )

    def test_a_continuation_is_charged_its_value_and_refused_past_the_leaf(
        self, store: Store
    ) -> None:
        w = self._world(store)
        assert store.run_dispatched_value("default", "run-1") == VALUE
        first = self._retry(w, 1)
        assert first.state is State.FAILED  # sent: it fitted (500,000 + 500,000 <= 1,100,000)
        assert store.run_dispatched_value("default", "run-1") == 2 * VALUE
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 2
        sent = w.adapter.execute_calls
        second = self._retry(w, 2)
        assert second.state is State.REJECTED
        assert "budget_exceeded" in (second.detail or "")
        assert "(value_micros; charged to the original's run 'run-1')" in (second.detail or "")
        assert w.adapter.execute_calls == sent, "refused before sending"
        # Rolled back with the refused dispatch: no value, no slot, no entry in the record.
        assert store.run_dispatched_value("default", "run-1") == 2 * VALUE
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 2
        assert store.count_dispatched(0.0) == {"submit_order": 2}
        # Settling the run charges the leaf what the original and its retry dispatched.
        res, _ = store.settle_run("default", "run-1", now=w.clock() + 1, actor="h")
        assert res.charge is not None and res.charge.value_micros == 2 * VALUE

    def test_a_plan_that_does_not_bound_value_charges_a_continuation_only_its_slot(
        self, store: Store
    ) -> None:
        w = self._world(store, value_bound=False)
        for seq in (1, 2):
            assert self._retry(w, seq).state is State.FAILED
        assert store.run_dispatched_value("default", "run-1") == 0
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 3

    def test_a_continuation_under_a_settled_leaf_is_refused_holding_no_slot(
        self, store: Store
    ) -> None:
        w = self._world(store)
        store.settle_run("default", "run-1", now=w.clock(), actor="h")
        sent = w.adapter.execute_calls
        row = self._retry(w, 1)
        assert row.state is State.REJECTED and "budget_exceeded" in (row.detail or "")
        assert w.adapter.execute_calls == sent
        assert store.run_dispatched_value("default", "run-1") == VALUE
