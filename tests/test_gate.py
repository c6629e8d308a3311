"""The ledger contract end to end through the Gate: the seed's eleven cases, on every store."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

import pytest

from effectgate import (
    Gate,
    IdempotencyConflict,
    IntentError,
    LimitPolicy,
    PolicySet,
    Reconciler,
    Registry,
    State,
    UnknownActionClass,
)
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock

INTENT = dict(EXAMPLE_ORDER)


class Died(BaseException):
    """The process dying between journal and dispatch."""


class DyingAdapter(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise Died


@dataclass
class World:
    store: Store
    venue: PaperVenue
    adapter: CountingAdapter
    gate: Gate
    reconciler: Reconciler
    clock: ManualClock

    def crash_submit(self, op: str, intent: dict | None = None) -> None:
        dying = Gate(
            store=self.store,
            registry=self.gate.registry,
            adapters={"paper": DyingAdapter(self.venue)},
            policy=self.gate.policy,
            clock=self.clock,
        )
        with pytest.raises(Died):
            dying.submit("submit_order", op, intent or INTENT)


def policy() -> PolicySet:
    return PolicySet(
        {
            "submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900")),
            "cancel_order": LimitPolicy(),
        }
    )


@pytest.fixture
def world(store: Store) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    adapter = CountingAdapter(PaperAdapter(venue))
    registry = default_registry()
    gate = Gate(
        store=store, registry=registry, adapters={"paper": adapter}, policy=policy(), clock=clock
    )
    rec = Reconciler(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    return World(store, venue, adapter, gate, rec, clock)


class TestIdentity:
    def test_retry_dispatches_once(self, world: World) -> None:
        """Invariant 1: the same operation id again is a retry; one venue call, one effect."""
        first = world.gate.submit("submit_order", "op-1", INTENT)
        again = world.gate.submit("submit_order", "op-1", dict(INTENT))
        assert first.state is State.ACKNOWLEDGED and not first.replayed
        assert again.replayed and again.venue_id == first.venue_id
        assert world.adapter.execute_calls == 1 and world.venue.effect_count == 1

    def test_identical_payloads_under_two_ids_are_two_actions(self, world: World) -> None:
        """Identity is the minted id, never the payload hash: two approvals, two effects."""
        a = world.gate.submit("submit_order", "op-a", INTENT)
        b = world.gate.submit("submit_order", "op-b", INTENT)
        assert a.fingerprint == b.fingerprint and a.venue_id != b.venue_id
        assert world.venue.effect_count == 2

    def test_changed_payload_under_reused_id_is_refused(self, world: World) -> None:
        """Invariant 2: same id + different fingerprint is IdempotencyConflict, never a dedup."""
        world.gate.submit("submit_order", "op-a", INTENT)
        with pytest.raises(IdempotencyConflict):
            world.gate.submit("submit_order", "op-a", dict(INTENT, quantity="5"))
        assert world.adapter.execute_calls == 1

    @pytest.mark.parametrize(
        "change",
        [
            {"rationale": "reworded entirely"},
            {"context_digest": "sha256:00ff00ff00ff"},
            {"proposed_by": {"model": "other-model"}},
            {"limit_price": "100.0"},
            {"limit_price": "0100.00"},
            {"limit_price": "1E2"},
        ],
    )
    def test_audit_fields_and_decimal_spelling_keep_identity(
        self, world: World, change: dict
    ) -> None:
        """Invariant 2: audit fields and decimal spellings never change the fingerprint."""
        first = world.gate.submit("submit_order", "op-1", INTENT)
        again = world.gate.submit("submit_order", "op-1", {**INTENT, **change})
        assert again.replayed and again.fingerprint == first.fingerprint
        assert world.adapter.execute_calls == 1


class TestBadInput:
    @pytest.mark.parametrize(
        "bad,field",
        [
            ({"limit_price": 100.0}, "limit_price"),
            ({"quantity": "-4"}, "quantity"),
            ({"quantity": "0"}, "quantity"),
            ({"quantity": "NaN"}, "quantity"),
            ({"endpoint": "http://evil.example"}, "endpoint"),
        ],
    )
    def test_refusal_writes_only_an_audit_line(self, world: World, bad: dict, field: str) -> None:
        """Bad input is refused with the field named; nothing but the audit log changes."""
        with pytest.raises(IntentError) as info:
            world.gate.submit("submit_order", "op-bad", {**INTENT, **bad})
        assert info.value.field == field
        assert world.store.get("default", "op-bad") is None
        assert world.store.count_by_state() == {} and world.adapter.execute_calls == 0
        refused = [e for e in world.store.iter_audit() if e.kind == "intent_refused"]
        assert len(refused) == 1 and refused[0].detail["error"]["field"] == field

    def test_a_class_requiring_provenance_sends_nothing_without_it(self, world: World) -> None:
        """A ``require_provenance`` class: an intent with neither ``proposed_by`` nor
        ``context_digest`` is refused before the journal (no row, no call, one audit line);
        with both it runs as before."""
        registry = Registry([replace(submit_order_class(), require_provenance=True)])
        gate = Gate(
            store=world.store,
            registry=registry,
            adapters={"paper": world.adapter},
            policy=policy(),
            clock=world.clock,
        )
        bare = {k: v for k, v in INTENT.items() if k not in ("proposed_by", "context_digest")}
        with pytest.raises(IntentError) as info:
            gate.submit("submit_order", "op-anon", bare)
        assert (info.value.field, info.value.reason) == ("proposed_by", "provenance_required")
        assert world.store.get("default", "op-anon") is None and world.adapter.execute_calls == 0
        refused = [e for e in world.store.iter_audit() if e.kind == "intent_refused"]
        assert [e.detail["error"]["field"] for e in refused] == ["proposed_by"]
        assert gate.submit("submit_order", "op-known", INTENT).state is State.ACKNOWLEDGED

    def test_raw_bytes_with_duplicate_keys_are_refused(self, world: World) -> None:
        raw = b'{"intent_version":"1","action":"submit_order","quantity":"4","quantity":"400"}'
        with pytest.raises(IntentError) as info:
            world.gate.submit("submit_order", "op-dup", raw)
        assert info.value.reason == "duplicate_key"
        assert world.store.get("default", "op-dup") is None

    @pytest.mark.parametrize("op", ["", "op 1", "\u043ep-1", "op/1", "x" * 200])
    def test_operation_ids_outside_the_alphabet_are_refused(self, world: World, op: str) -> None:
        """Identifiers are ASCII by rule: a Cyrillic look-alike is an error, not normalised."""
        with pytest.raises(IntentError) as info:
            world.gate.submit("submit_order", op, INTENT)
        assert info.value.field == "operation_id"

    def test_unknown_action_class(self, world: World) -> None:
        with pytest.raises(UnknownActionClass):
            world.gate.submit("wire_money", "op-1", INTENT)
        assert world.store.count_by_state() == {}


class TestCrashAndReconcile:
    def test_crash_after_journal_is_uncertain_and_never_redispatched(self, world: World) -> None:
        """Invariant 3: submitted is durable before the call; a crash leaves it uncertain."""
        world.crash_submit("op-c")
        row = world.gate.submit("submit_order", "op-c", INTENT)
        assert row.state is State.SUBMITTED and row.replayed
        assert world.venue.calls == 0 and world.adapter.execute_calls == 0
        assert world.gate.dispatch("op-c").state is State.SUBMITTED
        assert world.adapter.execute_calls == 0

    def test_inside_horizon_stays_uncertain_then_late_appearance_confirms(
        self, world: World
    ) -> None:
        """Invariant 4: absence inside the visibility horizon is not failure."""
        world.crash_submit("op-c")
        world.clock.advance(10)
        world.reconciler.run_once()
        assert world.gate.get("op-c").state is State.SUBMITTED
        world.clock.advance(20)
        vid = world.venue.inject_record("default:op-c")
        report = world.reconciler.run_once()
        row = world.gate.get("op-c")
        assert row.state is State.ACKNOWLEDGED and row.venue_id == vid
        assert report.confirmed == 1 and report.new_divergences == []

    def test_written_off_past_horizon_then_appearing_is_reported(self, world: World) -> None:
        """Invariant 4: a written-off row stays under the sweep; a late record is a divergence."""
        world.crash_submit("op-d")
        world.clock.advance(120)
        world.reconciler.run_once()
        assert world.gate.get("op-d").state is State.FAILED
        world.clock.advance(60)
        world.venue.inject_record("default:op-d")
        report = world.reconciler.run_once()
        assert [d[0] for d in report.new_divergences] == ["ledger-says-failed"]
        # Reported once: the next pass sees it but raises no new alarm.
        again = world.reconciler.run_once()
        assert again.new_divergences == [] and again.divergences_seen == 1

    def test_orphan_is_an_alarm(self, world: World, caplog: pytest.LogCaptureFixture) -> None:
        """Invariant 5: a venue record with no ledger row is an orphan, logged at error."""
        world.gate.submit("submit_order", "op-1", INTENT)
        world.venue.inject_record("default:op-unknown")
        report = world.reconciler.run_once()
        assert report.alarms == {"orphan": 1}
        assert any(r.levelname == "ERROR" and "orphan" in r.message for r in caplog.records)

    def test_probe_repair_settles_like_the_sweep(self, world: World) -> None:
        """Replicas without the sweep lock repair by probing, with the same horizon rule."""
        world.crash_submit("op-p")
        world.crash_submit("op-q", dict(INTENT, quantity="2"))
        world.venue.inject_record("default:op-p")
        world.clock.advance(61)
        report = world.reconciler.repair()
        assert world.gate.get("op-p").state is State.ACKNOWLEDGED
        assert world.gate.get("op-q").state is State.FAILED
        assert report.confirmed == 1 and report.written_off == 1

    def test_adapter_exception_leaves_row_uncertain(self, world: World) -> None:
        """Invariant 9: an error after dispatch is uncertain, never retried automatically."""
        world.venue.fail_next(1, after_apply=True)
        row = world.gate.submit("submit_order", "op-x", INTENT)
        assert row.state is State.SUBMITTED and world.venue.effect_count == 1
        again = world.gate.submit("submit_order", "op-x", INTENT)
        assert again.state is State.SUBMITTED and world.venue.calls == 1
        world.reconciler.run_once()
        assert world.gate.get("op-x").state is State.ACKNOWLEDGED

    def test_venue_refusal_with_proof_fails_the_row(self, world: World) -> None:
        venue = PaperVenue(clock=world.clock, instruments=frozenset({"ABC"}))
        gate = Gate(
            store=world.store,
            registry=world.gate.registry,
            adapters={"paper": PaperAdapter(venue)},
            policy=policy(),
            clock=world.clock,
        )
        row = gate.submit("submit_order", "op-r", INTENT)
        assert row.state is State.FAILED and row.detail and "rejected" in row.detail


class TestReplicas:
    @pytest.mark.parametrize("honour", [True, False])
    def test_two_ledgers_one_venue(self, store_factory, honour: bool, tmp_path) -> None:
        """Invariant 5: the receiver decides exactly-once; the sweep makes a duplicate visible."""
        from effectgate.store.sqlite import SQLiteStore

        clock = ManualClock()
        venue = PaperVenue(honour_key=honour, clock=clock)
        kinds: list[str] = []
        ledgers = [store_factory(), SQLiteStore(str(tmp_path / "replica-b.db"))]
        for ledger in ledgers:
            gate = Gate(
                store=ledger,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                policy=policy(),
                clock=clock,
            )
            gate.submit("submit_order", "op-e", INTENT)
            rec = Reconciler(
                store=ledger,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                clock=clock,
            )
            kinds += [d[0] for d in rec.run_once().new_divergences]
        ledgers[1].close()
        assert venue.calls == 2 and venue.effect_count == (1 if honour else 2)
        assert ("duplicate-effect" in kinds) == (not honour)


class TestPolicyAndTerminal:
    def test_replay_of_rejected_never_dispatches(self, world: World) -> None:
        """A terminal row is inert: replaying a rejected action returns it, sends nothing."""
        first = world.gate.submit("submit_order", "op-f", dict(INTENT, quantity="400"))
        replay = world.gate.submit("submit_order", "op-f", dict(INTENT, quantity="400"))
        assert first.state is State.REJECTED and "over limit" in (first.reason or "")
        assert replay.state is State.REJECTED and world.adapter.execute_calls == 0

    def test_no_policy_means_deny(self, store: Store) -> None:
        """Deny by default: a class without a policy cannot run."""
        venue = PaperVenue()
        gate = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(venue)},
            policy=PolicySet(),
        )
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.REJECTED and "deny by default" in (row.reason or "")
        assert venue.calls == 0

    def test_rationale_never_changes_the_decision(self, world: World) -> None:
        """The rationale is audit-only: same decision and same outbound request without it."""
        plain = {k: v for k, v in INTENT.items() if k != "rationale"}
        a = world.gate.submit("submit_order", "op-1", INTENT)
        b = world.gate.submit("submit_order", "op-2", plain)
        assert (a.state, a.reason, a.tier) == (b.state, b.reason, b.tier)
        sent = world.adapter.requests
        assert [dict(r.effect) for r in sent] == [dict(sent[0].effect)] * 2
        assert all("rationale" not in r.effect for r in sent)

    def test_approval_tier_holds_the_row(self, world: World) -> None:
        """Above the approval threshold the row waits; nothing is sent."""
        row = world.gate.submit("submit_order", "op-big", dict(INTENT, quantity="9.5"))
        assert row.state is State.AWAITING_APPROVAL and row.tier == "approve"
        assert world.adapter.execute_calls == 0

    def test_propose_then_dispatch(self, world: World) -> None:
        row = world.gate.propose("submit_order", "op-1", INTENT)
        assert row.state is State.VALIDATED and world.adapter.execute_calls == 0
        assert world.gate.dispatch("op-1").state is State.ACKNOWLEDGED
        assert world.gate.dispatch("op-1").state is State.ACKNOWLEDGED
        assert world.adapter.execute_calls == 1

    def test_only_validated_effect_fields_reach_the_adapter(self, world: World) -> None:
        """Invariant 6: the adapter sees the operation key and canonical effect fields only."""
        world.gate.submit("submit_order", "op-1", {**INTENT, "limit_price": "0100.00"})
        (req,) = world.adapter.requests
        assert req.operation_key == "default:op-1"
        assert set(req.effect) <= set(world.gate.registry.get("submit_order").effect_fields)
        assert req.effect["limit_price"] == "100"
        assert not {"rationale", "context_digest", "proposed_by"} & set(req.effect)


class TestValueLimits:
    def test_market_order_cannot_slip_under_a_value_ceiling(self, world: World) -> None:
        """Deny by default: an order whose value cannot be measured is refused under a cap."""
        market = {k: v for k, v in INTENT.items() if k != "limit_price"}
        row = world.gate.submit(
            "submit_order", "op-m", {**market, "order_type": "market", "quantity": "999"}
        )
        assert row.state is State.REJECTED and "cannot be measured" in (row.reason or "")
        assert world.adapter.execute_calls == 0

    def test_limit_without_a_ceiling_allows_a_class_with_no_value_axis(self, world: World) -> None:
        row = world.gate.submit(
            "cancel_order",
            "op-c",
            {
                "intent_version": "1",
                "action": "cancel_order",
                "instrument": "XYZ-PERP",
                "order_ref": "V-000001",
            },
        )
        assert row.state is State.ACKNOWLEDGED and row.reason == "no value axis; allowed"


class TestLostJournalCommit:
    """Invariants 1 and 3 when the journal's COMMIT outcome is unknown."""

    class Flaky:
        """Wraps a store; the first journal raises CommitOutcomeUnknown, having written or not."""

        def __init__(self, inner: Store, wrote: bool) -> None:
            self.inner, self.wrote, self.failed = inner, wrote, False

        def journal(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            from effectgate.errors import CommitOutcomeUnknown

            if not self.failed:
                self.failed = True
                if self.wrote:
                    self.inner.journal(*args, **kwargs)
                raise CommitOutcomeUnknown("connection lost while COMMIT was in flight")
            return self.inner.journal(*args, **kwargs)

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

    def _gate(self, world: World, store: object) -> Gate:
        return Gate(
            store=store,
            registry=world.gate.registry,  # type: ignore[arg-type]
            adapters={"paper": world.adapter},
            policy=policy(),
            clock=world.clock,
        )

    def test_nothing_landed_so_the_gate_journals_again_and_sends_once(self, world: World) -> None:
        gate = self._gate(world, self.Flaky(world.store, wrote=False))
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.ACKNOWLEDGED and world.adapter.execute_calls == 1

    def test_it_landed_so_the_row_stays_uncertain_and_nothing_is_sent(self, world: World) -> None:
        gate = self._gate(world, self.Flaky(world.store, wrote=True))
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.SUBMITTED and world.adapter.execute_calls == 0


class TestPrincipalNames:
    """Invariant 6: a caller can never act under a name effectgate keeps for itself."""

    @pytest.mark.parametrize("principal", ["system:breaker", "system:expiry", "", "a b"])
    def test_reserved_or_malformed_principal_is_refused_and_writes_no_row(
        self, world: World, principal: str
    ) -> None:
        with pytest.raises(IntentError):
            world.gate.submit("submit_order", "op-p", INTENT, principal=principal)
        assert world.store.get("default", "op-p") is None

    def test_a_principal_may_carry_a_colon(self, world: World) -> None:
        row = world.gate.submit("submit_order", "op-p", INTENT, principal="tenant-a:agent-7")
        assert row.state is State.ACKNOWLEDGED


class TestLostReceiptCommit:
    """Invariants 1 and 3 when the receipt's COMMIT outcome is unknown: it is no StoreError
    (which means "nothing written"), so the gate catches it on its own and leaves the row
    uncertain, never re-dispatching it."""

    class Flaky:
        """Wraps a store; the first receipt write raises CommitOutcomeUnknown, having
        written (``wrote``) or not."""

        def __init__(self, inner: Store, wrote: bool) -> None:
            self.inner, self.wrote, self.failed = inner, wrote, False

        def _lose(self, write):  # type: ignore[no-untyped-def]
            from effectgate.errors import CommitOutcomeUnknown

            if self.failed:
                return write()
            self.failed = True
            if self.wrote:
                write()
            raise CommitOutcomeUnknown("connection lost while the receipt's COMMIT was in flight")

        def transition(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if args[3] is not State.SUBMITTED:  # to-state: only a receipt is lost
                return self._lose(lambda: self.inner.transition(*args, **kwargs))
            return self.inner.transition(*args, **kwargs)

        def append_audit(self, kind, *args, **kwargs):  # type: ignore[no-untyped-def]
            if kind == "dispatch_outcome_unknown":
                return self._lose(lambda: self.inner.append_audit(kind, *args, **kwargs))
            return self.inner.append_audit(kind, *args, **kwargs)

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

    def _gate(self, world: World, wrote: bool) -> Gate:
        return Gate(
            store=self.Flaky(world.store, wrote),  # type: ignore[arg-type]
            registry=world.gate.registry,
            adapters={"paper": world.adapter},
            policy=policy(),
            clock=world.clock,
        )

    @pytest.mark.parametrize("wrote", [False, True])
    def test_applied_receipt_lost_leaves_the_row_uncertain(self, world: World, wrote: bool) -> None:
        gate = self._gate(world, wrote)
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.SUBMITTED and world.adapter.execute_calls == 1
        assert row.cause is not None and "answered applied" in row.cause
        assert "could not record the receipt (indeterminate_commit)" in row.cause
        again = gate.submit("submit_order", "op-1", INTENT)
        assert again.replayed and world.adapter.execute_calls == 1
        world.reconciler.run_once()
        settled = world.store.get("default", "op-1")
        assert settled is not None and settled.state is State.ACKNOWLEDGED
        assert world.venue.effect_count == 1

    def test_unknown_outcome_whose_audit_line_is_lost_stays_uncertain(self, world: World) -> None:
        gate = self._gate(world, wrote=False)
        world.venue.fail_next(1, after_apply=True)
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.SUBMITTED and world.adapter.execute_calls == 1
        assert gate.submit("submit_order", "op-1", INTENT).replayed
        assert world.adapter.execute_calls == 1
