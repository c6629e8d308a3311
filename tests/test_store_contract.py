"""The store contract, written against the Store protocol and run on every store engine."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from effectgate._core.states import State
from effectgate._evidence.audit import verify_entries
from effectgate.errors import IdempotencyConflict, InvalidTransition, OperationNotFound, StaleState
from effectgate.store.base import Move, NewOperation
from effectgate.store.roles import Store

P, V, S, A = State.PROPOSED, State.VALIDATED, State.SUBMITTED, State.ACKNOWLEDGED
AUTO = [P, V, S]


def new(
    op: str = "op-1", fp: str = "f" * 64, scope: str = "default", intent: dict | None = None
) -> NewOperation:
    intent = intent if intent is not None else {"action": "submit_order", "quantity": "4"}
    return NewOperation(
        scope=scope,
        operation_id=op,
        action="submit_order",
        fingerprint=fp,
        intent=intent,
        effect={"action": "submit_order", "quantity": "4"},
        tier="validate",
        reason="within limits",
        policy_version="t-1",
    )


class TestIdentity:
    def test_first_insert_creates_and_retry_returns_existing(self, store: Store) -> None:
        """Invariant 1: one row per (scope, operation id); a retry gets the same row."""
        row, created = store.insert_operation(new(), AUTO, now=1.0)
        again, created_again = store.insert_operation(new(), AUTO, now=2.0)
        assert created and not created_again
        assert again.state is S and again.version == row.version and again.created_at == 1.0

    def test_changed_payload_under_reused_id_is_refused(self, store: Store) -> None:
        """Invariant 2: same id, different fingerprint raises; the row is untouched."""
        store.insert_operation(new(), [P, V], now=1.0)
        with pytest.raises(IdempotencyConflict) as info:
            store.insert_operation(new(fp="e" * 64), AUTO, now=2.0)
        assert info.value.stored_fingerprint == "f" * 64
        row = store.get("default", "op-1")
        assert row is not None and row.state is V and row.fingerprint == "f" * 64
        kinds = [e.kind for e in store.iter_audit()]
        assert kinds[-1] == "idempotency_conflict"

    def test_same_id_in_two_scopes_is_two_operations(self, store: Store) -> None:
        """Invariant 1 per scope: operation ids are unique per tenant scope."""
        _, a = store.insert_operation(new(scope="tenant-a"), AUTO, now=1.0)
        _, b = store.insert_operation(new(scope="tenant-b", fp="e" * 64), AUTO, now=1.0)
        assert a and b

    def test_intent_is_stored_by_value(self, store: Store) -> None:
        """A later mutation of the caller's dict cannot change what the ledger says."""
        intent = {"action": "submit_order", "quantity": "4"}
        store.insert_operation(new(intent=intent), AUTO, now=1.0)
        intent["quantity"] = "400"
        row = store.get("default", "op-1")
        assert row is not None and row.intent["quantity"] == "4"

    def test_concurrent_inserts_from_many_handles_create_one_row(self, store_factory) -> None:
        """Invariant 1 across connections: the unique index, not a read-then-write, decides."""
        handles = [store_factory() for _ in range(8)]
        barrier = threading.Barrier(len(handles))

        def attempt(h: Store) -> bool:
            barrier.wait()
            return h.insert_operation(new(), AUTO, now=1.0)[1]

        with ThreadPoolExecutor(len(handles)) as pool:
            created = list(pool.map(attempt, handles))
        assert created.count(True) == 1


class TestTransitions:
    def test_compare_and_set_moves_once(self, store_factory) -> None:
        """Invariant 1: of many racers moving validated -> submitted, exactly one wins."""
        first = store_factory()
        first.insert_operation(new(), [P, V], now=1.0)
        handles = [first] + [store_factory() for _ in range(5)]
        barrier = threading.Barrier(len(handles))

        def attempt(h: Store) -> str:
            barrier.wait()
            try:
                h.transition("default", "op-1", V, S, now=2.0)
                return "won"
            except StaleState:
                return "stale"

        with ThreadPoolExecutor(len(handles)) as pool:
            outcomes = list(pool.map(attempt, handles))
        assert outcomes.count("won") == 1 and outcomes.count("stale") == len(handles) - 1
        row = first.get("default", "op-1")
        assert row is not None and row.state is S and row.submitted_at == 2.0

    def test_transition_outside_the_table_raises(self, store: Store) -> None:
        """Guards raise (never assert): submitted can't go back to validated."""
        store.insert_operation(new(), AUTO, now=1.0)
        with pytest.raises(InvalidTransition):
            store.transition("default", "op-1", S, V, now=2.0)
        with pytest.raises(InvalidTransition):
            store.transition("default", "op-1", S, S, now=2.0)

    def test_stale_expected_state_raises(self, store: Store) -> None:
        store.insert_operation(new(), AUTO, now=1.0)
        with pytest.raises(StaleState):
            store.transition("default", "op-1", V, S, now=2.0)

    def test_missing_row_raises(self, store: Store) -> None:
        with pytest.raises(OperationNotFound):
            store.transition("default", "nope", V, S, now=2.0)

    def test_terminal_rows_are_inert(self, store: Store) -> None:
        """A terminal row accepts no transition at all."""
        store.insert_operation(new(), [P, State.REJECTED], now=1.0)
        for target in State:
            with pytest.raises((InvalidTransition, StaleState)):
                store.transition("default", "op-1", State.REJECTED, target, now=2.0)

    def test_path_must_follow_the_table(self, store: Store) -> None:
        with pytest.raises(InvalidTransition):
            store.insert_operation(new(), [V, S], now=1.0)
        with pytest.raises(InvalidTransition):
            store.insert_operation(new(), [P, S], now=1.0)
        assert store.get("default", "op-1") is None

    def test_receipt_records_venue_id_and_audit(self, store: Store) -> None:
        """Invariant 8 (basis): every transition leaves an audit line in the same transaction."""
        store.insert_operation(new(), AUTO, now=1.0)
        row = store.transition("default", "op-1", S, A, now=2.0, venue_id="V-1")
        assert row.state is A and row.venue_id == "V-1" and row.version == 2
        # A new row's path is one entry (one transaction); each later move is its own.
        trail = [
            s
            for e in store.iter_audit()
            if e.kind == "transition"
            for s in e.detail.get("path", [e.detail["state"]])
        ]
        assert trail == ["proposed", "validated", "submitted", "acknowledged"]


def _uncertain(store: Store, n: int, prefix: str = "op") -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    for i, op in enumerate(ids):
        store.insert_operation(new(op=op, fp=f"{i:064d}"), AUTO, now=1.0)
    return ids


def _transitions(store: Store) -> list:
    return [
        e for e in store.iter_audit() if e.kind == "transition" and e.detail.get("from") is not None
    ]


class TestTransitionMany:
    AUD = {"by": "reconciler", "owner": "t", "note": "confirmed"}

    def test_applying_and_stale_moves_in_one_call(self, store: Store) -> None:
        """Each move is its own compare-and-set: stale or missing rows are skipped, not errors."""
        ids = _uncertain(store, 5)
        store.transition("default", ids[1], S, A, now=2.0, venue_id="V-early")  # settled first
        moves = [
            Move("default", ids[0], S, A, venue_id="V-0", audit=self.AUD),
            Move("default", ids[1], S, State.FAILED, detail="absent"),  # stale
            Move("default", "nope", S, A, venue_id="V-x"),  # no such row
            Move("default", ids[2], S, State.FAILED, detail="absent"),
            Move("default", ids[3], S, State.QUARANTINED, detail="2 records"),
            Move("default", ids[3], S, A, venue_id="V-3"),  # stale after the move above
        ]
        assert store.transition_many(moves, now=3.0) == [True, False, False, True, True, False]
        rows = {op: store.get("default", op) for op in ids}
        assert rows[ids[0]].state is A and rows[ids[0]].venue_id == "V-0"  # type: ignore[union-attr]
        assert rows[ids[0]].version == 2 and rows[ids[0]].updated_at == 3.0  # type: ignore[union-attr]
        assert rows[ids[1]].state is A and rows[ids[1]].venue_id == "V-early"  # type: ignore[union-attr]
        assert rows[ids[2]].state is State.FAILED and rows[ids[2]].detail == "absent"  # type: ignore[union-attr]
        assert rows[ids[3]].state is State.QUARANTINED  # type: ignore[union-attr]
        assert rows[ids[4]].state is S  # type: ignore[union-attr]
        assert store.get("default", "nope") is None
        moved = [(e.operation_id, e.detail["state"]) for e in _transitions(store)]
        assert sorted(moved) == sorted(
            [
                (ids[1], "acknowledged"),
                (ids[0], "acknowledged"),
                (ids[2], "failed"),
                (ids[3], "quarantined"),
            ]
        )
        assert store.transition_many([], now=4.0) == []

    def test_same_row_and_audit_as_single_transitions(self, store: Store) -> None:
        """A batch writes exactly what one transition() per move would (row and audit line)."""
        ids = _uncertain(store, 4)
        store.transition("default", ids[0], S, A, now=3.0, venue_id="V", audit=self.AUD)
        store.transition("default", ids[1], S, State.FAILED, now=3.0, detail="gone", audit=self.AUD)
        assert store.transition_many(
            [
                Move("default", ids[2], S, A, venue_id="V", audit=self.AUD),
                Move("default", ids[3], S, State.FAILED, detail="gone", audit=self.AUD),
            ],
            now=3.0,
        ) == [True, True]

        def view(op: str) -> tuple:
            row = store.get("default", op)
            assert row is not None
            return (
                row.state,
                row.venue_id,
                row.detail,
                row.version,
                row.updated_at,
                row.submitted_at,
            )

        assert view(ids[0]) == view(ids[2]) and view(ids[1]) == view(ids[3])
        detail = {e.operation_id: dict(e.detail) for e in _transitions(store)}
        assert detail[ids[0]] == detail[ids[2]] and detail[ids[1]] == detail[ids[3]]
        # The lease is released by the move, as transition() releases it.
        assert store.lease_uncertain("x", now=5.0, lease_seconds=60, limit=10) == []

    def test_invalid_move_refused_before_anything_is_written(self, store: Store) -> None:
        ids = _uncertain(store, 3)
        before = len(list(store.iter_audit()))
        with pytest.raises(InvalidTransition):
            store.transition_many(
                [Move("default", ids[0], S, A, venue_id="V"), Move("default", ids[1], S, V)],
                now=2.0,
            )
        with pytest.raises(ValueError):  # a dispatch reads the controls: transition() only
            store.transition_many(
                [Move("default", ids[2], S, A), Move("default", ids[2], V, S)], now=2.0
            )
        assert all(store.get("default", op).state is S for op in ids)  # type: ignore[union-attr]
        assert len(list(store.iter_audit())) == before

    def test_audit_chain_verifies_after_batches(self, store: Store) -> None:
        """Applied moves land in their rows' lanes, chained: the whole log still verifies."""
        ids = _uncertain(store, 60)
        first = store.transition_many(
            [
                Move(
                    "default",
                    op,
                    S,
                    A if i % 2 else State.FAILED,
                    venue_id=f"V-{i}" if i % 2 else None,
                    audit=self.AUD,
                )
                for i, op in enumerate(ids[:40])
            ],
            now=2.0,
        )
        again = store.transition_many(
            [Move("default", op, S, A, venue_id="V") for op in ids[30:]], now=3.0
        )
        assert first == [True] * 40 and again == [False] * 10 + [True] * 20
        entries = store.audit_entries(limit=100_000)
        result = verify_entries(entries, heads=store.audit_heads())
        assert result.ok, result
        for op in ids:
            trail = [e for e in entries if e.operation_id == op]
            assert len({e.lane for e in trail}) == 1  # an operation's trail stays in one lane

    def test_concurrent_batches_apply_each_row_once(self, store_factory) -> None:
        """Handles racing over the same rows, in different orders: each row moves once, and
        no batch deadlocks against another."""
        first = store_factory()
        ids = _uncertain(first, 40)
        handles = [first] + [store_factory() for _ in range(3)]
        barrier = threading.Barrier(len(handles))

        def attempt(k: int) -> list[bool]:
            order = ids if k % 2 == 0 else list(reversed(ids))
            barrier.wait()
            return handles[k].transition_many(
                [Move("default", op, S, A, venue_id=f"V-{k}") for op in order], now=2.0
            )

        with ThreadPoolExecutor(len(handles)) as pool:
            outcomes = list(pool.map(attempt, range(len(handles))))
        assert sum(map(sum, outcomes)) == len(ids)
        counts = Counter(e.operation_id for e in _transitions(first))
        assert counts == Counter(ids)
        assert verify_entries(first.audit_entries(limit=100_000), heads=first.audit_heads()).ok


class TestReconcilerSupport:
    def test_page_entries_in_key_order_with_filter(self, store: Store) -> None:
        for i in (3, 1, 2):
            store.insert_operation(new(op=f"op-{i}", fp=str(i) * 64), AUTO, now=1.0)
        first = store.page_entries(None, 2, ["submit_order"])
        rest = store.page_entries(first[-1].op_key, 2, ["submit_order"])
        assert [e.op_key for e in first + rest] == ["default:op-1", "default:op-2", "default:op-3"]
        assert store.page_entries(None, 10, ["cancel_order"]) == []

    def test_leases_split_uncertain_rows_between_replicas(self, store_factory) -> None:
        """Two replicas never lease the same uncertain row while the lease lives."""
        a, b = store_factory(), store_factory()
        for i in range(10):
            a.insert_operation(new(op=f"op-{i}", fp=f"{i:064d}"), AUTO, now=1.0)
        got_a = a.lease_uncertain("a", now=2.0, lease_seconds=60, limit=6)
        got_b = b.lease_uncertain("b", now=2.0, lease_seconds=60, limit=6)
        keys_a, keys_b = {e.op_key for e in got_a}, {e.op_key for e in got_b}
        assert len(keys_a) == 6 and len(keys_b) == 4 and not keys_a & keys_b
        # After the lease expires, the rows are claimable again.
        assert len(b.lease_uncertain("b", now=100.0, lease_seconds=60, limit=20)) == 10

    def test_divergence_recorded_once(self, store: Store) -> None:
        """Divergences alarm once: the second sighting is not new."""
        assert store.record_divergence("orphan", "default:x", ["V-1"], None, now=1.0)
        assert not store.record_divergence("orphan", "default:x", ["V-1"], None, now=2.0)
        assert [d.kind for d in store.list_divergences()] == ["orphan"]

    def test_sweep_lock_is_exclusive(self, store_factory) -> None:
        a, b = store_factory(), store_factory()
        with a.sweep_lock("a", now=1.0, ttl=60) as got_a:
            with b.sweep_lock("b", now=1.0, ttl=60) as got_b:
                assert got_a and not got_b
        with b.sweep_lock("b", now=2.0, ttl=60) as got_b:
            assert got_b


class TestHousekeeping:
    def test_migrate_is_idempotent(self, store: Store) -> None:
        store.migrate()
        store.migrate()
        store.insert_operation(new(), AUTO, now=1.0)

    def test_count_and_list(self, store: Store) -> None:
        store.insert_operation(new(op="a"), AUTO, now=1.0)
        store.insert_operation(new(op="b", fp="e" * 64), [P, State.REJECTED], now=1.0)
        assert store.count_by_state() == {
            ("submit_order", "submitted"): 1,
            ("submit_order", "rejected"): 1,
        }
        assert [r.operation_id for r in store.list_operations(state=S)] == ["a"]

    def test_audit_is_ordered_and_complete(self, store: Store) -> None:
        store.append_audit("intent_refused", {"field": "quantity"}, now=1.0)
        store.append_audit("intent_refused", {"field": "side"}, now=2.0)
        events = list(store.iter_audit())
        assert [e.detail["field"] for e in events] == ["quantity", "side"]
        assert events[0].seq < events[1].seq


class TestAggregateReads:
    """Metrics and the operator API read aggregates and scoped rows in SQL, on every store."""

    def test_oldest_submitted_is_the_oldest_even_behind_a_newer_backlog(self, store: Store) -> None:
        """Maintenance rule (uncertain rows past the settlement window): the stuck row is the
        oldest one, so a backlog of newer uncertain rows must never hide it."""
        assert store.oldest_submitted_at() is None
        store.insert_operation(new(op="stuck"), AUTO, now=5.0)
        for i in range(30):
            store.insert_operation(new(op=f"new-{i}", fp=f"{i:064d}"), AUTO, now=100.0 + i)
        store.insert_operation(new(op="done", fp="d" * 64), AUTO, now=1.0)
        store.transition("default", "done", S, A, now=2.0, venue_id="V-1")
        assert store.oldest_submitted_at() == 5.0

    def test_count_divergences_by_kind(self, store: Store) -> None:
        """Invariant 5 in the metrics: orphans and duplicate effects are counted separately."""
        assert store.count_divergences() == {}
        store.record_divergence("orphan", "a:x", ["V-1"], None, now=1.0)
        store.record_divergence("orphan", "a:y", ["V-2"], None, now=1.0)
        store.record_divergence("duplicate-effect", "a:z", ["V-3", "V-4"], "acknowledged", now=1.0)
        assert store.count_divergences() == {"orphan": 2, "duplicate-effect": 1}

    def test_divergences_of_a_scope_are_filtered_before_the_limit(self, store: Store) -> None:
        """Tenant scopes: a scoped operator sees its own divergences even when other tenants'
        fill the first pages; `_` and `-` in a scope are literal, not wildcards."""
        for i in range(20):
            store.record_divergence("orphan", f"other:g{i}", [f"V-{i}"], None, now=1.0)
        for key in ("a_b:one", "a-b:x", "axb:x", "a_bc:x", "a_b0:x", "a_:x"):
            store.record_divergence("orphan", key, ["V"], None, now=2.0)
        mine = store.list_divergences_in("a_b", limit=5)
        assert [d.op_key for d in mine] == ["a_b:one"]
        assert len(store.list_divergences_in(None, limit=1000)) == 26
        with pytest.raises(Exception, match="scope"):
            store.list_divergences_in("a%")

    def test_held_rows_are_counted_and_listed_by_scope(self, store: Store) -> None:
        """Invariant 7: rows a kill switch holds stay validated, are listed and counted."""
        from effectgate._core.controls import DispatchGuard

        store.set_kill("submit_order", True, operator="ops", reason="drill", now=1.0)
        for scope in ("alpha", "beta"):
            row, _ = store.insert_operation(
                new(op="h", scope=scope), AUTO, now=2.0, guard=DispatchGuard(action="submit_order")
            )
            assert row.state is V and (row.detail or "").startswith("held:")
        store.insert_operation(new(op="free", fp="e" * 64), [P, V], now=2.0)
        assert store.count_held() == {"submit_order": 2}
        assert [r.op_key for r in store.list_held(scope="alpha")] == ["alpha:h"]
        assert len(store.list_held(action="submit_order")) == 2
        assert store.list_held(action="cancel_order") == []

    def test_alerts_of_a_scope(self, store: Store) -> None:
        from effectgate._core.controls import Alert

        for subject in ("alpha:op-1", "alpha:op-2|V-1", "beta:op-1", "submit_order@1.0"):
            store.record_alert(Alert("k", subject, None, "m", {}, 1.0))
        assert [a.subject for a in store.list_alerts_in("alpha")] == [
            "alpha:op-1",
            "alpha:op-2|V-1",
        ]
        assert len(store.list_alerts_in(None)) == 4

    def test_one_operations_audit_trail_by_key(self, store: Store) -> None:
        """Invariant 8: an operation's trail is read by (scope, operation_id), in seq order."""
        store.insert_operation(new(op="mine"), AUTO, now=1.0)
        store.insert_operation(new(op="other", fp="e" * 64), AUTO, now=1.0)
        store.transition("default", "mine", S, A, now=2.0, venue_id="V-1")
        trail = store.audit_entries(scope="default", operation_id="mine")
        assert trail and all(e.operation_id == "mine" for e in trail)
        assert [e.seq for e in trail] == sorted(e.seq for e in trail)
        assert trail[-1].detail["state"] == "acknowledged"
