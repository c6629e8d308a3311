"""What an approval was given with, kept on the approval itself (issue 18, docs/authority.md):
the precondition it was bound to and the approver roles its credential asserted, in the
approvals' own columns, read by the pre-dispatch stages. On every store engine.

Invariant (docs/authority.md, "Approvals"): a dispatch goes ahead only if every approval of the
current round still stands: each approver's bound precondition still holds and each approver
still holds a role of the class; otherwise the row goes back for a new round, nothing is sent
(DESIGN.md's ``validated -> awaiting_approval``). Bindings are written with a chained audit
entry in the same transaction (invariant 8).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, Operator, PolicySet
from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.intent import Registry, Tier
from effectgate._core.states import State
from effectgate._evidence.audit import verify_store
from effectgate._execute.authority import approver_role_check
from effectgate._execute.preconditions import bind_precondition, precondition_check
from effectgate._execute.predispatch import Stage
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ApproverNotEntitled
from effectgate.examples import EXAMPLE_ORDER, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import ManualClock

NOW = 1000.0
ROLES = ApproverRoles(
    members={"treasury": frozenset({"alice"})}, by_class={"submit_order": frozenset({"treasury"})}
)


def setup(store: Store, *, two: bool = False) -> tuple[Gate, Operator, PaperVenue]:
    clock = ManualClock(NOW)
    venue = PaperVenue(clock=clock)
    cls = submit_order_class()
    if two:
        cls = replace(cls, tier_floor=Tier.MULTI_APPROVE)
    gate = Gate(
        store=store,
        registry=Registry([cls]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("100"))}
        ),
        clock=clock,
    )
    op = Operator(store=store, registry=gate.registry, clock=clock)
    op.on_approved = lambda scope, oid, who: bind_precondition(
        store, gate.adapters, gate.registry, scope, oid, approver=who, now=clock()
    )
    return gate, op, venue


def dispatch(gate: Gate, stages: list[Stage]) -> State:
    gate.pipeline = replace(gate.pipeline, approved=tuple(stages))
    return gate.dispatch("op-1").state


def test_the_binding_lives_on_the_approval(store: Store) -> None:
    gate, op, venue = setup(store)
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
    op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
    [approval] = store.list_approvals("default", "op-1")
    assert approval.precondition is not None and approval.precondition.startswith("sha256:")
    assert approval.precondition_at == NOW
    [entry] = [e for e in store.iter_audit() if e.kind == "precondition_bound"]
    assert entry.detail["fingerprint"] == approval.precondition
    assert dispatch(gate, [precondition_check(gate.adapters, gate.registry)]) is State.ACKNOWLEDGED
    assert venue.effect_count == 1
    assert verify_store(store).ok


def test_every_approvers_binding_must_still_hold(store: Store) -> None:
    """Two approvers, the world changing between their approvals: the first approver's binding
    no longer holds at dispatch, though the second's does, so nothing is sent."""
    gate, op, venue = setup(store, two=True)
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
    assert row.state is State.AWAITING_APPROVAL
    op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
    venue.submit("elsewhere", "submit_order", {**EXAMPLE_ORDER, "quantity": "7"})  # type: ignore[dict-item]
    op.approve("op-1", fingerprint=row.fingerprint, approver="bob")
    first, second = store.list_approvals("default", "op-1")
    assert first.precondition != second.precondition
    state = dispatch(gate, [precondition_check(gate.adapters, gate.registry)])
    assert state is State.AWAITING_APPROVAL and venue.effect_count == 1  # only the other order
    # The new round voided both approvals, and their bindings with them.
    assert store.list_approvals("default", "op-1") == []
    assert not store.bind_approval_precondition(
        "default", "op-1", approver="alice", fingerprint="sha256:x", detail={}, now=NOW
    )


def test_an_unread_precondition_asks_again(store: Store) -> None:
    gate, op, venue = setup(store)
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
    op.on_approved = None
    op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
    assert store.bind_approval_precondition(
        "default", "op-1", approver="alice", fingerprint=None, detail={"error": "down"}, now=NOW
    )
    state = dispatch(gate, [precondition_check(gate.adapters, gate.registry)])
    assert state is State.AWAITING_APPROVAL and venue.effect_count == 0


def test_an_auto_approved_action_needs_no_binding(store: Store) -> None:
    """No approval, nothing to bind: the stage lets it through."""
    gate, _, venue = setup(store)
    order = {**EXAMPLE_ORDER, "quantity": "1"}
    row = gate.submit("submit_order", "op-1", order, principal="agent", dispatch=False)
    assert row.state is State.VALIDATED
    assert dispatch(gate, [precondition_check(gate.adapters, gate.registry)]) is State.ACKNOWLEDGED
    assert venue.effect_count == 1


def test_claimed_approver_roles_are_kept_and_counted(store: Store) -> None:
    gate, op, venue = setup(store)
    op.approver_roles = ROLES
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
    with pytest.raises(ApproverNotEntitled):
        op.approve("op-1", fingerprint=row.fingerprint, approver="dave")
    op.approve("op-1", fingerprint=row.fingerprint, approver="dave", claimed_roles=["treasury"])
    [approval] = store.list_approvals("default", "op-1")
    assert approval.approver == "dave" and approval.roles == ("treasury",)
    assert dispatch(gate, [approver_role_check(ROLES)]) is State.ACKNOWLEDGED
    assert venue.effect_count == 1


def test_a_claimed_role_no_longer_required_elsewhere_does_not_count(store: Store) -> None:
    """The class's roles change after approval: the kept claim is of a role the class no
    longer accepts, so the approval stops counting."""
    gate, op, venue = setup(store)
    op.approver_roles = ROLES
    row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
    op.approve("op-1", fingerprint=row.fingerprint, approver="dave", claimed_roles=["treasury"])
    later = ApproverRoles(
        members={"treasury": frozenset({"alice"}), "risk": frozenset()},
        by_class={"submit_order": frozenset({"risk"})},
    )
    assert dispatch(gate, [approver_role_check(later)]) is State.AWAITING_APPROVAL
    assert venue.effect_count == 0
