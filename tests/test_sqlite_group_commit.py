"""Group commit on SQLite: threads sharing a store share commits, never durability.

Invariant 3 (journal before dispatch) is what is at stake: a body's caller must not get its
result back before the commit covering that body, a failed body must not take the others down
(or be committed with them), a failed COMMIT must fail every body it covered, and no thread may
read another's uncommitted writes. The orchestrated tests drive ``TxGate`` directly on a scratch
table; the last one runs the whole gate from many threads.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._evidence.audit import verify_store
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import CommitOutcomeUnknown
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store._group_commit import TxGate
from effectgate.store._sqlite_tx import SQLiteEngine
from effectgate.store.sqlite import SQLiteStore


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[TxGate]:
    conn = sqlite3.connect(tmp_path / "g.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE t (k TEXT PRIMARY KEY, parent INTEGER REFERENCES parent (id) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )
    conn.execute("INSERT INTO parent VALUES (1)")
    commits: list[str] = []
    conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    reader = sqlite3.connect(tmp_path / "g.db", isolation_level=None, check_same_thread=False)
    tx = TxGate(SQLiteEngine(), conn, reader)
    tx.commits = commits  # type: ignore[attr-defined]
    yield tx
    tx.close()


def rows(tx: TxGate) -> set[str]:
    with tx.read() as conn:
        return {r[0] for r in conn.execute("SELECT k FROM t")}


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


def run_group(
    tx: TxGate, bodies: list[Callable[[sqlite3.Connection], None]]
) -> list[BaseException | None]:
    """Run ``bodies`` as one group: the first holds the turn until all others are queued."""
    outcomes: list[BaseException | None] = [None] * len(bodies)

    def worker(i: int) -> None:
        try:
            with tx.transaction() as conn:
                if i == 0:
                    wait_for(lambda: tx._queued == len(bodies) - 1)
                bodies[i](conn)
        except BaseException as exc:  # recorded for the assertions
            outcomes[i] = exc

    first = threading.Thread(target=worker, args=(0,))
    first.start()
    wait_for(lambda: tx._owner is not None)
    others = [threading.Thread(target=worker, args=(i,)) for i in range(1, len(bodies))]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(10)
    return outcomes


def hold_a_body(gate: TxGate, key: str) -> tuple[threading.Thread, threading.Event]:
    """A thread inside a body that has inserted ``key``, held there until the event is set."""
    release = threading.Event()

    def holder() -> None:
        with gate.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (?, 1)", (key,))
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    wait_for(lambda: gate._owner is not None)
    return thread, release


def insert(key: str, parent: int = 1) -> Callable[[sqlite3.Connection], None]:
    return lambda conn: conn.execute("INSERT INTO t VALUES (?, ?)", (key, parent)) and None


class TestGroupCommit:
    def test_queued_bodies_share_one_commit(self, gate: TxGate) -> None:
        outcomes = run_group(gate, [insert("a"), insert("b"), insert("c")])
        assert outcomes == [None, None, None]
        assert rows(gate) == {"a", "b", "c"}
        assert len(gate.commits) == 1  # type: ignore[attr-defined]

    def test_a_failed_body_is_undone_alone(self, gate: TxGate) -> None:
        def boom(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES ('b', 1)")
            raise ValueError("the body gave up")

        outcomes = run_group(gate, [insert("a"), boom, insert("c")])
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], ValueError)
        assert rows(gate) == {"a", "c"}

    def test_a_failed_commit_fails_every_body_it_covered(self, gate: TxGate) -> None:
        # A deferred foreign key makes COMMIT itself fail; nothing of the group is written.
        outcomes = run_group(gate, [insert("a"), insert("b", parent=99), insert("c")])
        assert all(isinstance(o, CommitOutcomeUnknown) for o in outcomes), outcomes
        assert rows(gate) == set()
        outcomes = run_group(gate, [insert("d"), insert("e")])  # and the gate recovers
        assert outcomes == [None, None] and rows(gate) == {"d", "e"}

    def test_no_result_before_the_commit(self, gate: TxGate) -> None:
        """A body whose caller returned is durable: seen by a fresh connection."""
        path = gate.conn.execute("PRAGMA database_list").fetchone()[2]
        seen: dict[str, bool] = {}

        def worker(key: str) -> None:
            with gate.transaction() as conn:
                conn.execute("INSERT INTO t VALUES (?, 1)", (key,))
            other = sqlite3.connect(path)
            seen[key] = other.execute("SELECT 1 FROM t WHERE k = ?", (key,)).fetchone() is not None
            other.close()

        threads = [threading.Thread(target=worker, args=(f"k{i}",)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert seen == {f"k{i}": True for i in range(16)}

    def test_readers_never_see_uncommitted_writes_nor_wait(self, gate: TxGate) -> None:
        w, release = hold_a_body(gate, "w")
        assert rows(gate) == set()  # read beside the open body: committed rows only
        release.set()
        w.join(5)
        assert rows(gate) == {"w"}

    def test_polling_readers_do_not_starve_a_writer(self, gate: TxGate) -> None:
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                rows(gate)

        readers = [threading.Thread(target=poll) for _ in range(3)]
        for r in readers:
            r.start()
        try:
            start = time.monotonic()
            for i in range(50):
                with gate.transaction() as conn:
                    conn.execute("INSERT INTO t VALUES (?, 1)", (f"k{i}",))
            assert time.monotonic() - start < 5
        finally:
            stop.set()
            for r in readers:
                r.join(5)
        assert len(rows(gate)) == 50

    def test_a_transaction_sqlite_rolled_back_itself_is_a_store_error(self, gate: TxGate) -> None:
        from effectgate.errors import StoreError

        gate.conn.execute(
            "CREATE TRIGGER undo BEFORE INSERT ON t WHEN NEW.k = 'bad' "
            "BEGIN SELECT RAISE(ROLLBACK, 'refused'); END"
        )

        def bad(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES ('bad', 1)")

        outcomes = run_group(gate, [insert("a"), bad, insert("c")])
        # The trigger rolled the whole transaction back: the bodies in it ("a", "bad") fail
        # as store errors; "c" runs after, in a transaction of its own.
        assert isinstance(outcomes[0], StoreError) and isinstance(outcomes[1], StoreError)
        assert "nothing written" in str(outcomes[0]) and outcomes[2] is None
        assert rows(gate) == {"c"}

    def test_an_interrupted_waiter_does_not_wedge_the_gate(self, gate: TxGate) -> None:
        """Ctrl-C landing in a thread queued for the turn: the queue count is restored, so
        the body running meanwhile still commits (it would otherwise wait for a ghost)."""
        h, release = hold_a_body(gate, "a")
        real_wait = gate._turn.wait

        def interrupted(timeout: float | None = None) -> bool:
            raise KeyboardInterrupt

        gate._turn.wait = interrupted  # type: ignore[method-assign]
        caught: list[str] = []

        def victim() -> None:
            try:
                with gate.transaction():
                    pass
            except KeyboardInterrupt:
                caught.append("interrupted")

        v = threading.Thread(target=victim)
        v.start()
        v.join(5)
        gate._turn.wait = real_wait  # type: ignore[method-assign]
        release.set()
        h.join(5)
        assert caught == ["interrupted"] and not h.is_alive() and gate._queued == 0
        assert run_group(gate, [insert("b")]) == [None]
        assert rows(gate) == {"a", "b"}

    def test_a_waiter_interrupted_after_the_hand_over_does_not_orphan_the_group(
        self, gate: TxGate
    ) -> None:
        """Ctrl-C lands in the thread the turn was just handed to: the group still commits
        (a body waiting for it takes the commit over) and the other queued thread runs."""
        h, release = hold_a_body(gate, "a")
        real_wait = gate._turn.wait

        def woken_then_interrupted(timeout: float | None = None) -> bool:
            woke = real_wait(timeout)
            if threading.current_thread().name == "victim":
                raise KeyboardInterrupt
            return woke

        gate._turn.wait = woken_then_interrupted  # type: ignore[method-assign]
        caught: list[str] = []

        def victim() -> None:
            try:
                with gate.transaction() as conn:
                    conn.execute("INSERT INTO t VALUES ('v', 1)")
            except KeyboardInterrupt:
                caught.append("interrupted")

        v = threading.Thread(target=victim, name="victim")
        v.start()
        wait_for(lambda: gate._queued == 1)
        other_done: list[bool] = []

        def other() -> None:
            with gate.transaction() as conn:
                conn.execute("INSERT INTO t VALUES ('q', 1)")
            other_done.append(True)

        q = threading.Thread(target=other, name="other")
        q.start()
        wait_for(lambda: gate._queued == 2)
        release.set()
        for t in (h, v, q):
            t.join(5)
        gate._turn.wait = real_wait  # type: ignore[method-assign]
        assert caught == ["interrupted"] and other_done == [True]
        assert not h.is_alive() and not q.is_alive()
        assert rows(gate) == {"a", "q"}
        assert (gate._owner, gate._open, gate._queued) == (None, False, 0)

    def test_a_body_commits_its_group_itself_when_nobody_takes_the_turn(self, gate: TxGate) -> None:
        """The only queued thread is interrupted after the hand-over: the body that handed
        the turn on, waiting for the commit, takes it over (its row is durable)."""
        h, release = hold_a_body(gate, "a")
        real_wait = gate._turn.wait

        def woken_then_interrupted(timeout: float | None = None) -> bool:
            real_wait(timeout)
            raise KeyboardInterrupt

        gate._turn.wait = woken_then_interrupted  # type: ignore[method-assign]

        def victim() -> None:
            with pytest.raises(KeyboardInterrupt), gate.transaction():
                pass

        v = threading.Thread(target=victim)
        v.start()
        wait_for(lambda: gate._queued == 1)
        release.set()
        h.join(5)
        v.join(5)
        gate._turn.wait = real_wait  # type: ignore[method-assign]
        assert not h.is_alive() and not v.is_alive()
        assert rows(gate) == {"a"} and (gate._owner, gate._open) == (None, False)

    def test_closed_store_refuses_and_close_inside_a_body_is_refused(self, gate: TxGate) -> None:
        from effectgate.errors import StoreError

        with pytest.raises(StoreError, match="inside its own"), gate.transaction():
            gate.close()
        gate.close()
        gate.close()  # again: a no-op
        with pytest.raises(StoreError, match="closed"), gate.transaction():
            pass
        with pytest.raises(StoreError, match="closed"), gate.read():
            pass

    def test_nested_write_is_refused(self, gate: TxGate) -> None:
        from effectgate.errors import StoreError

        with pytest.raises(StoreError, match="cannot nest"), gate.transaction() as conn:
            conn.execute("INSERT INTO t VALUES ('x', 1)")
            with gate.transaction():
                pass
        assert rows(gate) == set()


def test_many_threads_one_gate_every_action_once(tmp_path: Path) -> None:
    """Invariants 1 and 3 under group commit: 8 threads x 40 actions, each acknowledged once,
    the venue called once per id, fewer commits than actions, the audit chain intact."""
    store = SQLiteStore(str(tmp_path / "ledger.db"))
    venue = PaperVenue()
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000000"))}),
    )
    commits = [0]
    store._conn.set_trace_callback(
        lambda sql: commits.__setitem__(0, commits[0] + (sql == "COMMIT"))
    )
    answers: list[tuple[bool, State]] = []

    def worker(t: int) -> None:
        for i in range(40):
            # Every id twice, from two threads: the second is a replay, never a second call.
            row = gate.submit("submit_order", f"op-{t % 4}-{i}", EXAMPLE_ORDER)
            answers.append((row.replayed, row.state))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    store._conn.set_trace_callback(None)
    # The first submission of an id ran it; a replay may catch it still in flight.
    assert sorted(answers).count((False, State.ACKNOWLEDGED)) == 160
    assert {state for replayed, state in answers if replayed} <= {
        State.SUBMITTED,
        State.ACKNOWLEDGED,
    }
    assert {r.state for r in store.list_operations(limit=1000)} == {State.ACKNOWLEDGED}
    assert venue.calls == 160
    assert commits[0] < 2 * 320  # some commits were shared
    assert verify_store(store).ok
    store.close()


def test_writers_queued_behind_a_busy_begin_fail_together(tmp_path: Path) -> None:
    """Another process holds the write lock past busy_timeout: the threads queued behind the
    BEGIN that gave up fail with it (nothing written), instead of each waiting it out again."""
    from effectgate.errors import StoreError

    path = str(tmp_path / "ledger.db")
    store = SQLiteStore(path, busy_timeout_ms=300)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            store.append_audit("note", {"i": i}, now=1.0)
        except StoreError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    elapsed = time.monotonic() - start
    other.execute("ROLLBACK")
    assert len(errors) == 4 and all("nothing written" in str(e) for e in errors)
    assert elapsed < 0.9, f"{elapsed:.2f}s: the queued writers waited the timeout out in turn"
    store.append_audit("note", {"after": True}, now=2.0)  # the lock is free again
    assert [e.kind for e in store.audit_entries(limit=10)] == ["note"]
    other.close()
    store.close()
