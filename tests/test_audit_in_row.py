"""An operation's audit trail when its row names the hot path's entries (``in_row``).

SQLite writes the journal's entry and the move out of ``submitted`` with ``in_row`` set and
names them in the operations row (``journal_seq``, ``receipt_seq``), so they skip the
per-operation index; PostgreSQL writes every entry into the index. Readers must find the same
trail either way. Invariant 8 (the audit log is append-only and tamper-evident) relies on
every entry staying reachable and in order.
"""

from __future__ import annotations

import pytest

from effectgate._core.states import State
from effectgate._evidence.audit import verify_entries, verify_store
from effectgate.errors import StaleState
from effectgate.store.base import Move, NewOperation
from effectgate.store.roles import Store
from effectgate.store.sqlite import SQLiteStore
from test_audit_chain import sql

P, V, S, A, F = State.PROPOSED, State.VALIDATED, State.SUBMITTED, State.ACKNOWLEDGED, State.FAILED
AUTO = [P, V, S]

# Entries flagged in_row that their row does not name: unreachable by operation if any existed.
_ORPHANS = (
    "SELECT count(*) FROM audit_log a WHERE a.in_row IS TRUE AND NOT EXISTS (SELECT 1 FROM "
    "operations o "
    "WHERE o.scope = a.scope AND o.operation_id = a.operation_id "
    "AND a.seq IN (o.journal_seq, o.receipt_seq))"
)


def new(op: str, fp: str = "f" * 64) -> NewOperation:
    return NewOperation(
        scope="default",
        operation_id=op,
        action="submit_order",
        fingerprint=fp,
        intent={"action": "submit_order", "quantity": "4"},
        effect={"action": "submit_order", "quantity": "4"},
        tier="validate",
        reason="within limits",
        policy_version="t-1",
    )


def kinds(store: Store, op: str, **filters: int) -> list[tuple[str, object]]:
    return [
        (e.kind, e.detail.get("state") or e.detail.get("note"))
        for e in store.audit_entries(scope="default", operation_id=op, **filters)
    ]


def orphans(store: Store) -> int:
    return int(store._rows(_ORPHANS)[0][0])  # type: ignore[attr-defined]


class TestTrail:
    def test_journal_receipt_and_other_entries_come_back_in_order(self, store: Store) -> None:
        """Invariant 8: every entry of an operation is found by its key, in seq order, whether
        the index or the row leads to it."""
        store.insert_operation(new("mine"), AUTO, now=1.0)
        store.append_audit(
            "note", {"note": "between"}, now=1.5, scope="default", operation_id="mine"
        )
        store.insert_operation(new("other", "e" * 64), AUTO, now=1.6)
        store.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        store.append_audit("note", {"note": "after"}, now=3.0, scope="default", operation_id="mine")
        assert kinds(store, "mine") == [
            ("transition", "submitted"),
            ("note", "between"),
            ("transition", "acknowledged"),
            ("note", "after"),
        ]
        trail = store.audit_entries(scope="default", operation_id="mine")
        assert [e.seq for e in trail] == sorted(e.seq for e in trail)
        assert all(e.operation_id == "mine" for e in trail)
        verify_entries(store.audit_entries(limit=100))
        assert orphans(store) == 0

    def test_filters_and_limit_apply_to_both_halves(self, store: Store) -> None:
        """Invariant 8: seq bounds, lane and limit cut the merged trail, not each half."""
        store.insert_operation(new("mine"), AUTO, now=1.0)
        store.append_audit("note", {"note": "n1"}, now=1.5, scope="default", operation_id="mine")
        store.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        seqs = [e.seq for e in store.audit_entries(scope="default", operation_id="mine")]
        assert len(seqs) == 3
        assert kinds(store, "mine", limit=2) == [("transition", "submitted"), ("note", "n1")]
        assert [k for k, _ in kinds(store, "mine", after_seq=seqs[0])] == ["note", "transition"]
        assert kinds(store, "mine", until_seq=seqs[0]) == [("transition", "submitted")]
        assert kinds(store, "mine", lane=1) == []

    def test_failed_and_stale_moves_leave_no_unreachable_entry(self, store: Store) -> None:
        """Invariant 8: a move that does not happen leaves no entry the row cannot name."""
        store.insert_operation(new("a"), AUTO, now=1.0)
        store.insert_operation(new("b", "e" * 64), AUTO, now=1.0)
        store.transition("default", "a", S, F, now=2.0, detail="venue refused")
        with pytest.raises(StaleState):
            store.transition("default", "a", S, A, now=3.0, venue_id="V-9")
        store.transition_many(
            [
                Move("default", "a", S, A, venue_id="V-2"),  # stale: a is failed
                Move("default", "b", S, A, venue_id="V-3"),
            ],
            now=4.0,
        )
        assert [s for _, s in kinds(store, "a")] == ["submitted", "failed"]
        assert [s for _, s in kinds(store, "b")] == ["submitted", "acknowledged"]
        assert orphans(store) == 0


class TestTamperingIsReported:
    def test_an_entry_hidden_behind_in_row_fails_verification(self, store: Store) -> None:
        """Invariant 8: ``in_row`` is outside the entries' digests; marking an entry that no
        row names would hide it from its operation's trail, so verification reports it."""
        store.insert_operation(new("mine"), AUTO, now=1.0)
        store.append_audit("note", {"note": "n"}, now=1.5, scope="default", operation_id="mine")
        (note,) = [e for e in store.audit_entries(limit=100) if e.kind == "note"]
        assert verify_store(store).ok
        sql(store, "UPDATE audit_log SET in_row = ? WHERE seq = ?", True, note.seq)
        assert ("note", "n") not in kinds(store, "mine")  # what the edit would hide
        result = verify_store(store)
        assert not result.ok
        assert [(f.seq, f.problem) for f in result.findings] == [(note.seq, "anchor")]

    def test_a_null_flag_hides_no_entry(self, store: Store) -> None:
        """Invariant 8: with the column's NOT NULL dropped (a schema edit) and the flag set to
        NULL on an indexed entry and on one the row names, every entry is still in the trail:
        the readers split on ``in_row IS TRUE``, which no value makes neither true nor false."""
        store.insert_operation(new("mine"), AUTO, now=1.0)
        store.append_audit("note", {"note": "n"}, now=1.5, scope="default", operation_id="mine")
        store.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        before = kinds(store, "mine")
        assert [k for k, _ in before] == ["transition", "note", "transition"]
        seqs = [e.seq for e in store.audit_entries(scope="default", operation_id="mine")]
        reopened: SQLiteStore | None = None
        if isinstance(store, SQLiteStore):
            # SQLite cannot drop NOT NULL in place: the attacker rewrites the schema text.
            conn = store._conn
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = replace(sql, 'in_row INTEGER NOT NULL DEFAULT 0', "
                "'in_row INTEGER DEFAULT 0') WHERE name = 'audit_log'"
            )
            conn.execute("PRAGMA writable_schema = OFF")
            store.close()
            store = reopened = SQLiteStore(store.path)
        else:
            sql(store, "ALTER TABLE audit_log ALTER COLUMN in_row DROP NOT NULL")
        try:
            for seq in (seqs[1], seqs[2]):  # the note (indexed), the receipt (named by the row)
                sql(store, "UPDATE audit_log SET in_row = NULL WHERE seq = ?", seq)
            nulls = store._rows("SELECT count(*) FROM audit_log WHERE in_row IS NULL")  # type: ignore[attr-defined]
            assert int(nulls[0][0]) == 2
            assert kinds(store, "mine") == before
            assert verify_store(store).ok  # nothing hidden, so nothing to report
        finally:
            if reopened is not None:
                reopened.close()


class TestIndexPerDialect:
    def test_the_index_leaves_out_only_what_rows_name(self, store: Store) -> None:
        """SQLite's per-operation index is partial (the entries rows name are left out);
        PostgreSQL names no entry in its row and keeps the full index (rebuilding it would hold
        the table's lock for nothing); the trail is the same on both."""
        store.insert_operation(new("mine"), AUTO, now=1.0)
        store.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        rows = store._rows  # type: ignore[attr-defined]
        flagged = int(rows("SELECT count(*) FROM audit_log WHERE in_row IS TRUE")[0][0])
        if isinstance(store, SQLiteStore):
            (ddl,) = rows("SELECT sql FROM sqlite_master WHERE name = 'audit_by_operation'")
            assert str(ddl[0]).strip().endswith("WHERE in_row IS NOT TRUE")
            assert flagged == 2
        else:
            (ddl,) = rows(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_by_operation' "
                "AND schemaname = current_schema()"
            )
            assert " WHERE " not in str(ddl[0])
            assert flagged == 0
        assert [s for _, s in kinds(store, "mine")] == ["submitted", "acknowledged"]


class TestSQLiteRowEntries:
    @pytest.fixture
    def sqlite(self, tmp_path: object) -> SQLiteStore:
        s = SQLiteStore(f"{tmp_path}/ledger.db")
        yield s  # type: ignore[misc]
        s.close()

    def test_hot_path_entries_are_named_by_the_row_not_indexed(self, sqlite: SQLiteStore) -> None:
        """The journal and receipt entries are in_row and the row holds their seqs; an entry
        of another kind is not."""
        sqlite.insert_operation(new("mine"), AUTO, now=1.0)
        sqlite.append_audit("note", {"note": "x"}, now=1.5, scope="default", operation_id="mine")
        sqlite.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        flags = sqlite._conn.execute(
            "SELECT seq, kind, in_row FROM audit_log ORDER BY seq"
        ).fetchall()
        assert [(k, r) for _, k, r in flags] == [("transition", 1), ("note", 0), ("transition", 1)]
        named = sqlite._conn.execute(
            "SELECT journal_seq, receipt_seq FROM operations WHERE operation_id = 'mine'"
        ).fetchone()
        assert named == (flags[0][0], flags[2][0])
        indexed = sqlite._conn.execute(
            "SELECT count(*) FROM audit_log INDEXED BY audit_by_operation "
            "WHERE scope = 'default' AND operation_id = 'mine' AND in_row IS NOT TRUE"
        ).fetchone()[0]
        assert indexed == 1

    def test_an_entry_the_row_cannot_name_goes_to_the_index(self, sqlite: SQLiteStore) -> None:
        """A row that already names an entry for its move out of submitted keeps it; the new
        entry is then written for the index, and both stay reachable."""
        sqlite.insert_operation(new("mine"), AUTO, now=1.0)
        first = sqlite._conn.execute("SELECT journal_seq FROM operations").fetchone()[0]
        # Not reachable through the API (nothing re-enters submitted): set by hand.
        sqlite._conn.execute("UPDATE operations SET receipt_seq = ?", (first,))
        sqlite.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        flags = sqlite._conn.execute("SELECT in_row FROM audit_log ORDER BY seq").fetchall()
        assert flags == [(1,), (0,)]
        assert [s for _, s in kinds(sqlite, "mine")] == ["submitted", "acknowledged"]
        assert orphans(sqlite) == 0

    def test_a_row_that_stops_naming_its_entry_fails_verification(
        self, sqlite: SQLiteStore
    ) -> None:
        """Invariant 8: editing the row's seqs would hide the journal entry from the trail;
        verification names the entry."""
        sqlite.insert_operation(new("mine"), AUTO, now=1.0)
        sqlite.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        journal = sqlite._conn.execute("SELECT journal_seq FROM operations").fetchone()[0]
        assert verify_store(sqlite).ok
        sqlite._conn.execute("UPDATE operations SET journal_seq = NULL")
        assert [s for _, s in kinds(sqlite, "mine")] == ["acknowledged"]
        result = verify_store(sqlite)
        assert [(f.seq, f.problem) for f in result.findings] == [(journal, "anchor")]
