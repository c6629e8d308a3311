"""Hypothesis interleaves speculation, sandbox timeouts, eviction, retries, approvals, crashes
and commits against the paper venue and its sandbox in all three key modes.

After every step: at most one effect per operation (invariant 1); no operation is pending
without an error (invariant 11): a row left ``validated`` is one whose caller got
``SpeculationStalled`` and whose detail says so; a row quarantined by speculation is one whose
caller got ``KeyNamespaceDivergence`` and that was never sent (invariant 10).
"""

from __future__ import annotations

import itertools
from contextlib import suppress
from dataclasses import replace
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from effectgate import (
    Gate,
    KeyNamespaceDivergence,
    LimitPolicy,
    PolicySet,
    Reconciler,
    SpeculationStalled,
    State,
)
from effectgate._core.intent import Registry
from effectgate._core.speculation import Speculation
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate.adapters._paper_sandbox import PaperSandbox, SandboxMode
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import StaleState
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.testing import ManualClock

OPS = ["op-a", "op-b", "op-c"]
SMALL = dict(EXAMPLE_ORDER)
BIG = {**EXAMPLE_ORDER, "quantity": "9.5"}  # needs an approval
_scopes = itertools.count()


class Died(BaseException):
    """The executor process dying between the journal and the venue call."""


class Dying(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise Died


def test_speculation_state_machine(store_factory) -> None:
    store = store_factory()

    class SpeculationMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.scope = f"s{next(_scopes)}"
            self.clock = ManualClock()
            self.venue = PaperVenue(clock=self.clock)
            self.sandbox = PaperSandbox(self.venue, lifetime=60.0, clock=self.clock)
            ac = submit_order_class()
            registry = Registry(
                [replace(ac, speculation=Speculation(verdict_lifetime=60.0)), cancel_order_class()]
            )
            policy = PolicySet(
                {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900"))}
            )

            def gate(adapter: PaperAdapter) -> Gate:
                return Gate(
                    store=store,
                    registry=registry,
                    adapters={"paper": adapter},
                    policy=policy,
                    clock=self.clock,
                )

            self.gate = gate(PaperAdapter(self.venue, sandbox=self.sandbox))
            self.dying = gate(Dying(self.venue, sandbox=self.sandbox))
            self.reconciler = Reconciler(
                store=store,
                registry=registry,
                adapters={"paper": PaperAdapter(self.venue)},
                clock=self.clock,
            )
            self.payload: dict[str, dict[str, object]] = {}
            self.last_error: dict[str, type[BaseException] | None] = {}
            self.quarantined_by_divergence: set[str] = set()

        def key(self, op: str) -> str:
            return f"{self.scope}:{op}"

        def _call(self, op: str, fn) -> None:  # type: ignore[no-untyped-def]
            try:
                fn()
            except KeyNamespaceDivergence as exc:
                self.last_error[op] = KeyNamespaceDivergence
                assert exc.ledger_key == self.key(op) and exc.operation_id == op
                assert exc.sandbox_key != exc.ledger_key
                row = store.get(self.scope, op)
                assert row is not None and row.state is State.QUARANTINED
                self.quarantined_by_divergence.add(op)
            except SpeculationStalled:
                self.last_error[op] = SpeculationStalled
            except Died:
                self.last_error[op] = Died
                raise
            else:
                self.last_error[op] = None

        @rule(op=st.sampled_from(OPS), big=st.booleans())
        def submit(self, op: str, big: bool) -> None:
            intent = self.payload.setdefault(op, BIG if big else SMALL)
            self._call(op, lambda: self.gate.submit("submit_order", op, intent, scope=self.scope))

        @rule(op=st.sampled_from(OPS))
        def approve_and_dispatch(self, op: str) -> None:
            row = store.get(self.scope, op)
            if row is None or row.state is not State.AWAITING_APPROVAL:
                return
            with suppress(StaleState):
                store.decide_approval(
                    self.scope,
                    op,
                    approver="alice",
                    fingerprint=row.fingerprint,
                    approve=True,
                    reason=None,
                    now=self.clock(),
                )
            row = store.get(self.scope, op)
            if row is not None and row.state is State.VALIDATED:
                self._call(op, lambda: self.gate.dispatch(op, scope=self.scope))

        @rule(op=st.sampled_from(OPS))
        def dispatch_again(self, op: str) -> None:
            if op in self.payload:
                self._call(op, lambda: self.gate.dispatch(op, scope=self.scope))

        @rule(op=st.sampled_from(OPS))
        def crash_after_journal(self, op: str) -> None:
            if op in self.payload:
                return
            self.payload[op] = SMALL
            with suppress(Died):
                self._call(
                    op, lambda: self.dying.submit("submit_order", op, SMALL, scope=self.scope)
                )
            row = store.get(self.scope, op)
            assert row is not None and row.state is not State.FAILED  # invariant 3

        @rule(op=st.sampled_from(OPS))
        def lost_reply(self, op: str) -> None:
            if op in self.payload:
                return
            self.venue.fail_next(1, after_apply=True)
            self.payload[op] = SMALL
            self._call(op, lambda: self.gate.submit("submit_order", op, SMALL, scope=self.scope))
            self.venue.fail_next(0, after_apply=False)

        @rule(n=st.integers(min_value=0, max_value=5))
        def sandbox_times_out(self, n: int) -> None:
            self.sandbox.time_out_next(n)

        @rule(mode=st.sampled_from(list(SandboxMode)))
        def sandbox_mode(self, mode: SandboxMode) -> None:
            self.sandbox.mode = mode

        @rule(seconds=st.sampled_from([5.0, 50.0, 61.0, 3600.0]))
        def time_passes(self, seconds: float) -> None:
            self.clock.advance(seconds)  # past 60s the evicting sandbox forgets its keys

        @rule()
        def reconcile(self) -> None:
            self.reconciler.run_once()

        @invariant()
        def at_most_one_effect_per_operation(self) -> None:
            for op in OPS:
                assert self.venue.effects_for(self.key(op)) <= 1  # invariant 1
                if op in self.quarantined_by_divergence:
                    assert self.venue.effects_for(self.key(op)) == 0  # invariant 10

        @invariant()
        def nothing_pending_without_an_error(self) -> None:
            for op in self.payload:
                row = store.get(self.scope, op)
                if row is None:
                    continue
                if row.state is State.VALIDATED:  # invariant 11
                    assert self.last_error.get(op) is SpeculationStalled, (op, row)
                    assert row.detail and "no committable speculation verdict" in row.detail
                if row.state is State.QUARANTINED:
                    assert op in self.quarantined_by_divergence
                if row.state is State.ACKNOWLEDGED:
                    assert self.venue.effects_for(self.key(op)) == 1

        def teardown(self) -> None:
            self.venue.fail_next(0, after_apply=False)

    run_state_machine_as_test(
        SpeculationMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
