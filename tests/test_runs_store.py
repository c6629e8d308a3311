"""The runs role's contract on both stores: the run-call journal, seals, bound admissions and
provider receipts (issue 13, docs/runs.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from effectgate import IdempotencyConflict, RunCallRef, State, verify_entries
from effectgate.errors import (
    InvalidRunCall,
    RunCallConflict,
    RunCallNotFound,
    RunCallNotOpen,
    RunSealed,
)
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from runkit import RUN, SCOPE, completion, gate_for, model_call, receipt, tool_call

H = "harness-1"


def audit_kinds(store: Store) -> list[str]:
    return [e.kind for e in store.iter_audit()]


def refusals(store: Store) -> list[dict[str, Any]]:
    return [e.detail for e in store.iter_audit() if e.kind == "run_refused"]


class TestRecordingACall:
    def test_first_insert_is_new_an_identical_replay_is_not(self, store: Store) -> None:
        call = tool_call("step-1")
        record, new = store.record_run_call(SCOPE, call, now=10.0, actor=H)
        assert new and record.call == call and record.completion is None
        again, new_again = store.record_run_call(SCOPE, call, now=11.0, actor=H)
        assert not new_again
        assert again.started_at == 10.0, "a replay returns the stored record"
        assert audit_kinds(store).count("run_call_recorded") == 1

    def test_a_changed_attempt_in_the_same_slot_conflicts(self, store: Store) -> None:
        store.record_run_call(SCOPE, tool_call("step-1"), now=10.0, actor=H)
        with pytest.raises(RunCallConflict):
            store.record_run_call(SCOPE, tool_call("step-1", "other-id"), now=11.0, actor=H)
        # Only the audit line of the refusal was written; the slot keeps the first call.
        stored = store.get_run_call(SCOPE, RUN, "step-1")
        assert stored is not None and stored.call.call_id == "step-1-c1"
        assert refusals(store)[-1]["error"]["code"] == "run_call_conflict"

    def test_the_journal_keeps_digests_and_sizes_never_bytes(self, store: Store) -> None:
        store.record_run_call(SCOPE, model_call("m-1"), now=1.0, actor=H)
        entry = next(e for e in store.iter_audit() if e.kind == "run_call_recorded")
        assert set(entry.detail) >= {"request_digest", "request_bytes", "record_digest"}
        assert "prompt" not in json.dumps(entry.detail)

    def test_malformed_records_are_refused_before_the_store(self) -> None:
        with pytest.raises(InvalidRunCall) as e:
            tool_call("bad slot")
        assert e.value.field == "slot"
        with pytest.raises(InvalidRunCall):
            model_call("m").__class__(**{**model_call("m").to_dict(), "request_digest": "abc"})

    def test_listing_is_bounded_with_a_cursor(self, store: Store) -> None:
        for i in range(7):
            store.record_run_call(SCOPE, tool_call(f"s{i:02d}"), now=float(i), actor=H)
        first = store.list_run_calls(SCOPE, RUN, limit=3)
        assert [r.call.slot for r in first] == ["s00", "s01", "s02"]
        rest = store.list_run_calls(SCOPE, RUN, after=first[-1].call.slot, limit=10)
        assert [r.call.slot for r in rest] == ["s03", "s04", "s05", "s06"]
        with pytest.raises(InvalidRunCall):
            store.list_run_calls(SCOPE, RUN, limit=0)
        with pytest.raises(InvalidRunCall):
            store.list_run_calls(SCOPE, RUN, limit=1001)

    def test_runs_are_listed_with_their_counts(self, store: Store) -> None:
        store.record_run_call(SCOPE, tool_call("a"), now=1.0, actor=H)
        store.record_run_call(SCOPE, model_call("b"), now=2.0, actor=H)
        store.complete_run_call(SCOPE, model_call("b").ref, completion(), now=3.0, actor=H)
        run = store.get_run(SCOPE, RUN)
        assert run is not None and (run.calls, run.open_calls, run.seal) == (2, 1, None)
        assert [r.run_id for r in store.list_runs(SCOPE, sealed=False)] == [RUN]
        assert store.count_open_runs() == 1


class TestCompletion:
    def test_a_completion_is_immutable(self, store: Store) -> None:
        call = model_call("m-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        done, new = store.complete_run_call(SCOPE, call.ref, completion("a"), now=2.0, actor=H)
        assert new and done.completion == completion("a") and done.completed_at == 2.0
        _, again = store.complete_run_call(SCOPE, call.ref, completion("a"), now=3.0, actor=H)
        assert not again, "the identical completion is idempotent"
        with pytest.raises(RunCallConflict):
            store.complete_run_call(SCOPE, call.ref, completion("b"), now=4.0, actor=H)
        stored = store.get_run_call(SCOPE, RUN, "m-1")
        assert stored is not None and stored.completion == completion("a")
        assert stored.completed_at == 2.0

    def test_completing_an_unknown_or_other_invocation_is_refused(self, store: Store) -> None:
        store.record_run_call(SCOPE, model_call("m-1"), now=1.0, actor=H)
        with pytest.raises(RunCallNotFound):
            store.complete_run_call(
                SCOPE, RunCallRef(RUN, "m-1", "someone-else"), completion(), now=2.0, actor=H
            )
        with pytest.raises(RunCallNotFound):
            store.complete_run_call(
                SCOPE, RunCallRef(RUN, "m-9", "x"), completion(), now=2.0, actor=H
            )

    def test_a_missing_completion_never_permits_reinvocation(self, store: Store) -> None:
        """The slot stays the uncertain call's: recording it again is a replay (False), and a
        new invocation id in the slot is a conflict, never a second call."""
        store.record_run_call(SCOPE, model_call("m-1"), now=1.0, actor=H)
        _, new = store.record_run_call(SCOPE, model_call("m-1"), now=500.0, actor=H)
        assert not new
        with pytest.raises(RunCallConflict):
            store.record_run_call(SCOPE, model_call("m-1", "retry-2"), now=501.0, actor=H)
        assert store.count_unresolved_provider_calls() == 1


class TestSeal:
    """Invariant 13: a run's seal is permanent; nothing is admitted against a sealed run."""

    def test_sealing_is_permanent_and_idempotent(self, store: Store) -> None:
        store.record_run_call(SCOPE, tool_call("a"), now=1.0, actor=H)
        seal, new = store.seal_run(SCOPE, RUN, actor="ops-1", reason="run ended", now=5.0)
        assert new and (seal.actor, seal.reason, seal.sealed_at) == ("ops-1", "run ended", 5.0)
        again, new_again = store.seal_run(SCOPE, RUN, actor="ops-2", reason="again", now=6.0)
        assert not new_again and again == seal, "no reopen, no second seal"
        assert audit_kinds(store).count("run_sealed") == 1

    def test_sealing_an_empty_journal_is_valid(self, store: Store) -> None:
        _, new = store.seal_run(SCOPE, "never-started", actor="ops-1", reason="x", now=1.0)
        assert new
        with pytest.raises(RunSealed):
            store.record_run_call(SCOPE, tool_call("a", run="never-started"), now=2.0, actor=H)

    def test_no_call_is_recorded_after_the_seal_replays_included(self, store: Store) -> None:
        call = tool_call("a")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=2.0)
        with pytest.raises(RunSealed):
            store.record_run_call(SCOPE, call, now=3.0, actor=H)
        with pytest.raises(RunSealed):
            store.record_run_call(SCOPE, tool_call("b"), now=3.0, actor=H)
        assert [d["error"]["code"] for d in refusals(store)] == ["run_sealed", "run_sealed"]

    def test_calls_already_admitted_may_still_complete(self, store: Store) -> None:
        call = model_call("m")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=2.0)
        _, new = store.complete_run_call(SCOPE, call.ref, completion(), now=3.0, actor=H)
        assert new

    def test_a_seal_needs_an_actor_and_a_reason(self, store: Store) -> None:
        with pytest.raises(InvalidRunCall):
            store.seal_run(SCOPE, RUN, actor="ops-1", reason="  ", now=1.0)
        with pytest.raises(InvalidRunCall):
            store.seal_run(SCOPE, RUN, actor="bad actor", reason="x", now=1.0)
        with pytest.raises(InvalidRunCall):
            store.seal_run(SCOPE, RUN, actor="ops-1", reason="line\x00two", now=1.0)
        assert store.get_run(SCOPE, RUN) is None


class TestBoundAdmission:
    """An effect is admitted only against the exact, unfinished tool call it names, and never
    after the run is sealed (invariant 13); a refusal writes only an audit line."""

    def submit(self, store: Store, op: str, ref: RunCallRef, **kw: Any) -> Any:
        gate, adapter = gate_for(store)
        return gate.submit("submit_order", op, EXAMPLE_ORDER, run_call=ref, **kw), adapter

    def test_an_effect_is_admitted_against_its_open_tool_call(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        row, adapter = self.submit(store, "op-1", call.ref)
        assert row.state is State.ACKNOWLEDGED and adapter.execute_calls == 1
        assert store.run_binding(SCOPE, "op-1") == call.ref
        stored = store.get_run_call(SCOPE, RUN, "t-1")
        assert stored is not None and stored.effects == 1
        journal = next(e for e in store.iter_audit() if e.operation_id == "op-1")
        assert journal.detail["run_call"] == call.ref.to_dict()

    @pytest.mark.parametrize(
        ("ref", "error"),
        [
            (RunCallRef(RUN, "t-1", "not-this-one"), RunCallNotFound),
            (RunCallRef(RUN, "t-9", "t-9-c1"), RunCallNotFound),
            (RunCallRef("no-such-run", "t-1", "t-1-c1"), RunCallNotFound),
            (RunCallRef(RUN, "m-1", "m-1-c1"), RunCallNotOpen),
        ],
    )
    def test_anything_but_the_exact_open_tool_call_is_refused(
        self, store: Store, ref: RunCallRef, error: type[Exception]
    ) -> None:
        store.record_run_call(SCOPE, tool_call("t-1"), now=1.0, actor=H)
        store.record_run_call(SCOPE, model_call("m-1"), now=1.0, actor=H)
        before = store.list_operations(limit=10)
        with pytest.raises(error):
            self.submit(store, "op-1", ref)
        assert store.list_operations(limit=10) == before == []
        assert refusals(store)[-1]["operation_id"] == "op-1"

    def test_a_finished_call_admits_nothing_more(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        store.complete_run_call(SCOPE, call.ref, completion(), now=2.0, actor=H)
        with pytest.raises(RunCallNotOpen):
            self.submit(store, "op-1", call.ref)
        assert store.get(SCOPE, "op-1") is None

    def test_a_call_past_its_deadline_admits_nothing(self, store: Store) -> None:
        clock = ManualClock(start=1000.0)
        call = tool_call("t-1", deadline=999.0)
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, _ = gate_for(store, clock)
        with pytest.raises(RunCallNotOpen, match="deadline"):
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)

    def test_nothing_is_admitted_after_the_seal(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=2.0)
        with pytest.raises(RunSealed) as e:
            self.submit(store, "op-1", call.ref)
        assert e.value.row is None and store.get(SCOPE, "op-1") is None

    def test_a_bound_replay_after_the_seal_carries_the_row_and_never_dispatches(
        self, store: Store
    ) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, adapter = gate_for(store)
        # Proposed only: the row waits validated, as a harness's effect may wait for approval.
        first = gate.submit(
            "submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref, dispatch=False
        )
        assert first.state is State.VALIDATED
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=2.0)
        with pytest.raises(RunSealed) as e:
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)
        assert e.value.row is not None and e.value.row.state is State.VALIDATED
        assert e.value.to_dict()["operation"]["operation_id"] == "op-1"
        assert adapter.execute_calls == 0

    def test_an_admitted_effect_may_still_be_dispatched_after_the_seal(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, adapter = gate_for(store)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref, dispatch=False)
        store.complete_run_call(SCOPE, call.ref, completion(), now=2.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=3.0)
        assert gate.dispatch("op-1").state is State.ACKNOWLEDGED
        assert adapter.execute_calls == 1

    def test_a_replay_before_the_seal_returns_the_row(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        gate, adapter = gate_for(store)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)
        again = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=call.ref)
        assert again.replayed and adapter.execute_calls == 1
        changed = {**EXAMPLE_ORDER, "quantity": "2"}
        with pytest.raises(IdempotencyConflict):
            gate.submit("submit_order", "op-1", changed, run_call=call.ref)

    def test_the_same_operation_under_another_call_conflicts(self, store: Store) -> None:
        one, two = tool_call("t-1"), tool_call("t-2")
        for c in (one, two):
            store.record_run_call(SCOPE, c, now=1.0, actor=H)
        gate, _ = gate_for(store)
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=one.ref)
        with pytest.raises(RunCallConflict):
            gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=two.ref)
        gate.submit("submit_order", "op-2", EXAMPLE_ORDER)  # unbound
        with pytest.raises(RunCallConflict):
            gate.submit("submit_order", "op-2", EXAMPLE_ORDER, run_call=one.ref)

    def test_the_run_call_context_binds_what_is_submitted_inside_it(self, store: Store) -> None:
        from effectgate import RunJournal

        journal = RunJournal(store, actor=H)
        call = tool_call("t-1")
        journal.record(call)
        gate, _ = gate_for(store)
        with journal.call_context(call.ref):
            gate.submit("submit_order", "op-ctx", EXAMPLE_ORDER)
        gate.submit("submit_order", "op-free", EXAMPLE_ORDER)
        assert store.run_binding(SCOPE, "op-ctx") == call.ref
        assert store.run_binding(SCOPE, "op-free") is None

    def test_every_change_and_refusal_is_in_the_chain_and_it_verifies(self, store: Store) -> None:
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        self.submit(store, "op-1", call.ref)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=3.0)
        with pytest.raises(RunSealed):
            self.submit(store, "op-2", call.ref)
        result = verify_entries(store.audit_entries(limit=1000), heads=store.audit_heads())
        assert result.ok, result
        kinds = audit_kinds(store)
        assert {"run_call_recorded", "run_sealed", "run_refused"} <= set(kinds)


class TestProviderReceipts:
    def test_disagreeing_receipts_are_kept_side_by_side(self, store: Store) -> None:
        call = model_call("m-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        assert store.put_provider_receipt(SCOPE, RUN, "m-1", receipt(call), now=2.0, actor=H)
        assert not store.put_provider_receipt(SCOPE, RUN, "m-1", receipt(call), now=3.0, actor=H), (
            "the same receipt is kept once"
        )
        other = receipt(call, "failed", proof="proof-2")
        assert store.put_provider_receipt(SCOPE, RUN, "m-1", other, now=4.0, actor=H)
        kept = [r.outcome.value for _, r in store.provider_receipts(SCOPE, RUN)]
        assert sorted(kept) == ["failed", "succeeded"]

    def test_a_receipt_bound_to_other_routing_evidence_is_refused(self, store: Store) -> None:
        call = model_call("m-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        from dataclasses import replace

        for wrong in (
            replace(receipt(call), provider="other-llm"),
            replace(receipt(call), model="acme-small"),
            replace(receipt(call), request_digest="0" * 64),
        ):
            with pytest.raises(RunCallConflict):
                store.put_provider_receipt(SCOPE, RUN, "m-1", wrong, now=2.0, actor=H)
        assert store.provider_receipts(SCOPE, RUN) == []

    def test_a_receipt_contradicting_a_local_return_is_refused(self, store: Store) -> None:
        call = model_call("m-1")
        store.record_run_call(SCOPE, call, now=1.0, actor=H)
        store.complete_run_call(SCOPE, call.ref, completion("local"), now=2.0, actor=H)
        with pytest.raises(RunCallConflict):
            store.put_provider_receipt(
                SCOPE, RUN, "m-1", receipt(call, result="other"), now=3.0, actor=H
            )
        assert store.put_provider_receipt(
            SCOPE, RUN, "m-1", receipt(call, result="local"), now=3.0, actor=H
        )
