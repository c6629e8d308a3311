"""Group commit on PostgreSQL: hot writes of callers that arrive together share one trip.

Invariant 3 (``submitted`` is durable before the adapter is called) is what is at stake: a
caller must not get its answer before the commit that covers its write, and a trip is ONE
transaction, so when it fails it fails every caller in it, and writes nothing for any. The
orchestrated tests drive ``SharedTrips`` (store/_group_commit.py) with a scripted hook; the
PostgreSQL ones run the real store from many threads. SQLite's group commit is
``tests/test_sqlite_group_commit.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from conftest import require_pg
from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._evidence.audit import verify_store
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import CommitOutcomeUnknown, StoreError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store._postgres_tx import lock_key
from effectgate.store._postgres_wire import Prepared, trip
from effectgate.store._shared_trips import SharedTrips, SharedWrite, shared_trip
from effectgate.store.base import split_schema
from effectgate.store.postgres import PostgresStore, drop_schema


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


class Scripted:
    """A trip hook that records each trip, holds the first until released, fails the second
    with ``fail`` (if given) and answers the rest; ``committed``: items whose trip returned."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.trips: list[list[str]] = []
        self.release = threading.Event()
        self.committed: set[str] = set()
        self.fail = fail

    def __call__(self, items: list[str]) -> list[str]:
        self.trips.append(list(items))
        if len(self.trips) == 1:
            self.release.wait(5)
        elif len(self.trips) == 2 and self.fail is not None:
            raise self.fail
        self.committed.update(items)  # the commit: after it, and only after it, answers go out
        return [f"done {i}" for i in items]


def run_callers(trips: SharedTrips[str, str], hook: Scripted, n: int) -> dict[str, object]:
    """The first caller holds its trip open until ``n`` more have queued behind it."""
    outcomes: dict[str, object] = {}

    def caller(item: str) -> None:
        try:
            answer = trips.submit(item)
            # What a caller may rely on the moment it has its answer: its write committed.
            outcomes[item] = (answer, item in hook.committed)
        except BaseException as exc:  # recorded for the assertions
            outcomes[item] = exc

    first = threading.Thread(target=caller, args=("a0",))
    first.start()
    wait_for(lambda: len(hook.trips) == 1)
    others = [threading.Thread(target=caller, args=(f"b{i}",)) for i in range(n)]
    for t in others:
        t.start()
    wait_for(lambda: sum(len(q.items) for q in trips._queue) == n)
    hook.release.set()
    for t in [first, *others]:
        t.join(10)
    return outcomes


class TestSharedTrips:
    def test_callers_arriving_during_a_trip_share_the_next(self) -> None:
        hook = Scripted()
        trips: SharedTrips[str, str] = SharedTrips(hook, limit=1)
        outcomes = run_callers(trips, hook, 5)
        assert [sorted(t) for t in hook.trips] == [["a0"], [f"b{i}" for i in range(5)]]
        assert outcomes["b3"] == ("done b3", True)

    def test_no_caller_answers_before_the_commit_covering_it(self) -> None:
        """Invariant 3: every answer comes after the commit of the trip that carried it."""
        hook = Scripted()
        outcomes = run_callers(SharedTrips(hook, limit=1), hook, 8)
        assert len(outcomes) == 9
        assert all(isinstance(o, tuple) and o[1] for o in outcomes.values())

    def test_a_failed_trip_fails_every_caller_in_it(self) -> None:
        """Invariant 3: a trip is one transaction with one outcome; every caller it carried
        fails with the trip's error (and none gets an answer), the trip before is untouched."""
        hook = Scripted(fail=StoreError("write failed, nothing written"))
        outcomes = run_callers(SharedTrips(hook, limit=1), hook, 6)
        assert outcomes["a0"] == ("done a0", True)
        failed = [outcomes[f"b{i}"] for i in range(6)]
        assert all(isinstance(o, StoreError) for o in failed)
        assert not any(f"b{i}" in hook.committed for i in range(6))

    def test_an_interrupted_trip_leaves_its_other_callers_uncertain(self) -> None:
        """Invariant 3: a trip interrupted mid-way may have committed; the callers it carried
        besides its runner get CommitOutcomeUnknown, never an answer or "nothing written"."""
        hook = Scripted(fail=KeyboardInterrupt())
        trips: SharedTrips[str, str] = SharedTrips(hook, limit=1)
        outcomes = run_callers(trips, hook, 4)
        kinds = sorted(type(outcomes[f"b{i}"]).__name__ for i in range(4))
        assert kinds == ["CommitOutcomeUnknown"] * 3 + ["KeyboardInterrupt"]
        assert trips.submit("after") == "done after"  # the batcher is not wedged


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    url, schema = require_pg(), f"t_{uuid.uuid4().hex[:12]}"
    yield url, schema
    drop_schema(url, schema)


def gate_on(store: PostgresStore, venue: PaperVenue) -> Gate:
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000000"))}),
    )


@pytest.mark.postgres
class TestPostgresGroupCommit:
    def test_many_threads_share_trips_every_action_once(self, pg: tuple[str, str]) -> None:
        """Invariants 1 and 3 under group commit: 16 threads x 15 actions, each acknowledged
        once, its answer visible to another connection the moment the caller has it, fewer
        trips than writes, the audit chain intact."""
        url, schema = pg
        store = PostgresStore(url, schema=schema, max_size=8)
        other = PostgresStore(url, schema=schema, migrate=False)
        venue = PaperVenue()
        gate = gate_on(store, venue)
        sizes: list[int] = []

        def counted(items: list[SharedWrite]) -> list[Any]:
            sizes.append(len(items))
            return shared_trip(items, store._hot)

        store.__dict__["_trips"] = SharedTrips(counted, limit=2)
        unseen: list[str] = []

        def worker(t: int) -> None:
            for i in range(15):
                op = f"op-{t}-{i}"
                gate.submit("submit_order", op, EXAMPLE_ORDER)
                seen = other.get("default", op)
                if seen is None or seen.state is not State.ACKNOWLEDGED:
                    unseen.append(op)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert unseen == []
            assert venue.calls == 240
            assert {r.state for r in store.list_operations(limit=1000)} == {State.ACKNOWLEDGED}
            assert sum(sizes) == 480  # a journal and a receipt per action, each carried once
            assert len(sizes) < 480 and max(sizes) > 1  # trips were shared
            assert verify_store(store).ok
        finally:
            other.close()
            store.close()

    def test_a_failed_shared_trip_fails_every_caller_and_writes_nothing(
        self, pg: tuple[str, str]
    ) -> None:
        """Invariant 3: while another session holds the class's exclusive lock, the first
        journal's trip waits out lock_timeout and those queued behind it share the next one;
        that trip fails on the same lock, so every caller in it fails and none is journalled."""
        url, schema = pg
        store = PostgresStore(url, schema=schema, lock_timeout_ms=400)
        venue = PaperVenue()
        gate = gate_on(store, venue)
        sizes: list[int] = []

        def counted(items: list[SharedWrite]) -> list[Any]:
            sizes.append(len(items))
            return shared_trip(items, store._hot)

        store.__dict__["_trips"] = SharedTrips(counted, limit=1)
        outcomes: dict[str, BaseException | None] = {}

        def worker(op: str) -> None:
            try:
                gate.submit("submit_order", op, EXAMPLE_ORDER)
                outcomes[op] = None
            except BaseException as exc:  # recorded for the assertions
                outcomes[op] = exc

        conninfo, _ = split_schema(url)
        with psycopg.connect(conninfo, autocommit=False) as holder:
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (lock_key(schema, "submit_order"),),
            )
            first = threading.Thread(target=worker, args=("first",))
            first.start()
            wait_for(lambda: len(sizes) == 1)
            others = [threading.Thread(target=worker, args=(f"q{i}",)) for i in range(5)]
            for t in others:
                t.start()
            wait_for(lambda: sum(len(q.items) for q in store._trips._queue) == 5)
            for t in [first, *others]:
                t.join(20)
            holder.rollback()
        try:
            assert sizes == [1, 5]
            assert all(isinstance(outcomes[f"q{i}"], StoreError) for i in range(5))
            assert not any(isinstance(o, CommitOutcomeUnknown) for o in outcomes.values())
            assert all(store.get("default", f"q{i}") is None for i in range(5))
            assert venue.calls == 0
        finally:
            store.close()

    def test_a_shared_trip_parses_each_statement_once(self, pg: tuple[str, str]) -> None:
        """A shared trip runs one statement several times (a receipt's row lock per receipt):
        it is parsed once, however often the trip runs it, and every run answers."""
        conninfo, _ = split_schema(pg[0])
        once = Prepared.positional("eg_test_once", "SELECT %s::int + 1")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            results = trip(conn, [(once, ("1",)), (once, ("2",)), (once, ("3",))])
            assert [bytes(r.get_value(0, 0) or b"") for r in results] == [b"2", b"3", b"4"]

    def test_an_insert_racing_its_rows_transition_waits_before_any_lane_head(
        self, pg: tuple[str, str]
    ) -> None:
        """Invariant 1 without a deadlock: a shared trip holds a journal of one key and a
        second journal of a key whose row another transaction is moving (a racing caller's,
        as in tests/test_pg_hot_lane.py). The second insert must wait for that row in the lock
        phase: waiting in its main, after the trip took its lane's head, it deadlocked with the
        transition, which takes the row and then the same head (CI, PostgreSQL)."""
        from effectgate._core.chain import lane_for
        from effectgate.store._postgres_schema import LANES
        from effectgate.store.base import NewOperation

        url, schema = pg
        store = PostgresStore(url, schema=schema, lock_timeout_ms=10_000)

        def new(op: str) -> NewOperation:
            return NewOperation(
                scope="default", operation_id=op, action="submit_order", fingerprint="f" * 64,
                intent={"q": "4"}, effect={"q": "4"}, tier="validate", reason="ok",
                policy_version="t",
            )  # fmt: skip

        path = [State.PROPOSED, State.VALIDATED, State.SUBMITTED]
        store.insert_operation(new("op-x"), path, now=1.0)
        before = store.get("default", "op-x")
        lane = lane_for("default", "op-x", LANES)
        first = next(f"op-{i}" for i in range(999) if lane_for("default", f"op-{i}", LANES) == lane)

        class Captured(BaseException):
            pass

        captured: list[SharedWrite] = []

        class Capture:
            def submit(self, write: SharedWrite) -> Any:
                captured.append(write)
                raise Captured

        real = store.__dict__.get("_trips")
        store.__dict__["_trips"] = Capture()
        for op in (first, "op-x"):  # the fresh key's journal, then the racer's (sorted mains)
            with pytest.raises(Captured):
                store.insert_operation(new(op), path, now=2.0)
        if real is not None:
            store.__dict__["_trips"] = real
        conninfo, _ = split_schema(url)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["results"] = shared_trip(captured, store._hot)
            except BaseException as exc:  # reported below
                outcome["error"] = exc

        with (
            psycopg.connect(conninfo, autocommit=False) as mover,
            psycopg.connect(conninfo, autocommit=True) as watcher,
        ):
            mover.execute(f'SET search_path TO "{schema}"')
            mover.execute(
                "UPDATE operations SET updated_at = updated_at "
                "WHERE scope = 'default' AND operation_id = 'op-x'"
            )  # the transition holds the row ...
            trip_thread = threading.Thread(target=run)
            trip_thread.start()

            def waiting() -> bool:
                row = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
                return bool(row and row[0])

            wait_for(waiting)  # ... and the trip waits on it
            # ... and then takes its lane's head, which the trip must not hold yet.
            mover.execute("SELECT hash FROM audit_heads WHERE lane = %s FOR UPDATE", (lane,))
            mover.rollback()
            trip_thread.join(20)
        try:
            assert "error" not in outcome, outcome.get("error")
            assert store.get("default", first) is not None
            assert store.get("default", "op-x") == before  # the racer's journal changed nothing
            assert verify_store(store).ok
        finally:
            store.close()
