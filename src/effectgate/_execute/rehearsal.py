"""Kill switch rehearsals: the blast-radius dry run and the drill, each recorded.

:func:`blast_radius` says what a switch would hold now, flipping nothing. :func:`drill` flips
it for real: on (reason ``drill``), reads it back from the store (every process reads that row
in the transaction that would dispatch, so a switch seen there holds the class everywhere),
measures what it holds, and turns it off again. A drill is refused when the switch is on
already: ending it would lift a real halt. Both are recorded by the store with an audit entry
(``kill_rehearsal``); :func:`overdue_rehearsals` is the maintenance rule that pages when a
class's ``rehearsal_period`` passed without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from effectgate._core.controls import Alert
from effectgate._core.intent import Registry
from effectgate._core.rehearsal import Rehearsal, rehearsal_overdue
from effectgate._core.states import State
from effectgate.errors import ControlError
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["BlastRadius", "blast_radius", "drill", "overdue_rehearsals"]


@dataclass(frozen=True)
class BlastRadius:
    """What a kill switch on ``action`` would halt right now (nothing is flipped)."""

    action: str
    killed: bool
    dispatchable: list[Operation]
    awaiting_approval: int
    in_flight: int
    dispatched_last_hour: int

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "killed": self.killed,
            "would_hold": [r.op_key for r in self.dispatchable],
            "awaiting_approval": self.awaiting_approval,
            "in_flight": self.in_flight,
            "dispatched_last_hour": self.dispatched_last_hour,
        }

    def summary(self) -> dict[str, object]:
        """What a rehearsal records: the counts, not the rows."""
        return {
            "killed": self.killed,
            "would_hold": len(self.dispatchable),
            "awaiting_approval": self.awaiting_approval,
            "in_flight": self.in_flight,
            "dispatched_last_hour": self.dispatched_last_hour,
        }


def blast_radius(store: Store, action: str, *, now: float, limit: int = 1000) -> BlastRadius:
    """What a switch on ``action`` would hold now, without flipping it."""
    counts = store.count_by_state()
    dispatchable = store.list_operations(state=State.VALIDATED, action=action, limit=limit)
    recent = [
        r
        for r in store.list_operations(action=action, limit=10_000)
        if r.submitted_at is not None and r.submitted_at >= now - 3600
    ]
    return BlastRadius(
        action,
        store.controls(action).killed,
        dispatchable,
        counts.get((action, State.AWAITING_APPROVAL.value), 0),
        counts.get((action, State.SUBMITTED.value), 0),
        len(recent),
    )


def drill(
    store: Store, action: str, *, operator: str, reason: str | None, clock: Callable[[], float]
) -> Rehearsal:
    """Flip ``action``'s switch on, see it held, flip it off; record what was seen."""
    if store.controls(action).killed:
        raise ControlError(
            f"the kill switch of {action} is on: a drill would end with it off, lifting a "
            "real halt (rehearse with the dry run instead)",
            field="action",
        )
    why = "drill" + (f": {reason}" if reason else "")
    started = clock()
    store.set_kill(action, True, operator=operator, reason=why, now=started)
    try:
        seen = store.controls(action).killed
        radius = blast_radius(store, action, now=clock())
    finally:
        store.set_kill(action, False, operator=operator, reason=why, now=clock())
    ended = clock()
    detail = {**radius.summary(), "held_seen": seen, "seconds_on": ended - started}
    if reason:
        detail["reason"] = reason
    return store.record_rehearsal(action, "drill", operator=operator, detail=detail, now=ended)


def overdue_rehearsals(store: Store, registry: Registry, *, now: float) -> list[Alert]:
    """``rehearsal-overdue`` for each class with a ``rehearsal_period`` past since its last
    rehearsal of either kind (or never rehearsed)."""
    periods = [(ac.name, ac.rehearsal_period) for ac in registry if ac.rehearsal_period]
    if not periods:
        return []
    last = store.last_rehearsals()
    return [
        alert
        for name, period in periods
        if period is not None
        and (alert := rehearsal_overdue(name, period, last.get(name), now)) is not None
    ]
