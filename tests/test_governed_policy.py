"""Policy as a governed artefact (issue 18): versions by hash, proposals approved by another
principal, replicas following the active version without a restart, and replay of recorded
intents under a proposed policy; on every store engine.

Invariants checked (docs/authority.md): "a policy change needs a second principal" and "every
decision names the policy that made it" (the row's and the journal's ``policy_version`` is the
active document's hash).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from effectgate import Gate, LimitPolicy
from effectgate._core.governed_policy import (
    canonical_text,
    diff_documents,
    document_of,
    policy_hash,
    policy_set,
    replay,
)
from effectgate._core.intent import Registry
from effectgate._evidence.audit import verify_store
from effectgate._service import Service, parse_config
from effectgate._service._policy_gov import recorded_decisions
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ControlError, SelfApproval
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store import SQLiteStore
from effectgate.store.roles import PolicyVersions, Store
from effectgate.testing import ManualClock
from servicekit import config_text

REGISTRY = Registry([submit_order_class(), cancel_order_class()])
OLD = document_of(
    {
        "submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900")),
        "cancel_order": LimitPolicy(),
    }
)
NEW = document_of({"submit_order": LimitPolicy(Decimal("2500"), approve_above=Decimal("300"))})
CANCEL = {"intent_version": "1", "action": "cancel_order", "instrument": "XYZ-PERP",
          "order_ref": "V-000001"}  # fmt: skip


def order(quantity: str) -> dict[str, object]:
    return {**EXAMPLE_ORDER, "quantity": quantity}  # limit price 100


class TestPolicyVersions:
    def test_a_change_needs_a_second_principal(self, store: Store) -> None:
        assert isinstance(store, PolicyVersions)
        p = store.propose_policy(canonical_text(OLD), policy_hash(OLD), author="alice", now=1.0)
        assert p.state == "open" and p.base_hash is None and store.active_policy() is None
        with pytest.raises(SelfApproval):
            store.approve_policy(p.proposal_id, approver="alice", now=2.0)
        assert store.active_policy() is None
        applied = store.approve_policy(p.proposal_id, approver="bob", now=3.0)
        assert (applied.state, applied.decided_by) == ("applied", "bob")
        active = store.active_policy()
        assert active is not None and active.policy_hash == policy_hash(OLD)
        assert json.loads(active.document) == OLD
        with pytest.raises(ControlError, match="applied"):
            store.approve_policy(p.proposal_id, approver="carol", now=4.0)
        kinds = [e.kind for e in store.iter_audit() if e.kind.startswith("policy_")]
        assert kinds == ["policy_proposed", "policy_activated"]
        assert verify_store(store).ok

    def test_a_proposal_over_a_stale_base_is_refused(self, store: Store) -> None:
        a = store.propose_policy(canonical_text(OLD), policy_hash(OLD), author="alice", now=1.0)
        b = store.propose_policy(canonical_text(NEW), policy_hash(NEW), author="alice", now=1.0)
        store.approve_policy(a.proposal_id, approver="bob", now=2.0)
        with pytest.raises(ControlError, match="propose anew"):
            store.approve_policy(b.proposal_id, approver="bob", now=3.0)

    def test_a_load_is_a_recorded_change(self, store: Store) -> None:
        p = store.load_policy(canonical_text(NEW), policy_hash(NEW), by="ops", now=1.0)
        assert p.state == "loaded"
        active = store.active_policy()
        assert active is not None and active.proposal_id == p.proposal_id
        assert [q.proposal_id for q in store.list_policy_proposals()] == [p.proposal_id]
        assert any(e.kind == "policy_loaded" for e in store.iter_audit())

    def test_diff_names_each_change(self) -> None:
        lines = diff_documents(OLD, NEW)
        assert "- cancel_order: removed (deny by default)" in lines
        assert "~ submit_order.max_value: 1000 -> 2500" in lines
        assert "~ submit_order.approve_above: 900 -> 300" in lines
        assert diff_documents(None, NEW)[0].startswith("+ submit_order")


def gate_under(store: Store, document: dict[str, dict[str, object]], real: bool = False) -> Gate:
    clock = time.time if real else ManualClock(1000.0)
    return Gate(
        store=store,
        registry=REGISTRY,
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=policy_set(document, REGISTRY),
        clock=clock,
    )


class TestReplay:
    def test_every_decision_records_the_policy_hash(self, store: Store) -> None:
        row = gate_under(store, OLD).submit("submit_order", "op-1", order("2"), dispatch=False)
        assert row.policy_version == policy_hash(OLD)
        [decision] = list(recorded_decisions(store, since=0))
        assert decision.policy_version == policy_hash(OLD)

    def test_replay_reports_the_changed_decisions_per_class(self, store: Store) -> None:
        gate = gate_under(store, OLD)
        for n, qty in enumerate(("2", "4", "9.5", "20", "26")):  # 200 400 950 2000 2600
            gate.submit("submit_order", f"op-{n}", order(qty), dispatch=False)
        gate.submit("cancel_order", "op-c", CANCEL, dispatch=False)
        report = replay(recorded_decisions(store, since=0), REGISTRY, policy_set(NEW, REGISTRY))
        assert report.replayed == 6
        # 400: validate -> approve; 950: approve either way; 2000: deny -> allow (approve);
        # 2600: denied either way; 200: unchanged; the cancel: no policy now -> deny.
        assert {a: dict(c) for a, c in report.counts.items()} == {
            "submit_order": {"tier": 1, "deny->allow": 1},
            "cancel_order": {"allow->deny": 1},
        }
        changed = {c["operation_id"]: c["change"] for c in report.changed}
        assert changed == {"op-1": "tier", "op-3": "deny->allow", "op-c": "allow->deny"}
        assert store.active_policy() is None  # a replay changes nothing


class TestReplicasFollow:
    def test_an_approved_change_reaches_every_replica_without_a_restart(
        self, tmp_path: Path, store_factory: object
    ) -> None:
        text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + (
            "[authority]\ngoverned_policy = true\npolicy_poll = 0.05\n"
        )
        stores = [store_factory() for _ in range(2)]  # type: ignore[operator]
        replicas = [Service(parse_config(text, "t.toml"), store=s) for s in stores]
        try:
            p = stores[0].propose_policy(
                canonical_text(NEW), policy_hash(NEW), author="alice", now=time.time()
            )
            stores[0].approve_policy(p.proposal_id, approver="bob", now=time.time())
            deadline = time.monotonic() + 10
            while not all(r.policy_follower.active_hash == policy_hash(NEW) for r in replicas):  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "a replica did not follow the change"
                time.sleep(0.02)
            row = replicas[1].gate.submit("submit_order", "op-1", order("20"), scope="alpha")
            assert row.policy_version == policy_hash(NEW)  # 2000 <= 2500 now: allowed
            assert row.tier == "approve"
        finally:
            for r in replicas:
                r.close()


def cli(config: Path, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate", "policy", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200", "EFFECTGATE_OPERATOR_TOKEN": token},
    )


class TestPolicyCli:
    def test_propose_diff_approve_list_replay(self, tmp_path: Path) -> None:
        db = tmp_path / "l.db"
        config = tmp_path / "effectgate.toml"
        config.write_text(config_text(store_url=f"sqlite:///{db}"))
        store = SQLiteStore(str(db))
        store.migrate()
        alice = store.create_principal("alice", "operator", "*", created_by="ops", now=1.0)
        bob = store.create_principal("bob", "operator", "*", created_by="ops", now=1.0)
        gate = gate_under(store, OLD, real=True)  # the CLI's window is back from now
        gate.submit("cancel_order", "op-c", CANCEL, dispatch=False)
        gate.submit("submit_order", "op-1", order("4"), dispatch=False)
        store.close()
        policy = tmp_path / "new.toml"
        policy.write_text('[policies.submit_order]\nmax_value = "2500"\napprove_above = "300"\n')
        out = cli(config, "replay", "--file", str(policy), "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["counts"] == {"cancel_order": {"allow->deny": 1}, "submit_order": {"tier": 1}}
        out = cli(config, "propose", "--file", str(policy), "--json", token=alice.token)
        assert out.returncode == 0, out.stderr
        proposal = json.loads(out.stdout)
        assert proposal["author"] == "alice" and proposal["policy_hash"] == policy_hash(NEW)
        out = cli(config, "diff", proposal["proposal_id"])
        assert "approve_above" in out.stdout
        out = cli(config, "approve", proposal["proposal_id"], token=alice.token)
        assert out.returncode != 0 and "self_approval" in out.stderr
        out = cli(config, "load", "--file", str(policy))
        assert out.returncode != 0 and "approval" in out.stderr
        out = cli(config, "approve", proposal["proposal_id"], "--json", token=bob.token)
        assert out.returncode == 0, out.stderr
        listed = json.loads(cli(config, "list", "--json").stdout)
        assert listed["active"] == policy_hash(NEW)
        assert listed["proposals"][0]["decided_by"] == "bob"
        bad = tmp_path / "bad.toml"
        bad.write_text('[policies.nope]\nmax_value = "1"\n')
        out = cli(config, "propose", "--file", str(bad))
        assert out.returncode != 0 and "nope" in out.stderr

    def test_reject_and_show(self, tmp_path: Path) -> None:
        """A rejected proposal is closed, audited and never applied (docs/authority.md)."""
        db = tmp_path / "l.db"
        config = tmp_path / "effectgate.toml"
        config.write_text(config_text(store_url=f"sqlite:///{db}"))
        store = SQLiteStore(str(db))
        store.migrate()
        alice = store.create_principal("alice", "operator", "*", created_by="ops", now=1.0)
        bob = store.create_principal("bob", "operator", "*", created_by="ops", now=1.0)
        store.close()
        policy = tmp_path / "new.toml"
        policy.write_text('[policies.submit_order]\nmax_value = "2500"\n')
        out = cli(config, "propose", "--file", str(policy), "--json", token=alice.token)
        pid = json.loads(out.stdout)["proposal_id"]
        out = cli(config, "reject", pid, "--reason", "not now", "--json", token=bob.token)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["state"] == "rejected"
        shown = json.loads(cli(config, "show", pid, "--json").stdout)
        assert shown["decided_by"] == "bob" and shown["diff"]
        out = cli(config, "approve", pid, token=bob.token)
        assert out.returncode != 0 and "rejected" in out.stderr
        assert json.loads(cli(config, "list", "--json").stdout)["active"] is None
