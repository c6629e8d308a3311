"""The pre-dispatch pipeline (docs/continuations.md): authorisation of the current grant,
preconditions, the speculation verdict, then the dispatch transaction with its in-transaction
admission checks, on every dispatching path and on both stores. Each docstring names the
invariant (docs/design.md) it checks."""

from __future__ import annotations

from decimal import Decimal

import pytest

from effectgate import Dispatcher, Gate, LimitPolicy, Operator, PolicySet, State, Tier
from effectgate._core.effects import MAX_RETRIES, check_compensations
from effectgate._core.intent import ActionClass, EffectClass, Registry
from effectgate._execute.predispatch import ADAPTER_CALL_CEILING, DispatchContext, Refusal
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, IntentError, RegistryError
from effectgate.examples import EXAMPLE_ORDER, SubmitOrder, cancel_order_class, notional
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock

INTENT = dict(EXAMPLE_ORDER)  # notional 400
BIG = {**INTENT, "quantity": "60"}  # 6000: needs one approval


def submit_class(**extra: object) -> ActionClass:
    return ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter="paper",
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=60.0,
        key_retention=86400.0,
        value_of=notional,
        target_field="instrument",
        tier_floor=Tier.VALIDATE,
        **extra,  # type: ignore[arg-type]
    )


class Grants:
    """A host's grant book: the authorisation hook reads the CURRENT state of a grant."""

    def __init__(self) -> None:
        self.revoked = False
        self.calls: list[DispatchContext] = []

    def authorise(self, ctx: DispatchContext) -> Refusal | None:
        self.calls.append(ctx)
        if self.revoked:
            return Refusal("reject", "grant_revoked", "the grant was revoked after approval")
        return None


def world(store: Store, **gate_kwargs: object) -> tuple[Gate, CountingAdapter, Operator]:
    clock = ManualClock()
    adapter = CountingAdapter(PaperAdapter(PaperVenue(clock=clock)))
    reg = Registry([submit_class(compensation="cancel_order"), cancel_order_class()])
    policy = PolicySet(
        {
            "submit_order": LimitPolicy(Decimal("100000"), approve_above=Decimal("5000")),
            "cancel_order": LimitPolicy(Decimal("1")),
        }
    )
    gate = Gate(
        store=store,
        registry=reg,
        adapters={"paper": adapter},
        policy=policy,
        clock=clock,
        **gate_kwargs,  # type: ignore[arg-type]
    )
    return gate, adapter, Operator(store=store, registry=reg, clock=clock)


class TestAuthorisationAtTheWriteBoundary:
    def test_revoked_between_approval_and_dispatch_stops_the_dispatch(self, store: Store) -> None:
        """Invariant 9 / the write boundary: a grant revoked after the approval is checked again
        at dispatch; the row goes validated -> rejected with the hook's reason, nothing is
        sent, and the refusal is in the audit trail."""
        grants = Grants()
        gate, adapter, operator = world(store, authorise=grants.authorise)
        row = gate.submit("submit_order", "op-big", BIG, principal="agent-1")
        assert row.state is State.AWAITING_APPROVAL
        grants.revoked = True
        out = operator.approve("op-big", fingerprint=row.fingerprint, approver="bob")
        assert out.released
        Dispatcher(gate).run_once()
        final = gate.get("op-big")
        assert final.state is State.REJECTED
        assert final.detail is not None and final.detail.startswith("grant_revoked:")
        assert adapter.execute_calls == 0
        kinds = [
            e.detail.get("by")  # type: ignore[union-attr]
            for e in store.audit_entries(scope="default", operation_id="op-big")
            if e.kind == "transition" and isinstance(e.detail, dict)
        ]
        assert "predispatch:before" in kinds
        # The standing dispatcher named itself as the dispatcher.
        assert grants.calls[-1].dispatcher is not None

    def test_first_submit_runs_the_hook_and_sends_when_allowed(self, store: Store) -> None:
        """Invariant 1: with a hook configured the first submit still sends exactly once, and
        the hook saw the validated row before the adapter was called."""
        grants = Grants()
        gate, adapter, _ = world(store, authorise=grants.authorise)
        row = gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
        assert row.state is State.ACKNOWLEDGED and adapter.execute_calls == 1
        assert [c.entry.state for c in grants.calls] == [State.VALIDATED]
        assert grants.calls[0].dispatcher is None  # the gate itself, on the first submit
        # A replay sends nothing and asks nothing.
        assert gate.submit("submit_order", "op-1", INTENT).replayed
        assert adapter.execute_calls == 1 and len(grants.calls) == 1

    def test_first_submit_refused_by_the_hook_sends_nothing(self, store: Store) -> None:
        """Invariant 9: a denied first submit is rejected, not sent."""
        grants = Grants()
        grants.revoked = True
        gate, adapter, _ = world(store, authorise=grants.authorise)
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.REJECTED and adapter.execute_calls == 0

    def test_a_hook_that_raises_denies(self, store: Store) -> None:
        """No permissive fallback: a configured hook that errors denies."""

        def broken(ctx: DispatchContext) -> Refusal | None:
            raise RuntimeError("grant service down")

        gate, adapter, _ = world(store, authorise=broken)
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.REJECTED and adapter.execute_calls == 0
        assert row.detail is not None and row.detail.startswith("authorise_hook_failed:")

    def test_a_reapprove_refusal_opens_a_new_approval_round(self, store: Store) -> None:
        """A precondition that no longer holds sends the row back for approval
        (validated -> awaiting_approval), never to the venue."""

        def stale(ctx: DispatchContext) -> Refusal | None:
            return Refusal("reapprove", "precondition_changed", "the account changed owner")

        gate, adapter, _ = world(store, preconditions=[stale])
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.AWAITING_APPROVAL and adapter.execute_calls == 0

    def test_order_is_authorise_then_preconditions(self, store: Store) -> None:
        """The fixed order: a refused authorisation means no precondition runs."""
        seen: list[str] = []

        def deny(ctx: DispatchContext) -> Refusal | None:
            seen.append("authorise")
            return Refusal("reject", "grant_revoked", "revoked")

        def pre(ctx: DispatchContext) -> Refusal | None:
            seen.append("precondition")
            return None

        gate, _, _ = world(store, authorise=deny, preconditions=[pre])
        gate.submit("submit_order", "op-1", INTENT)
        assert seen == ["authorise"]


class TestInTransactionAdmission:
    def test_a_count_budget_in_the_transaction_cannot_be_overdrawn(
        self, store_factory: object
    ) -> None:
        """Invariant 1 and the write boundary: an in-transaction check counting dispatched rows
        under the dispatch transaction's lock admits exactly the budget, even from two store
        handles (two processes); the rest are rejected with the check's code and not sent."""
        budget = 3

        def count_budget(tx: object, row: object, now: float) -> Refusal | None:
            rows = tx.rows(  # type: ignore[attr-defined]
                "SELECT COUNT(*) FROM operations WHERE action = ? AND state != ? AND state != ?",
                ("submit_order", "validated", "rejected"),
            )
            if int(rows[0][0]) >= budget:
                return Refusal("reject", "budget_exhausted", f"at most {budget} sends")
            return None

        first = store_factory()  # type: ignore[operator]
        gate, adapter, _ = world(first, admission_checks=[count_budget])
        other, _, _ = world(store_factory(), admission_checks=[count_budget])  # type: ignore[operator]
        other.adapters = gate.adapters
        states = [
            (gate if i % 2 else other).submit("submit_order", f"op-{i}", INTENT).state
            for i in range(6)
        ]
        assert states.count(State.ACKNOWLEDGED) == budget
        assert states.count(State.REJECTED) == 6 - budget
        assert adapter.execute_calls == budget
        rejected = gate.get("op-5")
        assert rejected.detail is not None and rejected.detail.startswith("budget_exhausted:")

    def test_a_check_that_raises_denies(self, store: Store) -> None:
        """No permissive fallback inside the transaction either."""

        def broken(tx: object, row: object, now: float) -> Refusal | None:
            raise ValueError("boom")

        gate, adapter, _ = world(store, admission_checks=[broken])
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.REJECTED and adapter.execute_calls == 0
        assert row.detail is not None and row.detail.startswith("admission_check_failed:")


class TestNothingConfigured:
    def test_the_first_submit_keeps_its_one_transaction_path(self, store: Store) -> None:
        """With no hook, precondition or check the pipeline is off: proposed -> validated ->
        submitted in one transaction, as before (the B1 path)."""
        gate, adapter, _ = world(store)
        assert not gate.pipeline.active
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.ACKNOWLEDGED and adapter.execute_calls == 1


class TestCeilingAndNamespace:
    def test_a_dispatch_timeout_above_the_ceiling_is_refused(self, store: Store) -> None:
        with pytest.raises(ConfigError, match="ceiling"):
            world(store, dispatch_timeout=ADAPTER_CALL_CEILING + 1)

    def test_agents_cannot_use_the_continuation_namespace(self, store: Store) -> None:
        """Continuation ids are reserved: a door that submits one is refused, nothing journalled."""
        gate, _, _ = world(store)
        with pytest.raises(IntentError) as err:
            gate.submit("submit_order", "cont:op-1:retry:1", INTENT)
        assert err.value.reason == "reserved_operation_id"
        assert store.get("default", "cont:op-1:retry:1") is None


class TestEffectRequirements:
    def test_retries_are_bounded_at_seven(self) -> None:
        submit_class(retries=MAX_RETRIES)
        with pytest.raises(RegistryError, match="retries must be an integer from 0 to 7"):
            submit_class(retries=MAX_RETRIES + 1)

    def test_a_compensation_must_be_registered(self) -> None:
        with pytest.raises(ConfigError, match="'cancel_order' is not a registered class"):
            check_compensations({"submit_order": ("non_idempotent_mutation", "cancel_order")})

    def test_a_read_only_class_declares_no_compensation(self) -> None:
        with pytest.raises(RegistryError, match="read_only"):
            ActionClass(
                name="quote",
                model=SubmitOrder,
                adapter="paper",
                effect_class=EffectClass.READ_ONLY,
                visibility_horizon=60.0,
                key_retention=86400.0,
                compensation="cancel_order",
            )


class TestReconcilerReadAuthorisation:
    def test_refused_or_failing_read_hook_reads_nothing_and_writes_nothing_off(
        self, store: Store
    ) -> None:
        """Invariant 4: a row past its horizon is written off only after an authorised read;
        a refusing hook, or one that raises, leaves it uncertain; an allowing one settles it."""
        from effectgate import Reconciler

        gate, adapter, _ = world(store)
        adapter.inner.venue.fail_next(1, after_apply=False)  # type: ignore[attr-defined]
        row = gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.SUBMITTED
        gate.clock.advance(120)  # type: ignore[attr-defined]

        def refuse(adapter_name: str, actions: tuple[str, ...]) -> str | None:
            return "read grant revoked"

        def broken(adapter_name: str, actions: tuple[str, ...]) -> str | None:
            raise RuntimeError("down")

        for hook in (refuse, broken):
            rec = Reconciler(
                store=store,
                registry=gate.registry,
                adapters=gate.adapters,
                clock=gate.clock,
                authorise_read=hook,
            )
            rec.run_once()
            rec.repair()
            assert gate.get("op-1").state is State.SUBMITTED
        Reconciler(
            store=store,
            registry=gate.registry,
            adapters=gate.adapters,
            clock=gate.clock,
            authorise_read=lambda name, actions: None,
        ).run_once()
        assert gate.get("op-1").state is State.FAILED
