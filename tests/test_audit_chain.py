"""Invariant 8: the audit log is append-only and tamper-evident; verifying it detects any edit.

Tampering is done with raw SQL behind the store's back, as an attacker with database access
would, and verification must say where.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from effectgate import (
    Gate,
    LimitPolicy,
    Operator,
    PolicySet,
    State,
    verify_bundle,
    verify_entries,
)
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.demo import ManualClock
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.base import Store

INTENT = dict(EXAMPLE_ORDER)


def fill(store: Store) -> Operator:
    clock = ManualClock()
    reg = default_registry()
    gate = Gate(store=store, registry=reg, adapters={"paper": PaperAdapter(PaperVenue())},
                policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}), clock=clock)
    for i in range(4):
        gate.submit("submit_order", f"op-{i}", {**INTENT, "quantity": str(i + 1)})
        clock.advance(1)
    op = Operator(store=store, registry=reg, clock=clock)
    op.kill("cancel_order", operator="alice", reason="drill")
    return op


def sql(store: Store, statement: str, *args: object) -> None:
    """Raw SQL on the store's own connection (the attacker's view, not an API)."""
    from effectgate.store.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        store._conn.execute(statement, args)
        return
    import psycopg

    with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(f"SET search_path TO {store.schema}")  # type: ignore[attr-defined]
        conn.execute(statement.replace("?", "%s").encode(), args)


def seqs(store: Store) -> list[int]:
    return [e.seq for e in store.audit_entries(limit=10_000)]


class TestVerify:
    def test_untouched_log_verifies(self, store: Store) -> None:
        op = fill(store)
        result = op.verify_audit()
        assert result.ok and result.checked == len(seqs(store)) > 10

    def test_flip_one_byte(self, store: Store) -> None:
        op = fill(store)
        target = seqs(store)[5]
        (entry,) = store.audit_entries(after_seq=target - 1, until_seq=target)
        tampered = entry.detail_text.replace('"state":"', '"state":"X', 1)
        if tampered == entry.detail_text:
            tampered = entry.detail_text[:-2] + chr(ord(entry.detail_text[-2]) ^ 1) + "}"
        sql(store, "UPDATE audit_log SET detail = ? WHERE seq = ?", tampered, target)
        result = op.verify_audit()
        assert not result.ok
        assert (result.findings[0].seq, result.findings[0].problem) == (target, "edited")
        assert f"seq {target}" in result.findings[0].message

    def test_delete(self, store: Store) -> None:
        op = fill(store)
        target = seqs(store)[4]
        sql(store, "DELETE FROM audit_log WHERE seq = ?", target)
        result = op.verify_audit()
        assert [(f.problem, f.seq) for f in result.findings][:1] == [
            ("broken_link", seqs(store)[4])]

    def test_delete_the_tail(self, store: Store) -> None:
        op = fill(store)
        last = seqs(store)[-1]
        sql(store, "DELETE FROM audit_log WHERE seq = ?", last)
        result = op.verify_audit()
        assert [f.problem for f in result.findings] == ["truncated"]

    def test_insert(self, store: Store) -> None:
        op = fill(store)
        entries = store.audit_entries(limit=10_000)
        # A forged entry between two real ones, chained to its predecessor (so its own hash is
        # right): the next real entry no longer follows it.
        from effectgate.audit import chain_hash, content_digest

        before, after = entries[3], entries[4]
        seq = before.seq + 1 if after.seq > before.seq + 1 else None
        if seq is None:
            sql(store, "UPDATE audit_log SET seq = seq + 1000 WHERE seq >= ?", after.seq)
            seq = before.seq + 1
        text = json.dumps({"state": "acknowledged"})
        forged = chain_hash(before.hash, content_digest(before.lane, seq, before.at, None, None,
                                                        "transition", text))
        sql(store, "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
            "prev_hash, hash) OVERRIDING SYSTEM VALUE VALUES (?,?,?,?,?,?,?,?,?)"
            if "Postgres" in type(store).__name__ else
            "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, prev_hash,"
            " hash) VALUES (?,?,?,?,?,?,?,?,?)",
            seq, before.at, None, None, "transition", text, before.lane, before.hash, forged)
        result = op.verify_audit()
        assert not result.ok
        assert any(f.problem in ("broken_link", "edited") and f.seq and f.seq > seq
                   for f in result.findings)

    def test_reorder(self, store: Store) -> None:
        op = fill(store)
        a, b = seqs(store)[2], seqs(store)[6]
        sql(store, "UPDATE audit_log SET seq = -1 WHERE seq = ?", a)
        sql(store, "UPDATE audit_log SET seq = ? WHERE seq = ?", a, b)
        sql(store, "UPDATE audit_log SET seq = ? WHERE seq = -1", b)
        result = op.verify_audit()
        assert {f.seq for f in result.findings if f.problem == "edited"} == {a, b}

    def test_anchored_head_catches_a_rewritten_log(self, store: Store) -> None:
        """A whole-log rewrite re-chains consistently; an anchored head still catches it."""
        op = fill(store)
        anchor = op.verify_audit().heads
        first = seqs(store)[0]
        sql(store, "DELETE FROM audit_log WHERE seq > ?", first)
        sql(store, "UPDATE audit_heads SET seq = ?, hash = (SELECT hash FROM audit_log WHERE "
            "seq = ?)", first, first)
        assert op.verify_audit().ok  # consistent with itself...
        assert not op.verify_audit(expect_heads=anchor).ok  # ...but not with the anchor

    def test_operator_actions_are_in_the_chain(self, store: Store) -> None:
        fill(store)
        kinds = [e.kind for e in store.audit_entries(limit=10_000)]
        assert "kill_switch_on" in kinds
        (kill,) = [e for e in store.audit_entries(limit=10_000) if e.kind == "kill_switch_on"]
        assert kill.detail["operator"] == "alice"


class TestEvidenceBundle:
    def test_bundle_verifies_offline_and_carries_the_trail(self, store: Store) -> None:
        op = fill(store)
        bundle = json.loads(json.dumps(op.export_evidence("op-2")))
        result = verify_bundle(bundle)
        assert result.ok and result.checked == len(bundle["entries"])
        proposed = bundle["entries"][0]
        detail = json.loads(proposed["detail_text"])
        assert detail["state"] == "proposed" and detail["intent"]["quantity"] == "3"
        assert detail["model"] == "example-model" and detail["harness_version"] == "0.1"
        assert detail["context_digest"] == INTENT["context_digest"]
        assert detail["decision"]["policy_version"] == "limit-1"
        states = [json.loads(e["detail_text"]).get("state") for e in bundle["entries"]]
        assert states == ["proposed", "validated", "submitted", "acknowledged"]
        assert bundle["operation"]["venue_id"] and bundle["operation"]["state"] == "acknowledged"

    @pytest.mark.parametrize("tamper", ["edit", "drop_segment", "foreign"])
    def test_tampered_bundle_fails(self, store: Store, tamper: str) -> None:
        op = fill(store)
        bundle = op.export_evidence("op-1")
        if tamper == "edit":
            bundle["entries"][1]["detail_text"] = bundle["entries"][1]["detail_text"].replace(
                "validated", "rejected")
        elif tamper == "drop_segment":
            del bundle["segment"][1]
        else:
            bundle["entries"][0]["operation_id"] = "op-3"
        assert not verify_bundle(bundle).ok

    def test_verify_entries_needs_no_store(self, store: Store) -> None:
        fill(store)
        entries = store.audit_entries(limit=10_000)
        assert verify_entries(entries).ok
        assert not verify_entries(entries[:3] + entries[4:]).ok


def test_state_is_untouched_by_verification(store: Store) -> None:
    op = fill(store)
    before = store.count_by_state()
    op.verify_audit()
    assert store.count_by_state() == before and before[("submit_order", State.ACKNOWLEDGED)] == 4
