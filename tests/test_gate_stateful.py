"""Hypothesis drives the whole gate (parse, policy, journal, venue, reconcile) against a model.

Rules: submit an intent under an id (same or changed payload), crash between journal and call,
a venue call that applies but never answers, dispatch again, pass time, reconcile. After every
step the invariants must hold: at most one venue call per operation id (1), a changed payload
under a used id is refused and changes nothing (2), a journalled row is never failed by a crash
(3), absence is failure only past the horizon (4), and terminal rows never move.
"""

from __future__ import annotations

import itertools
from contextlib import suppress
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from effectgate import Gate, IdempotencyConflict, LimitPolicy, PolicySet, Reconciler, State
from effectgate._core.states import TERMINAL
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.testing import CountingAdapter, ManualClock

OPS = ["op-a", "op-b", "op-c", "op-d"]
QUANTITIES = ["4", "4.0", "5", "400"]  # "4.0" is "4" respelled; "400" is over the limit
_scopes = itertools.count()


class Died(BaseException):
    """The executor process dying between the journal and the venue call."""


class Dying(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise Died


def test_gate_state_machine(store_factory) -> None:
    store = store_factory()

    class GateMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.scope = f"s{next(_scopes)}"
            self.clock = ManualClock()
            self.venue = PaperVenue(clock=self.clock)
            self.adapter = CountingAdapter(PaperAdapter(self.venue))
            policy = PolicySet({"submit_order": LimitPolicy(Decimal("1000"))})
            self.gate = Gate(
                store=store,
                registry=default_registry(),
                adapters={"paper": self.adapter},
                policy=policy,
                clock=self.clock,
            )
            self.dying = Gate(
                store=store,
                registry=default_registry(),
                adapters={"paper": Dying(self.venue)},
                policy=policy,
                clock=self.clock,
            )
            self.reconciler = Reconciler(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(self.venue)},
                clock=self.clock,
            )
            self.payload: dict[str, str] = {}  # op -> canonical quantity it was first sent
            self.terminal: dict[str, State] = {}  # op -> terminal state once reached
            self.crashed: set[str] = set()

        def key(self, op: str) -> str:
            return f"{self.scope}:{op}"

        def _intent(self, quantity: str) -> dict[str, object]:
            return {**EXAMPLE_ORDER, "quantity": quantity}

        @rule(op=st.sampled_from(OPS), quantity=st.sampled_from(QUANTITIES))
        def submit(self, op: str, quantity: str) -> None:
            canonical = str(Decimal(quantity).normalize())
            first = self.payload.get(op)
            try:
                row = self.gate.submit("submit_order", op, self._intent(quantity), scope=self.scope)
            except IdempotencyConflict:
                assert first is not None and first != canonical  # invariant 2
                return
            assert first is None or first == canonical
            self.payload.setdefault(op, canonical)
            assert row.replayed == (first is not None)

        @rule(op=st.sampled_from(OPS))
        def crash_after_journal(self, op: str) -> None:
            if op in self.payload:
                return
            with suppress(Died):
                self.dying.submit("submit_order", op, self._intent("4"), scope=self.scope)
            self.payload[op] = "4"
            self.crashed.add(op)
            row = self.gate.get(op, scope=self.scope)
            assert row.state is State.SUBMITTED  # invariant 3: uncertain, never failed

        @rule(op=st.sampled_from(OPS))
        def lost_reply(self, op: str) -> None:
            if op in self.payload:
                return
            self.venue.fail_next(1, after_apply=True)
            row = self.gate.submit("submit_order", op, self._intent("4"), scope=self.scope)
            self.payload[op] = "4"
            assert row.state is State.SUBMITTED

        @rule(op=st.sampled_from(OPS))
        def dispatch_again(self, op: str) -> None:
            if op in self.payload:
                self.gate.dispatch(op, scope=self.scope)

        @rule(seconds=st.sampled_from([5.0, 30.0, 61.0]))
        def time_passes(self, seconds: float) -> None:
            self.clock.advance(seconds)

        @rule()
        def reconcile(self) -> None:
            self.reconciler.run_once()

        @invariant()
        def at_most_one_call_and_effect_per_id(self) -> None:
            for op in OPS:
                calls = sum(1 for r in self.adapter.requests if r.operation_key == self.key(op))
                assert calls <= 1  # invariant 1
                assert self.venue.effects_for(self.key(op)) <= 1
                if op in self.crashed:
                    assert calls == 0 and self.venue.effects_for(self.key(op)) == 0

        @invariant()
        def terminal_rows_never_move_and_failures_are_real(self) -> None:
            for op in self.payload:
                row = store.get(self.scope, op)
                assert row is not None
                if op in self.terminal:
                    assert row.state is self.terminal[op]
                elif row.state in TERMINAL:
                    self.terminal[op] = row.state
                if row.state is State.FAILED:  # invariant 4
                    assert self.venue.effects_for(self.key(op)) == 0
                    assert row.submitted_at is not None
                if row.state is State.ACKNOWLEDGED:
                    assert self.venue.effects_for(self.key(op)) == 1

        def teardown(self) -> None:
            self.venue.fail_next(0, after_apply=False)

    run_state_machine_as_test(
        GateMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
