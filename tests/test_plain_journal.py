"""The journal's short path writes what the full path writes, and is taken only when it may be.

A row of a class with no active control and no breaker is journalled in as few statements as a
dialect can manage (SQLite: three on the cursor; PostgreSQL: one statement). Every control that
can change a new row's fate sends it down the full path (``journal_new``), in the same
transaction. Invariants 1 and 7 ride on that split: a kill switch, breaker or shadow flag set by
another process must be seen by the very next journal, and one id is journalled once.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from conftest import StoreFactory
from effectgate import State
from effectgate._audit import verify_store
from effectgate._core.controls import ClassControls, DispatchGuard, Envelope
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.base import NewOperation
from effectgate.store.roles import Store

PATH = [State.PROPOSED, State.VALIDATED, State.SUBMITTED]
NOW = 1_800_000_000.0


def _new(operation_id: str) -> NewOperation:
    parsed = default_registry().parse("submit_order", EXAMPLE_ORDER)
    return NewOperation(
        scope="default",
        operation_id=operation_id,
        action="submit_order",
        fingerprint=parsed.fingerprint,
        intent=parsed.snapshot,
        effect=parsed.effect,
        tier="validate",
        reason="value 400.00 within limit 1000",
        policy_version="limit-1",
    )


def _guard() -> DispatchGuard:
    return DispatchGuard(action="submit_order", value=Decimal("400.00"), target="XYZ-PERP")


def _journal(store: Store, operation_id: str, at: float) -> dict[str, Any]:
    done = store.journal(_new(operation_id), PATH, now=at, audit={"who": "t"}, guard=_guard())
    assert done.created
    (entry,) = store.audit_entries(scope="default", operation_id=operation_id)
    detail = json.loads(entry.detail_text)
    return {"row": done.row, "stored": store.get("default", operation_id), "entry": detail}


class TestSamePayloadEitherWay:
    def test_the_row_entry_and_dispatch_record_match_the_full_path(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        short = _journal(store, "short-1", NOW)
        # An envelope whose only axis cannot bind: the class is now "active", so the next row
        # takes the full path, which must come to the same writes.
        store.apply_authority_step(
            "submit_order",
            "max_value",
            "1000000000",
            evidence={"test": "non-binding"},
            reverse_on="manual",
            operator="op:test",
            now=NOW,
        )
        full = _journal(store, "full-1", NOW + 1)
        for side in (short, full):
            assert side["row"].state is State.SUBMITTED
            assert side["stored"] == side["row"]
        assert short["row"].intent == full["row"].intent
        assert short["row"].effect == full["row"].effect
        assert short["entry"].keys() == full["entry"].keys()
        for key in short["entry"]:
            if key != "dispatch_id":  # derived from the operation id and the instant
                assert short["entry"][key] == full["entry"][key], key
        assert store.count_dispatched(NOW - 10) == {"submit_order": 2}
        assert verify_store(store).ok


class TestActiveControlsTakeTheFullPath:
    """Each active control changes what the next row does, journalled by whichever handle."""

    @pytest.mark.parametrize("control", ["kill", "shadow"])
    def test_a_switch_set_by_another_handle_holds_or_shadows_the_next_row(
        self, store_factory: StoreFactory, control: str
    ) -> None:
        writer, operator = store_factory(), store_factory()
        _journal(writer, "before", NOW)
        if control == "kill":
            operator.set_kill("submit_order", True, operator="op:t", reason="drill", now=NOW)
        else:
            operator.set_shadow("submit_order", True, operator="op:t", now=NOW)
        done = writer.journal(_new("after"), PATH, now=NOW + 1, guard=_guard())
        expected = State.VALIDATED if control == "kill" else State.SHADOWED
        assert done.row.state is expected

    def test_a_breaker_in_the_gate_s_config_sends_every_row_down_the_full_path(
        self, store_factory: StoreFactory
    ) -> None:
        from effectgate._core.controls import BreakerConfig

        store = store_factory()
        guard = _guard()
        guard.breaker = BreakerConfig(window=60.0, max_repeats=1)
        first = store.journal(_new("b-1"), PATH, now=NOW, guard=guard)
        second = store.journal(_new("b-2"), PATH, now=NOW + 1, guard=guard)
        assert first.row.state is State.SUBMITTED
        # The repeat of one fingerprint under a new id trips it: only the full path observes.
        assert second.tripped and second.row.state is State.VALIDATED

    def test_a_replay_returns_the_stored_row(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        _journal(store, "again", NOW)
        done = store.journal(_new("again"), PATH, now=NOW + 5, guard=_guard())
        assert not done.created and done.row.created_at == NOW


@pytest.mark.parametrize(
    ("controls", "active"),
    [
        (ClassControls("a"), False),
        (ClassControls("a", killed=True), True),
        (ClassControls("a", breaker_open=True), True),
        (ClassControls("a", shadow=True), True),
        (ClassControls("a", envelope=Envelope(version=1)), True),
    ],
)
def test_active_names_every_control_that_changes_a_new_row(
    controls: ClassControls, active: bool
) -> None:
    assert controls.active is active
