"""Invariant 8: the audit log is append-only and tamper-evident; verifying it detects any edit.

Tampering is done with raw SQL behind the store's back, as an attacker with database access
would, and verification must say where.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest

from effectgate import Gate, LimitPolicy, Operator, PolicySet, State, verify_bundle, verify_entries
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock

INTENT = dict(EXAMPLE_ORDER)


def fill(store: Store) -> Operator:
    clock = ManualClock()
    reg = default_registry()
    gate = Gate(
        store=store,
        registry=reg,
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        clock=clock,
    )
    for i in range(6):
        gate.submit("submit_order", f"op-{i}", {**INTENT, "quantity": str(i + 1)})
        clock.advance(1)
    op = Operator(store=store, registry=reg, clock=clock)
    op.kill("cancel_order", operator="alice", reason="drill")
    return op


def _grow_one_lane(store: Store) -> list:
    """op-1's lane, with a few more entries (an operation's trail stays in one lane)."""
    for n in range(4):
        store.append_audit("note", {"n": n}, now=10.0 + n, scope="default", operation_id="op-1")
    entries = store.audit_entries(limit=10_000)
    (lane,) = {e.lane for e in entries if e.operation_id == "op-1"}
    return [e for e in entries if e.lane == lane]


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


def _is_sqlite(store: Store) -> bool:
    from effectgate.store.sqlite import SQLiteStore

    return isinstance(store, SQLiteStore)


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
        lane_of = {e.seq: e.lane for e in store.audit_entries(limit=10_000)}
        target = seqs(store)[4]
        later = [s for s in seqs(store) if s > target and lane_of[s] == lane_of[target]]
        sql(store, "DELETE FROM audit_log WHERE seq = ?", target)
        result = op.verify_audit()
        assert [(f.problem, f.seq) for f in result.findings][:1] == [("broken_link", later[0])]

    def test_delete_the_tail(self, store: Store) -> None:
        op = fill(store)
        last = seqs(store)[-1]
        sql(store, "DELETE FROM audit_log WHERE seq = ?", last)
        result = op.verify_audit()
        assert [f.problem for f in result.findings] == ["truncated"]

    def test_delete_a_tail_the_hot_path_wrote(self, store: Store) -> None:
        """The last entries are a journal and a receipt (SQLite records their head in the
        operations row, not audit_heads): cutting them off is still reported."""
        op = fill(store)
        Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        ).submit("submit_order", "op-last", INTENT)
        tail = seqs(store)[-2:]
        sql(store, "DELETE FROM audit_log WHERE seq >= ?", tail[0])
        result = op.verify_audit()
        assert [f.problem for f in result.findings] == ["truncated"]

    def test_a_cut_tail_stays_reported_after_later_appends(self, store: Store) -> None:
        """Later appends may re-use a cut-off tail's seqs (SQLite chains from the last entry
        left); the operations row that named the cut entry keeps saying so."""
        op = fill(store)
        gate = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        )
        gate.submit("submit_order", "op-victim", INTENT)
        tail = seqs(store)[-2:]
        sql(store, "DELETE FROM audit_log WHERE seq >= ?", tail[0])
        gate.submit("submit_order", "op-after-1", INTENT)
        gate.submit("submit_order", "op-after-2", INTENT)
        result = op.verify_audit()
        assert not result.ok, "a cut tail healed over by later appends"
        assert {f.problem for f in result.findings} & {"broken_link", "anchor", "truncated", "head"}

    def test_insert(self, store: Store) -> None:
        op = fill(store)
        entries = store.audit_entries(limit=10_000)
        # A forged entry between two real ones, chained to its predecessor (so its own hash is
        # right): the next real entry no longer follows it.
        from effectgate._evidence.audit import chain_hash, content_digest

        lanes: dict[int, list] = {}
        for e in entries:
            lanes.setdefault(e.lane, []).append(e)
        pairs = [(a, b) for chain in lanes.values() for a, b in pairwise(chain)]
        gaps = [(a, b) for a, b in pairs if b.seq > a.seq + 1]  # PostgreSQL leaves gaps
        if gaps:
            before, after = gaps[0]
        else:  # make room by moving the tail up (an attacker may alter the table, too)
            before, after = pairs[3]
            if "Postgres" in type(store).__name__:
                sql(store, "ALTER TABLE audit_log ALTER COLUMN seq SET GENERATED BY DEFAULT")
            sql(store, "UPDATE audit_log SET seq = seq + 1000 WHERE seq >= ?", after.seq)
        seq = before.seq + 1
        text = json.dumps({"state": "acknowledged"})
        forged = chain_hash(
            before.hash, content_digest(before.lane, before.at, None, None, "transition", text)
        )
        sql(
            store,
            "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
            "prev_hash, hash) OVERRIDING SYSTEM VALUE VALUES (?,?,?,?,?,?,?,?,?)"
            if "Postgres" in type(store).__name__
            else "INSERT INTO audit_log (seq, at, scope, operation_id, kind, detail, lane, "
            "prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?)",
            seq,
            before.at,
            None,
            None,
            "transition",
            text,
            before.lane,
            before.hash,
            forged,
        )
        result = op.verify_audit()
        assert not result.ok
        assert any(
            f.problem in ("broken_link", "edited") and f.seq and f.seq > seq
            for f in result.findings
        )

    def test_reorder(self, store: Store) -> None:
        """Two entries swap places (every column but seq moves)."""
        op = fill(store)
        # Two entries of one lane (PostgreSQL spreads operations over lanes).
        chain = [e.seq for e in _grow_one_lane(store)]
        a, b = chain[1], chain[-2]
        cols = "at, scope, operation_id, kind, detail, lane, prev_hash, hash"
        rows = {e.seq: e for e in store.audit_entries(limit=10_000)}
        for dst, src in ((a, rows[b]), (b, rows[a])):
            sql(
                store,
                f"UPDATE audit_log SET ({cols}) = (?,?,?,?,?,?,?,?) WHERE seq = ?",
                src.at,
                src.scope,
                src.operation_id,
                src.kind,
                src.detail_text,
                src.lane,
                src.prev_hash,
                src.hash,
                dst,
            )
        result = op.verify_audit()
        assert not result.ok and a in {f.seq for f in result.findings}

    def test_anchored_head_catches_a_rewritten_log(self, store: Store) -> None:
        """A whole-log rewrite re-chains consistently; an anchored head still catches it."""
        op = fill(store)
        anchor = op.verify_audit().heads
        (first,) = store.audit_entries(limit=1)
        sql(store, "DELETE FROM audit_log WHERE seq > ?", first.seq)
        sql(store, "DELETE FROM audit_heads WHERE lane <> ?", first.lane)
        sql(
            store,
            "UPDATE audit_heads SET seq = ?, hash = ? WHERE lane = ?",
            first.seq,
            first.hash,
            first.lane,
        )
        if _is_sqlite(store):  # the attacker rewrites the operations rows' anchors too
            sql(store, "UPDATE operations SET audit_seq = NULL, audit_hash = NULL")
        assert op.verify_audit().ok  # consistent with itself...
        assert not op.verify_audit(expect_heads=anchor).ok  # ...but not with the anchor

    def test_operator_actions_are_in_the_chain(self, store: Store) -> None:
        fill(store)
        kinds = [e.kind for e in store.audit_entries(limit=10_000)]
        assert "kill_switch_on" in kinds
        (kill,) = [e for e in store.audit_entries(limit=10_000) if e.kind == "kill_switch_on"]
        assert kill.detail["operator"] == "alice"


class TestSQLiteRowAnchors:
    """SQLite only: PostgreSQL keeps one head row per lane (its commits are not page-bound)."""

    @pytest.fixture
    def sqlite_store(self, tmp_path: Path) -> Iterator[Store]:
        from effectgate.store.sqlite import SQLiteStore

        store = SQLiteStore(str(tmp_path / "ledger.db"))
        yield store
        store.close()

    def test_anchor_in_the_row_is_checked(self, sqlite_store: Store) -> None:
        """Editing the head a journal or receipt recorded in its row is a rewritten head."""
        store = sqlite_store
        op = fill(store)
        sql(
            store,
            "UPDATE operations SET audit_hash = ? WHERE audit_seq = "
            "(SELECT max(audit_seq) FROM operations)",
            "0" * 64,
        )
        sql(store, "DELETE FROM audit_heads")  # only the row anchor is left to say it
        assert [f.problem for f in op.verify_audit().findings] == ["head"]

    def test_hot_path_anchors_in_the_row(self, sqlite_store: Store) -> None:
        """The journal and the receipt leave audit_heads alone (one page less per commit)
        and record their entry in the row; the recorded head is the later of the two."""
        store = sqlite_store
        fill(store)
        conn = store._conn  # type: ignore[attr-defined]
        before = conn.execute("SELECT seq FROM audit_heads").fetchone()
        Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        ).submit("submit_order", "op-anchor", INTENT)
        assert conn.execute("SELECT seq FROM audit_heads").fetchone() == before
        last = store.audit_entries(limit=10_000)[-1]
        assert last.operation_id == "op-anchor"
        assert conn.execute(
            "SELECT audit_seq, audit_hash FROM operations WHERE operation_id = 'op-anchor'"
        ).fetchone() == (last.seq, last.hash)
        assert store.audit_heads() == {0: (last.seq, last.hash)}


class TestEvidenceBundle:
    def test_bundle_verifies_offline_and_carries_the_trail(self, store: Store) -> None:
        op = fill(store)
        bundle = json.loads(json.dumps(op.export_evidence("op-2")))
        result = verify_bundle(bundle)
        assert result.ok and result.checked == len(bundle["entries"])
        proposed = bundle["entries"][0]
        detail = json.loads(proposed["detail_text"])
        # One entry journals the new row's whole path (one transaction, one instant).
        assert detail["path"] == ["proposed", "validated", "submitted"]
        assert detail["state"] == "submitted" and detail["intent"]["quantity"] == "3"
        assert detail["model"] == "example-model" and detail["harness_version"] == "0.1"
        assert detail["context_digest"] == INTENT["context_digest"]
        assert detail["decision"]["policy_version"] == "limit-1"
        states = [
            s
            for e in bundle["entries"]
            for s in json.loads(e["detail_text"]).get(
                "path", [json.loads(e["detail_text"]).get("state")]
            )
        ]
        assert states == ["proposed", "validated", "submitted", "acknowledged"]
        assert bundle["operation"]["venue_id"] and bundle["operation"]["state"] == "acknowledged"

    @pytest.mark.parametrize("tamper", ["edit", "drop_segment", "foreign"])
    def test_tampered_bundle_fails(self, store: Store, tamper: str) -> None:
        op = fill(store)
        bundle = op.export_evidence("op-1")
        if tamper == "edit":
            bundle["entries"][0]["detail_text"] = bundle["entries"][0]["detail_text"].replace(
                "validated", "rejected"
            )
        elif tamper == "drop_segment":
            del bundle["segment"][1]
        else:
            bundle["entries"][0]["operation_id"] = "op-3"
        assert not verify_bundle(bundle).ok

    def test_verify_entries_needs_no_store(self, store: Store) -> None:
        fill(store)
        middle = _grow_one_lane(store)[2]
        entries = store.audit_entries(limit=10_000)
        assert verify_entries(entries).ok
        assert not verify_entries([e for e in entries if e.seq != middle.seq]).ok


def test_state_is_untouched_by_verification(store: Store) -> None:
    op = fill(store)
    before = store.count_by_state()
    op.verify_audit()
    assert store.count_by_state() == before and before[("submit_order", State.ACKNOWLEDGED)] == 6


def test_a_log_that_grew_after_its_heads_were_read_verifies(store: Store) -> None:
    """Verification on a live ledger: entries written after the heads were read are fine."""
    fill(store)
    heads = store.audit_heads()
    store.append_audit("note", {"n": 1}, now=5.0)
    store.append_audit("note", {"n": 2}, now=6.0, scope="default", operation_id="op-1")
    assert verify_entries(store.audit_entries(limit=10_000), heads=heads).ok
