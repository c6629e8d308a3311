"""Approver roles per action class and approvals bound to preconditions (issue 18), on every
store engine.

Invariant checked (docs/authority.md, "an approval holds for the world it saw"): a row whose
approval bound a precondition is dispatched only while the venue state re-read just before
dispatch has the bound fingerprint; otherwise it goes back for a new approval round and the
venue receives nothing.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate import Gate, LimitPolicy, PolicySet
from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._doors.http.app import create_app
from effectgate._execute.adapter import ReadsPrecondition
from effectgate._execute.authority import approver_role_check
from effectgate._execute.operator import Operator
from effectgate._execute.preconditions import BOUND_ENTRY, bind_precondition, precondition_check
from effectgate._execute.predispatch import Stage
from effectgate._service import Service, parse_config
from effectgate._service._authority import authority_stages, revoked_check
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ApproverNotEntitled, ConfigError, ControlError
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store.base import Operation
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import OPERATOR, ORDER, bearer, config_text

NOW = 1000.0
ROLES = ApproverRoles(
    members={"treasury": frozenset({"alice"}), "risk": frozenset({"carol"})},
    by_class={"submit_order": frozenset({"treasury"})},
)


def setup(store: Store) -> tuple[Gate, Operator, PaperVenue]:
    clock = ManualClock(NOW)
    venue = PaperVenue(clock=clock)
    gate = Gate(
        store=store,
        registry=Registry([submit_order_class(), cancel_order_class()]),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("100"))}
        ),
        clock=clock,
    )
    op = Operator(store=store, registry=gate.registry, clock=clock)
    return gate, op, venue


def dispatch_with(gate: Gate, row: Operation, stages: list[Stage]) -> Operation:
    """Dispatch through the gate's own pipeline with ``stages`` as its approval stages."""
    gate.pipeline = replace(gate.pipeline, approved=tuple(stages))
    return gate.dispatch(row.operation_id, scope=row.scope)


class TestApproverRoles:
    def test_only_a_member_of_the_classes_roles_approves(self, store: Store) -> None:
        gate, op, _ = setup(store)
        op.approver_roles = ROLES
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
        with pytest.raises(ApproverNotEntitled, match="treasury"):
            op.approve("op-1", fingerprint=row.fingerprint, approver="carol")
        refused = [e for e in store.iter_audit() if e.kind == "approval_refused"]
        assert refused and refused[0].detail["error"]["code"] == "approver_not_entitled"
        assert store.list_approvals("default", "op-1") == []
        out = op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
        assert out.operation.state is State.VALIDATED

    def test_a_class_without_roles_keeps_the_old_rule(self) -> None:
        assert ROLES.entitled("cancel_order", "anyone")
        with pytest.raises(ControlError):
            ApproverRoles(members={}, by_class={"submit_order": frozenset({"ghost"})})

    def test_an_approver_removed_from_the_role_no_longer_counts(self, store: Store) -> None:
        gate, op, venue = setup(store)
        op.approver_roles = ROLES
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
        op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
        row = store.get("default", "op-1")
        assert row is not None
        later = ApproverRoles(
            members={"treasury": frozenset({"bob"})}, by_class=dict(ROLES.by_class)
        )
        done = dispatch_with(gate, row, [approver_role_check(later)])
        assert done.state is State.AWAITING_APPROVAL and venue.effect_count == 0


class TestPreconditions:
    def approved(self, store: Store) -> tuple[Gate, PaperVenue, Operation]:
        gate, op, venue = setup(store)
        op.on_approved = lambda scope, oid, who: bind_precondition(
            store, gate.adapters, gate.registry, scope, oid, approver=who, now=NOW
        )
        row = gate.submit("submit_order", "op-1", EXAMPLE_ORDER, principal="agent", dispatch=False)
        assert row.state is State.AWAITING_APPROVAL
        op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
        row = store.get("default", "op-1")
        assert row is not None and row.state is State.VALIDATED
        return gate, venue, row

    def test_the_paper_venue_reads_its_precondition(self) -> None:
        venue = PaperVenue()
        adapter = PaperAdapter(venue)
        assert isinstance(adapter, ReadsPrecondition)
        venue.submit("k1", "submit_order", {**EXAMPLE_ORDER, "quantity": "3"})  # type: ignore[dict-item]
        state = adapter.read_precondition("submit_order", {"instrument": "XYZ-PERP"}, timeout=1)
        assert state == {"instrument": "XYZ-PERP", "position": "3", "orders": 1}

    def test_an_unchanged_precondition_dispatches(self, store: Store) -> None:
        gate, venue, row = self.approved(store)
        [bound] = [e for e in store.iter_audit() if e.kind == BOUND_ENTRY]
        assert bound.detail["state"]["position"] == "0"
        done = dispatch_with(gate, row, [precondition_check(gate.adapters, gate.registry)])
        assert done.state is State.ACKNOWLEDGED and venue.effect_count == 1

    def test_a_changed_precondition_stops_the_dispatch_and_asks_again(self, store: Store) -> None:
        gate, venue, row = self.approved(store)
        # Between approval and dispatch, the position moves (another order fills).
        venue.submit("elsewhere", "submit_order", {**EXAMPLE_ORDER, "quantity": "7"})  # type: ignore[dict-item]
        done = dispatch_with(gate, row, [precondition_check(gate.adapters, gate.registry)])
        assert done.state is State.AWAITING_APPROVAL
        assert venue.effect_count == 1  # only the other order: nothing of ours was sent
        assert "precondition_changed" in (done.detail or "") or any(
            "precondition_changed" in str(e.detail)
            for e in store.audit_entries(scope="default", operation_id="op-1")
        )
        # The new round binds the new state; then it dispatches.
        op = Operator(store=store, registry=gate.registry, clock=gate.clock)
        op.on_approved = lambda scope, oid, who: bind_precondition(
            store, gate.adapters, gate.registry, scope, oid, approver=who, now=NOW
        )
        op.approve("op-1", fingerprint=row.fingerprint, approver="alice")
        row = store.get("default", "op-1")
        assert row is not None
        done = dispatch_with(gate, row, [precondition_check(gate.adapters, gate.registry)])
        assert done.state is State.ACKNOWLEDGED

    def test_no_binding_no_check(self, store: Store) -> None:
        gate, _, venue = setup(store)
        row = gate.submit("submit_order", "op-1", {**EXAMPLE_ORDER, "quantity": "0.5"},
                          principal="agent", dispatch=False)  # fmt: skip
        assert row.state is State.VALIDATED  # under approve_above: no approval, no binding
        done = dispatch_with(gate, row, [precondition_check(gate.adapters, gate.registry)])
        assert done.state is State.ACKNOWLEDGED and venue.effect_count == 1


class TestServiceWiring:
    def test_http_approval_binds_and_stages_are_built(self, tmp_path: Path, store: Store) -> None:
        text = (
            config_text(store_url=f"sqlite:///{tmp_path}/l.db")
            + """
[authority]
grants = true
environment = "staging"
[authority.approver_roles]
treasury = ["ops"]
[authority.approvers]
submit_order = ["treasury"]
"""
        )
        svc = Service(parse_config(text, "t.toml"), store=store)
        try:
            # grants; then revoked approvers, approver roles, preconditions; all on the gate
            authorise, approved = authority_stages(svc)
            assert authorise is not None and len(approved) == 3
            assert svc.gate.pipeline.authorise is not None
            assert len(svc.gate.pipeline.approved) == 3
            revoked = revoked_check(svc)
            store.create_principal("gone", "approver", "alpha", created_by="ops", now=1.0)
            assert not revoked("gone")
            store.revoke_principal("gone", revoked_by="ops", now=2.0)
            assert revoked("gone") and not revoked("never-a-ledger-principal")
            with TestClient(create_app(svc, mcp_http=False)) as client:
                big = {**ORDER, "quantity": "9.5"}
                r = client.post(
                    "/v1/actions/submit_order",
                    json=big,
                    headers={**bearer("test-agent-alpha-token"), "Idempotency-Key": "op-1"},
                )
                assert r.status_code == 201, r.text
                fp = r.json()["fingerprint"]
                r = client.post(
                    "/v1/admin/approvals/alpha/op-1/approve",
                    json={"fingerprint": fp},
                    headers=bearer(OPERATOR),
                )
                assert r.status_code == 200, r.text
            bound = [e for e in store.iter_audit() if e.kind == BOUND_ENTRY]
            assert bound and bound[0].detail["approver"] == "ops"
        finally:
            svc.close()

    def test_config_names_unknown_roles_and_classes(self, tmp_path: Path) -> None:
        base = config_text(store_url=f"sqlite:///{tmp_path}/l.db")
        with pytest.raises(ConfigError, match="not defined"):
            parse_config(base + '[authority.approvers]\nsubmit_order = ["ghost"]\n', "t.toml")
        with pytest.raises(ConfigError, match="no action class"):
            parse_config(
                base + '[authority.approver_roles]\nt = ["a"]\n[authority.approvers]\nx = ["t"]\n',
                "t.toml",
            )
