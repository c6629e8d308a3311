"""Provider-call reconciliation against a fake provider that lags, errors and disagrees, and a
harness that crashes mid-run and recovers from the journal and the snapshot (issue 13)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from effectgate import (
    ProviderReceipt,
    ProviderReconciler,
    RunCallRecord,
    RunJournal,
    RunSealer,
    SealRequest,
    State,
    verify_run_snapshot,
)
from effectgate.errors import (
    ConfigError,
    PermissionDenied,
    RunCallConflict,
    RunNotSealed,
    RunSealDeadline,
    RunSealed,
)
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from runkit import RUN, SCOPE, completion, gate_for, model_call, receipt, tool_call

H = "harness-1"


class FakeProvider:
    """Answers lookups about original calls: per slot a receipt, None (a miss), an exception,
    or a delay first. Counts lookups; it has no way to send anything."""

    def __init__(self) -> None:
        self.answers: dict[str, ProviderReceipt | Exception | None] = {}
        self.delay: dict[str, float] = {}
        self.lookups: list[str] = []
        self.lock = threading.Lock()
        self.active = 0
        self.most_active = 0

    def lookup(self, scope: str, record: RunCallRecord) -> ProviderReceipt | None:
        slot = record.call.slot
        with self.lock:
            self.lookups.append(slot)
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay.get(slot, 0.01))
            answer = self.answers.get(slot)
            if isinstance(answer, Exception):
                raise answer
            return answer
        finally:
            with self.lock:
                self.active -= 1


def accept(record: RunCallRecord, receipt: ProviderReceipt) -> None:
    """The host's authenticator (a real one checks the provider's signature)."""
    if receipt.proof_digest == "0" * 64:
        raise PermissionDenied("unsigned proof")


def journal_with(store: Store, n: int = 6) -> list:
    calls = [model_call(f"m-{i}") for i in range(n)]
    for c in calls:
        store.record_run_call(SCOPE, c, now=1.0, actor=H)
    return calls


class TestReconciler:
    def test_terminal_unresolved_and_returned_calls_are_counted(self, store: Store) -> None:
        calls = journal_with(store, 4)
        store.record_run_call(SCOPE, tool_call("t-1"), now=1.0, actor=H)
        store.complete_run_call(SCOPE, calls[3].ref, completion(), now=2.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {
            "m-0": receipt(calls[0]),
            "m-1": receipt(calls[1], "not_accepted"),
            "m-2": None,  # a lookup miss: unresolved, never a failure
        }
        rec = ProviderReconciler(store, lookup=provider.lookup, authenticate=accept)
        page = rec.reconcile_page(RUN)
        assert (page.scanned, page.terminal, page.unresolved, page.returned, page.tool_calls) == (
            5,
            2,
            1,
            1,
            1,
        )
        assert page.errors == () and page.next_after is None
        assert sorted(provider.lookups) == ["m-0", "m-1", "m-2"], "returned calls are not asked"
        assert store.count_unresolved_provider_calls() == 1

    def test_a_retry_reauthenticates_stored_receipts_without_asking_again(
        self, store: Store
    ) -> None:
        calls = journal_with(store, 2)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {"m-0": receipt(calls[0]), "m-1": receipt(calls[1], "failed")}
        rec = ProviderReconciler(store, lookup=provider.lookup, authenticate=accept)
        rec.reconcile_page(RUN)
        provider.lookups.clear()
        again = rec.reconcile_page(RUN)
        assert again.terminal == 2 and provider.lookups == []

    def test_pages_follow_a_cursor_and_an_erroring_page_returns_none(self, store: Store) -> None:
        calls = journal_with(store, 5)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {c.slot: receipt(c) for c in calls}
        provider.answers["m-3"] = RuntimeError("provider 503")
        rec = ProviderReconciler(store, lookup=provider.lookup, authenticate=accept)
        first = rec.reconcile_page(RUN, limit=2)
        assert first.next_after == "m-1" and first.terminal == 2
        second = rec.reconcile_page(RUN, after=first.next_after, limit=2)
        assert second.next_after is None, "a page that errors returns no cursor"
        assert second.terminal == 1 and "m-3" in second.errors[0]
        assert "provider 503" in second.errors[0]

    def test_a_lagging_provider_meets_the_deadline_and_nothing_late_is_kept(
        self, store: Store
    ) -> None:
        calls = journal_with(store, 3)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {c.slot: receipt(c) for c in calls}
        provider.delay = {"m-1": 1.5}
        rec = ProviderReconciler(store, lookup=provider.lookup, authenticate=accept, timeout=0.5)
        started = time.monotonic()
        page = rec.reconcile_page(RUN)
        assert time.monotonic() - started < 1.4, "the page does not wait for the laggard"
        assert page.terminal == 2 and page.next_after is None
        assert any("timed out" in e for e in page.errors)
        time.sleep(1.2)  # the abandoned lookup finishes; its answer is never stored
        assert [s for s, _ in store.provider_receipts(SCOPE, RUN)] == ["m-0", "m-2"]

    def test_queue_wait_counts_against_the_deadline(self, store: Store) -> None:
        calls = journal_with(store, 4)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {c.slot: receipt(c) for c in calls}
        provider.delay = {c.slot: 0.4 for c in calls}
        rec = ProviderReconciler(
            store, lookup=provider.lookup, authenticate=accept, concurrency=1, timeout=0.6
        )
        page = rec.reconcile_page(RUN)
        # One worker: the first lookup fits, the second ends past the deadline, the rest
        # time out waiting in the queue and are never asked.
        assert page.terminal == 1 and len(page.errors) == 3
        assert len(provider.lookups) <= 2

    def test_concurrency_is_bounded_by_default_to_four(self, store: Store) -> None:
        calls = journal_with(store, 10)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {c.slot: receipt(c) for c in calls}
        provider.delay = {c.slot: 0.1 for c in calls}
        ProviderReconciler(store, lookup=provider.lookup, authenticate=accept).reconcile_page(RUN)
        assert provider.most_active == 4

    def test_disagreeing_receipts_are_both_kept(self, store: Store) -> None:
        calls = journal_with(store, 1)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        rec = ProviderReconciler(store, lookup=provider.lookup, authenticate=accept)
        provider.answers = {"m-0": receipt(calls[0])}
        rec.reconcile_page(RUN)
        # The provider changes its story; a new proof is stored beside the first.
        store.put_provider_receipt(
            SCOPE, RUN, "m-0", receipt(calls[0], "failed", proof="p2"), now=5.0, actor=H
        )
        page = rec.reconcile_page(RUN)
        assert page.disagreements == 1
        assert len(store.provider_receipts(SCOPE, RUN, "m-0")) == 2

    def test_unauthenticated_or_misbound_proof_is_refused(self, store: Store) -> None:
        calls = journal_with(store, 2)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="crash", now=3.0)
        provider = FakeProvider()
        provider.answers = {
            "m-0": replace(receipt(calls[0]), proof_digest="0" * 64),
            "m-1": replace(receipt(calls[1]), model="some-other-model"),
        }
        page = ProviderReconciler(
            store, lookup=provider.lookup, authenticate=accept
        ).reconcile_page(RUN)
        assert page.terminal == 0 and len(page.errors) == 2 and page.next_after is None
        assert store.provider_receipts(SCOPE, RUN) == []

    def test_only_a_sealed_run_is_reconciled_and_hooks_are_mandatory(self, store: Store) -> None:
        journal_with(store, 1)
        rec = ProviderReconciler(store, lookup=FakeProvider().lookup, authenticate=accept)
        with pytest.raises(RunNotSealed):
            rec.reconcile_page(RUN)
        with pytest.raises(ConfigError):
            ProviderReconciler(store, lookup=None, authenticate=accept)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            ProviderReconciler(store, lookup=FakeProvider().lookup, authenticate=accept, timeout=31)


class TestSealer:
    def test_the_authoriser_decides_and_there_is_no_default(self, store: Store) -> None:
        def refuse(request: SealRequest) -> None:
            raise PermissionDenied(f"{request.actor} may not seal")

        with pytest.raises(ConfigError):
            RunSealer(store, authorize=None)  # type: ignore[arg-type]
        with pytest.raises(PermissionDenied):
            RunSealer(store, authorize=refuse).seal(RUN, actor="agent-x", reason="no")
        assert store.get_run(SCOPE, RUN) is None

    def test_the_fence_is_held_across_the_write_and_the_deadline_bounds_it(
        self, store: Store
    ) -> None:
        held: list[str] = []
        clock = ManualClock(start=100.0)

        class Fence:
            def __init__(self, request: SealRequest) -> None:
                self.request = request

            def __enter__(self) -> None:
                held.append("in")
                clock.advance(31.0 if self.request.run_id == "slow" else 0.0)

            def __exit__(self, *exc: object) -> None:
                held.append(
                    "out:" + ("sealed" if store.get_run(SCOPE, self.request.run_id) else "-")
                )

        sealer = RunSealer(store, authorize=lambda r: None, fence=Fence, clock=clock)
        seal = sealer.seal(RUN, actor="ops-1", reason="done")
        assert seal.actor == "ops-1" and held == ["in", "out:sealed"]
        with pytest.raises(RunSealDeadline):
            sealer.seal("slow", actor="ops-1", reason="done")
        assert store.get_run(SCOPE, "slow") is None


class TestCrashMidRunThenRecovery:
    """A harness dies mid-run: one model call without a return, a tool call whose effect was
    admitted but not yet approved. Recovery: seal, reconcile the model call, snapshot, and
    learn the effect's outcome without dispatching anything again."""

    def test_recovery_from_the_journal_and_the_snapshot(self, store: Store) -> None:
        journal = RunJournal(store, actor=H)
        m1, m2, t1 = model_call("a-model"), model_call("b-model"), tool_call("c-tool")
        journal.record(m1)
        journal.complete(m1.ref, completion("plan"))
        journal.record(m2)  # the harness dies during this provider call
        journal.record(t1)
        gate, adapter = gate_for(store)
        with journal.call_context(t1.ref):
            row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, dispatch=False)
        assert row.state is State.VALIDATED
        # --- the process is gone; a new one recovers from the store alone ---------------
        survivor = RunJournal(store, actor="harness-2")
        unfinished = [r for r in survivor.calls(RUN) if not r.finished]
        assert [r.call.slot for r in unfinished] == ["b-model", "c-tool"]
        # A missing return never permits calling again: the slot is the uncertain call's.
        with pytest.raises(RunCallConflict):
            survivor.record(replace(m2, call_id="retry"))
        RunSealer(store, authorize=lambda r: None).seal(RUN, actor="ops-1", reason="crash")
        with pytest.raises(RunSealed):
            survivor.record(model_call("d-model"))
        # The provider says the lost call succeeded; its receipt is kept.
        provider = FakeProvider()
        provider.answers = {"b-model": receipt(m2, result="lost answer")}
        page = ProviderReconciler(
            store, lookup=provider.lookup, authenticate=accept
        ).reconcile_page(RUN)
        assert page.terminal == 1 and page.unresolved == 0
        document, _, _ = store.snapshot_run(SCOPE, RUN, now=10.0, actor="ops-1")
        summary = verify_run_snapshot(document)
        assert summary["provider_receipts"] == 1 and summary["effects"] == 1
        # The effect's replay after the seal says where it stands and sends nothing.
        gate2, adapter2 = gate_for(store)
        with pytest.raises(RunSealed) as e, survivor.call_context(t1.ref):
            gate2.submit("submit_order", "op-1", EXAMPLE_ORDER)
        assert e.value.row is not None and e.value.row.state is State.VALIDATED
        assert adapter.execute_calls == adapter2.execute_calls == 0
