"""The checkers added for the simulator (issue 22), each shown to catch what it names."""

from __future__ import annotations

from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.states import State
from effectgate._execute.adapter import OutboundRequest
from effectgate._execute.executor import Gate
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import (
    ManualClock,
    PaperAdapter,
    PaperVenue,
    no_dispatch_while_held,
    terminal_rows_unchanged,
    uncertain_rows_settled,
)


def _gate(store: Store, clock: ManualClock) -> Gate:
    venue = PaperVenue(clock=clock)
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(), "cancel_order": LimitPolicy()}),
        clock=clock,
    )


def test_terminal_rows_unchanged_remembers_and_flags_a_change(store: Store) -> None:
    """Invariant 1: a terminal row never changes (here forced by hand behind the checker)."""
    clock = ManualClock()
    row = _gate(store, clock).submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
    assert row.state is State.ACKNOWLEDGED
    seen: dict[str, tuple[str, str | None]] = {}
    assert terminal_rows_unchanged(store, seen) == [] and row.op_key in seen
    seen[row.op_key] = ("acknowledged", "V-elsewhere")  # as if the row had changed since
    (found,) = terminal_rows_unchanged(store, seen)
    assert found.invariant == 1 and "V-elsewhere" in found.message


def test_uncertain_rows_settled_flags_a_row_past_its_horizon(store: Store) -> None:
    """Invariant 11: a submitted row past its horizon after a pass is a silent wait."""
    clock = ManualClock()
    gate = _gate(store, clock)
    gate.adapters["paper"].venue.fail_next(1, after_apply=False)  # type: ignore[attr-defined]
    row = gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
    assert row.state is State.SUBMITTED
    assert uncertain_rows_settled(store, gate.registry, clock()) == []
    (found,) = uncertain_rows_settled(store, gate.registry, clock() + 60)
    assert found.invariant == 11


def test_no_dispatch_while_held_names_the_held_class() -> None:
    """Invariant 7."""
    requests = [
        OutboundRequest(operation_key="default:a", action="submit_order", effect={}),
        OutboundRequest(operation_key="default:b", action="cancel_order", effect={}),
    ]
    (found,) = no_dispatch_while_held(requests, frozenset({"cancel_order"}))
    assert found.invariant == 7 and "default:b" in found.message


def test_the_simulators_ledger_watch_judges_each_step_and_changed_rows_once(store: Store) -> None:
    """Invariants 1, 10 and 4, as the simulator checks them after every step (_sim/watch.py):
    a terminal row's change is flagged on the next check; a write-off inside the horizon is
    flagged on the check after it happened, once; the whole-ledger checker still sees it."""
    from effectgate._execute.reconciler import Reconciler
    from effectgate._sim.mutations import applied, by_name
    from effectgate._sim.watch import LedgerWatch
    from effectgate.testing import no_write_off_inside_horizon

    clock = ManualClock()
    gate = _gate(store, clock)
    watch = LedgerWatch()
    done = gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
    assert watch.check(store, gate.registry) == [] and done.op_key in watch.seen_terminal
    gate.adapters["paper"].venue.fail_next(1, after_apply=False)  # type: ignore[attr-defined]
    lost = gate.submit("submit_order", "op-2", dict(EXAMPLE_ORDER, quantity="2"))
    assert lost.state is State.SUBMITTED and watch.check(store, gate.registry) == []
    reconciler = Reconciler(
        store=store, registry=gate.registry, adapters=gate.adapters, clock=clock
    )
    with applied(by_name("write_off_inside_horizon")):
        reconciler.run_once()
    (found,) = watch.check(store, gate.registry)
    assert found.invariant == 4 and lost.op_key in found.message
    assert watch.check(store, gate.registry) == []  # unchanged since: judged once
    assert [v.invariant for v in no_write_off_inside_horizon(store, gate.registry)] == [4]
    watch.seen_terminal[done.op_key] = ("acknowledged", "V-elsewhere")  # as if it had changed
    (changed,) = watch.check(store, gate.registry)
    assert changed.invariant == 1 and "V-elsewhere" in changed.message
