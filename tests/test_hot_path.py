"""The hot path's short forms write what the full path writes, and run only where they may.

A row of a class with no active control and no breaker is journalled in as few statements as a
dialect can manage (SQLite: three on the cursor; PostgreSQL: one statement); every control that
can change a new row's fate sends it down the full path (``journal_new``) in the same
transaction. A receipt on the caller's copy of a submitted row builds the result from that
copy (SQLite: no RETURNING). Invariants 1, 3 and 7 ride on these: a switch set by another
process is seen by the very next journal, one id is journalled once, and the row returned is
the row stored.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest

from conftest import StoreFactory
from effectgate import State
from effectgate._core.controls import ClassControls, DispatchGuard, Envelope
from effectgate._evidence.audit import verify_store
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.base import NewOperation, Operation
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


class TestTheReceiptOnAHeldCopy:
    """The receipt's compare-and-set returns the row as stored, built from the caller's copy."""

    @staticmethod
    def _acknowledge(
        store: Store, operation_id: str, current: Operation, now: float, venue_id: str, **kw: Any
    ) -> Operation | None:
        return store.transition(
            "default",
            operation_id,
            State.SUBMITTED,
            State.ACKNOWLEDGED,
            now=now,
            venue_id=venue_id,
            current=current,
            **kw,
        )

    @staticmethod
    def _entry_kinds(store: Store, operation_id: str) -> list[str]:
        return [e.kind for e in store.audit_entries(scope="default", operation_id=operation_id)]

    def test_a_receipt_on_the_journal_s_copy(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        row = _journal(store, "r-1", NOW)["row"]
        done = self._acknowledge(
            store, "r-1", row, NOW + 1, "V-1", audit={"dispatch_id": row.dispatch_id}
        )
        assert done == store.get("default", "r-1")
        assert (done.version, done.venue_id, done.submitted_at) == (2, "V-1", NOW)
        # The receipt's entry is the row's to name, and found with the journal's.
        assert self._entry_kinds(store, "r-1") == ["transition", "transition"]
        assert verify_store(store).ok

    def test_a_receipt_on_a_row_dispatched_after_a_hold(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        store.set_kill("submit_order", True, operator="op:t", reason="drill", now=NOW)
        held = store.journal(_new("h-1"), PATH, now=NOW, guard=_guard()).row
        assert held.state is State.VALIDATED and held.detail
        store.set_kill("submit_order", False, operator="op:t", reason=None, now=NOW + 1)
        sent = store.dispatch("default", "h-1", now=NOW + 2, guard=_guard()).row
        assert sent.state is State.SUBMITTED
        done = self._acknowledge(store, "h-1", sent, NOW + 3, "V-9")
        # The copy's detail (what the dispatch left) is what the update kept.
        assert done == store.get("default", "h-1")
        assert done.detail == sent.detail and done.version == sent.version + 1

    def test_a_copy_that_differs_from_the_row_still_returns_the_row_as_stored(
        self, store_factory: StoreFactory
    ) -> None:
        """``current`` is public: an altered copy must not leak into the returned row."""
        store = store_factory()
        row = _journal(store, "c-1", NOW)["row"]
        altered = dataclasses.replace(row, version=41, detail="from an old copy")
        done = self._acknowledge(store, "c-1", altered, NOW + 1, "V-1")
        assert done == store.get("default", "c-1")
        assert (done.version, done.detail) == (2, None)
        assert self._entry_kinds(store, "c-1") == ["transition", "transition"]
        assert verify_store(store).ok

    def test_a_stale_copy_misses(self, store_factory: StoreFactory) -> None:
        from effectgate.errors import StaleState

        store = store_factory()
        row = _journal(store, "s-1", NOW)["row"]
        store.transition(
            "default", "s-1", State.SUBMITTED, State.ACKNOWLEDGED, now=NOW + 1, venue_id="V"
        )
        with pytest.raises(StaleState):
            store.transition(
                "default", "s-1", State.SUBMITTED, State.FAILED, now=NOW + 2, current=row
            )
        assert store.get("default", "s-1").state is State.ACKNOWLEDGED
        assert len(store.audit_entries(scope="default", operation_id="s-1")) == 2
