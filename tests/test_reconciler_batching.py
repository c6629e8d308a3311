"""The reconciler writes its repairs in bounded batches (Store.transition_many) and counts a
repair only when its compare-and-set applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectgate import State
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.base import Move
from effectgate.store.roles import Store
from test_reconciler import build


class BatchSpy:
    """The store, with every transition_many call recorded (and an optional interloper)."""

    def __init__(self, inner: Store, before: Any = None) -> None:
        self.inner, self.before, self.batches = inner, before, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        self.batches.append(len(moves))
        if self.before is not None:
            self.before(moves)
        return self.inner.transition_many(moves, now=now)


def _uncertain(gate, venue, n_applied: int, n_lost: int) -> list[str]:
    ids = []
    for i in range(n_applied + n_lost):
        venue.fail_next(1, after_apply=i < n_applied)
        op = f"op-{i:02d}"
        gate.submit("submit_order", op, EXAMPLE_ORDER)
        assert gate.get(op).state is State.SUBMITTED
        ids.append(op)
    return ids


def test_sweep_flushes_in_bounded_batches(store: Store) -> None:
    gate, venue, rec, _, clock = build(store, page_size=4)
    ids = _uncertain(gate, venue, 7, 3)
    clock.advance(61)
    spy = BatchSpy(store)
    rec.store = spy  # type: ignore[assignment]
    rec.flush_every = 3
    report = rec.sweep()
    assert report.confirmed == 7 and report.written_off == 3
    assert spy.batches == [3, 3, 3, 1]
    assert sorted(k for k, _ in report.repaired) == [f"default:{op}" for op in ids]
    assert {gate.get(op).state for op in ids} == {State.ACKNOWLEDGED, State.FAILED}
    again = rec.sweep()
    assert again.confirmed == again.written_off == 0 and spy.batches == [3, 3, 3, 1]


def test_move_settled_by_someone_else_is_neither_counted_nor_noted(store: Store) -> None:
    gate, venue, rec, _, clock = build(store, page_size=10)
    ids = _uncertain(gate, venue, 3, 0)
    clock.advance(61)

    def late_receipt(moves: Sequence[Move]) -> None:
        if any(m.operation_id == ids[1] for m in moves):
            store.transition(
                "default", ids[1], State.SUBMITTED, State.ACKNOWLEDGED, now=clock(), venue_id="late"
            )

    rec.store = BatchSpy(store, late_receipt)  # type: ignore[assignment]
    report = rec.repair()
    assert report.confirmed == 2
    assert [k for k, _ in report.repaired] == [f"default:{ids[0]}", f"default:{ids[2]}"]
    assert gate.get(ids[1]).venue_id == "late"
    owners = [
        e.detail.get("owner")
        for e in store.iter_audit()
        if e.kind == "transition"
        and e.operation_id == ids[1]
        and e.detail.get("from") == "submitted"
    ]
    assert owners == [None]  # one move out of submitted: the late receipt's
