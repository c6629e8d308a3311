"""A Hypothesis state machine drives a store and a plain dict model side by side.

Runs on SQLite and PostgreSQL (the ``store_factory`` fixture). Each example uses a fresh scope,
so one ledger serves every example without cross-talk. Reads go through a second handle, as
another process would see the ledger.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from effectgate._core.states import TRANSITIONS, State, check_transition
from effectgate.errors import IdempotencyConflict, InvalidTransition, OperationNotFound, StaleState
from effectgate.store.base import NewOperation
from effectgate.store.roles import Store

P, V, S = State.PROPOSED, State.VALIDATED, State.SUBMITTED
PATHS = [[P, V, S], [P, V], [P, State.REJECTED], [P, State.AWAITING_APPROVAL]]
OPS = ["op-a", "op-b", "op-c"]
FPS = ["a" * 64, "b" * 64]
_scopes = itertools.count()


@dataclass
class Model:
    fingerprint: str
    state: State
    version: int
    submitted: bool


def make_machine(writer: Store, reader: Store) -> type[RuleBasedStateMachine]:
    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.scope = f"h{next(_scopes)}"
            self.model: dict[str, Model] = {}
            self.clock = 1.0

        def tick(self) -> float:
            self.clock += 1.0
            return self.clock

        @rule(op=st.sampled_from(OPS), fp=st.sampled_from(FPS), path=st.sampled_from(PATHS))
        def insert(self, op: str, fp: str, path: list[State]) -> None:
            new = NewOperation(
                scope=self.scope,
                operation_id=op,
                action="submit_order",
                fingerprint=fp,
                intent={"fp": fp},
                effect={"fp": fp},
                tier="validate",
                reason="model",
                policy_version="m",
            )
            known = self.model.get(op)
            if known is not None and known.fingerprint != fp:
                with pytest.raises(IdempotencyConflict):
                    writer.insert_operation(new, path, now=self.tick())
                return
            row, created = writer.insert_operation(new, path, now=self.tick())
            assert created == (known is None)
            if known is None:
                self.model[op] = Model(fp, path[-1], 1, path[-1] is S)
            assert row.state is self.model[op].state and row.version == self.model[op].version

        @rule(
            op=st.sampled_from([*OPS, "op-missing"]),
            expected=st.sampled_from(list(State)),
            to=st.sampled_from(list(State)),
        )
        def transition(self, op: str, expected: State, to: State) -> None:
            target = to  # ``target`` is reserved by @rule for bundles
            known = self.model.get(op)
            try:
                check_transition(expected, target)
            except InvalidTransition:
                with pytest.raises(InvalidTransition):
                    writer.transition(self.scope, op, expected, target, now=self.tick())
                return
            if known is None:
                with pytest.raises(OperationNotFound):
                    writer.transition(self.scope, op, expected, target, now=self.tick())
                return
            if known.state is not expected:
                with pytest.raises(StaleState):
                    writer.transition(self.scope, op, expected, target, now=self.tick())
                return
            row = writer.transition(
                self.scope,
                op,
                expected,
                target,
                now=self.tick(),
                venue_id="V-1" if target is State.ACKNOWLEDGED else None,
            )
            known.state, known.version = target, known.version + 1
            known.submitted = known.submitted or target is S
            assert row.state is target and row.version == known.version

        @rule(op=st.sampled_from(OPS))
        def retry_from_valid_state(self, op: str) -> None:
            """Drive the happy path forward so deep states are reached often."""
            known = self.model.get(op)
            if known is None or not TRANSITIONS.get(known.state):
                return
            target = sorted(TRANSITIONS[known.state] - {State.QUARANTINED})[:1]
            if target:
                self.transition(op, known.state, target[0])

        @invariant()
        def one_row_per_id_matching_the_model(self) -> None:
            """Invariant 1: exactly the rows the model has, each once, in the model's state."""
            rows = reader.list_operations(scope=self.scope, limit=100)
            assert sorted(r.operation_id for r in rows) == sorted(self.model)
            for r in rows:
                known = self.model[r.operation_id]
                assert (r.state, r.version) == (known.state, known.version)

        @invariant()
        def fingerprint_never_changes(self) -> None:
            """Invariant 2: the first fingerprint stays; a changed payload never replaced it."""
            for op, known in self.model.items():
                row = reader.get(self.scope, op)
                assert row is not None and row.fingerprint == known.fingerprint

        @invariant()
        def submitted_is_durable(self) -> None:
            """Invariant 3: a row that reached 'submitted' carries its submission time, visible
            to another handle, and never goes back to a pre-dispatch state."""
            for op, known in self.model.items():
                row = reader.get(self.scope, op)
                assert row is not None
                if known.submitted:
                    assert row.submitted_at is not None
                    assert row.state not in (P, V, State.AWAITING_APPROVAL)

    return LedgerMachine


def test_store_matches_a_dict_model(store_factory) -> None:
    """Invariants 1-3 as a state machine: inserts, retries, conflicts and compare-and-set
    transitions on the real store agree with a dict model, read back through another handle."""
    writer, reader = store_factory(), store_factory()
    machine = make_machine(writer, reader)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=100,
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
