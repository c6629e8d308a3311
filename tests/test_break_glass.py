"""A break-glass grant is loud when *used*, not only when made (issue 18, docs/authority.md).

Invariant (docs/authority.md, "Delegated authority"): every dispatch a break-glass grant
authorises writes a ``grant_break_glass_used`` audit entry on the operation in the transaction
that writes ``submitted`` (DESIGN.md invariant 8: chained, tamper-evident), records a
``break-glass-use`` alert and hands it to the alert sink after the commit; a dispatch that does
not commit (held by the kill switch) leaves neither. On every store engine.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from effectgate import Gate, LimitPolicy, Operator, PolicySet
from effectgate._audit import verify_store
from effectgate._core.controls import Alert
from effectgate._core.grants import parse_spec
from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._execute.authority import grant_authoriser
from effectgate._execute.break_glass import ALERT_KIND, AUDIT_KIND, BreakGlassUses
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import ManualClock

NOW = 1000.0


def loud_gate(store: Store, sink: list[Alert]) -> tuple[Gate, PaperVenue]:
    clock = ManualClock(NOW)
    venue = PaperVenue(clock=clock)
    gate = Gate(
        store=store,
        registry=Registry([submit_order_class()]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    uses = BreakGlassUses(sink.append)
    gate.pipeline = replace(
        gate.pipeline,
        authorise=grant_authoriser(environment="production", uses=uses),
        in_tx=(uses.in_tx,),
        after_commit=(uses.after_commit,),
    )
    return gate, venue


def grant(store: Store, *, glass: bool) -> str:
    raw: dict[str, object] = {"actions": ["submit_order"], "expires_in": 900, "hops": 0}
    if glass:
        raw["break_glass"] = True
    return store.create_grant("alice", parse_spec(raw, now=NOW), created_by="ops", now=NOW).grant_id


def uses_of(store: Store, operation_id: str) -> list[dict[str, object]]:
    return [
        e.detail
        for e in store.audit_entries(scope="default", operation_id=operation_id, limit=50)
        if e.kind == AUDIT_KIND
    ]


def test_every_dispatch_under_break_glass_is_audited_and_alerted(store: Store) -> None:
    sink: list[Alert] = []
    gate, venue = loud_gate(store, sink)
    gid = grant(store, glass=True)
    for n in (1, 2):
        row = gate.submit("submit_order", f"op-{n}", EXAMPLE_ORDER, principal="alice")
        assert row.state is State.ACKNOWLEDGED
        [use] = uses_of(store, f"op-{n}")
        assert use["grant_id"] == gid and use["holder"] == "alice"
    assert venue.effect_count == 2
    # One alert per use, stored and delivered, besides the one for the grant's creation.
    stored = [a for a in store.list_alerts() if a.kind == ALERT_KIND]
    assert sorted(a.subject for a in stored) == [f"{gid}:default:op-1", f"{gid}:default:op-2"]
    assert [a.subject for a in sink] == [f"{gid}:default:op-1", f"{gid}:default:op-2"]
    assert any(a.kind == "break-glass" for a in store.list_alerts())  # its creation
    assert verify_store(store).ok


def test_an_ordinary_grant_is_quiet(store: Store) -> None:
    sink: list[Alert] = []
    gate, _ = loud_gate(store, sink)
    grant(store, glass=False)
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="alice")
    assert row.state is State.ACKNOWLEDGED
    assert uses_of(store, "op-1") == [] and sink == []
    assert not [a for a in store.list_alerts() if a.kind == ALERT_KIND]


def test_a_held_dispatch_leaves_no_use_behind(store: Store) -> None:
    """The use is written in the dispatch transaction: a dispatch the kill switch holds (no
    commit of ``submitted``) is not a use; releasing it and dispatching is one, once."""
    sink: list[Alert] = []
    gate, venue = loud_gate(store, sink)
    grant(store, glass=True)
    op = Operator(store=store, registry=gate.registry, clock=gate.clock)
    op.kill("submit_order", operator="ops", reason="drill")
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="alice")
    assert row.state is State.VALIDATED and venue.effect_count == 0
    assert uses_of(store, "op-1") == [] and sink == []
    op.release("submit_order", operator="ops")
    assert gate.dispatch("op-1").state is State.ACKNOWLEDGED
    assert len(uses_of(store, "op-1")) == 1 and len(sink) == 1
