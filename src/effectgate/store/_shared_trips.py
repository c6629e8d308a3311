"""Group commit for one-round-trip writes (PostgreSQL's hot path): callers that arrive while a
trip is in flight share the next one, a single transaction with a single commit, run by its
first member through the dialect's one-trip call, in the lock order of :func:`shared_trip`.

No caller sees its answer before the commit that covers its write (invariant 3), as with
:class:`~effectgate.store._group_commit.TxGate` for a shared write connection (SQLite).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from effectgate.errors import CommitOutcomeUnknown, StoreError
from effectgate.store._group_commit import MAX_GROUP

__all__ = ["SharedTrips", "SharedWrite", "TripsOf", "shared_trip"]

In = TypeVar("In")
Out = TypeVar("Out")


class _Trip(Generic[In, Out]):
    __slots__ = ("done", "error", "items", "ready", "results")

    def __init__(self, lock: threading.Lock) -> None:
        self.items: list[In] = []
        self.results: Sequence[Out] = ()
        self.error: BaseException | None = None
        self.done = False
        self.ready = threading.Condition(lock)  # its members: "it ended" or "lead it now"


class SharedTrips(Generic[In, Out]):
    """Group commit for one-round-trip writes: ``submit(item)`` runs ``item`` in the same
    transaction as the items of callers that arrive with it.

    ``run(items)`` is the dialect's hook: all ``items`` as ONE transaction, returning one result
    per item only once that transaction has committed. While ``limit`` trips are in flight,
    arrivals queue into the next trip (at most :data:`MAX_GROUP` items), which its first
    member to find a free slot runs; a lone caller runs at once. So no caller sees its answer
    before the commit that covers its item (invariant 3), and when ``run`` raises, every caller
    of that trip fails: one transaction, one outcome (the callers after the first get a
    :class:`CommitOutcomeUnknown` when the error is an interrupt rather than the store's).
    """

    def __init__(self, run: Callable[[list[In]], Sequence[Out]], *, limit: int = 1) -> None:
        if limit < 1:
            raise StoreError("SharedTrips needs limit >= 1")
        self._run, self._limit = run, limit
        self._lock = threading.Lock()
        self._inflight = 0
        self._queue: deque[_Trip[In, Out]] = deque()  # trips waiting for a slot, oldest first

    def submit(self, item: In) -> Out:
        with self._lock:
            lone = self._inflight < self._limit and not self._queue
            if lone:
                self._inflight += 1
        if lone:  # no wait, no hand-over, and nobody waits on this trip
            try:
                results = self._run([item])
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._wake()
            if len(results) != 1:
                raise StoreError(f"a trip of one write gave {len(results)} results")
            return results[0]
        return self._shared(item)

    def _shared(self, item: In) -> Out:
        """Queue ``item`` into the next trip; run that trip if this thread gets to lead it."""
        with self._lock:
            if not self._queue or len(self._queue[-1].items) >= MAX_GROUP:
                self._queue.append(_Trip(self._lock))
            trip = self._queue[-1]
            index = len(trip.items)
            trip.items.append(item)
            try:
                while not trip.done and not self._may_lead(trip):
                    trip.ready.wait()
            except BaseException:
                self._wake()  # a wake-up meant for this thread must reach a member
                raise
            if trip.done:
                return self._outcome(trip, index, led=False)
            self._queue.popleft()
            self._inflight += 1
        try:
            results = self._run(trip.items)
            if len(results) != len(trip.items):
                raise StoreError(f"a shared trip of {len(trip.items)} gave {len(results)} results")
            trip.results = results
        except BaseException as exc:
            trip.error = exc
        finally:
            with self._lock:
                self._inflight -= 1
                trip.done = True
                trip.ready.notify_all()
                self._wake()
        return self._outcome(trip, index, led=True)

    def _may_lead(self, trip: _Trip[In, Out]) -> bool:
        return self._inflight < self._limit and bool(self._queue) and self._queue[0] is trip

    def _wake(self) -> None:
        """A slot may be free (the lock is held): wake one member of the oldest queued trip."""
        if self._queue and self._inflight < self._limit:
            self._queue[0].ready.notify()

    @staticmethod
    def _outcome(trip: _Trip[In, Out], index: int, *, led: bool) -> Out:
        error = trip.error
        if error is None:
            return trip.results[index]
        if led or isinstance(error, Exception):
            raise error
        raise CommitOutcomeUnknown(
            "the shared write was interrupted; it may or may not be durable"
        ) from error


class SharedWrite(NamedTuple):
    """One one-trip write (its statements are the dialect's), and its parts for a shared trip."""

    what: str
    alone: tuple[Any, ...]  # its statements as a trip of its own (a lone caller's)
    lock: Any  # the statement taking its operation's lock (its class's first, if any)
    order: tuple[str, ...]  # where that lock sorts: (class, key) so classes come in order
    main: Any  # the statement whose result is the caller's; it locks the audit lane's head
    lane: int
    #: A second lock and where it sorts (an insert's lock of the row it may conflict with):
    #: taken in the lock phase with the others, not by the main after lane heads are held.
    also: Any = None
    also_order: tuple[str, ...] = ()


def shared_trip(
    items: Sequence[SharedWrite], trip: Callable[[list[Any], str], list[Out]]
) -> list[Out]:
    """``items`` as one trip (``trip(statements, what)``: one transaction, every result).

    Lock order, the same in every trip and as every other writer's (class, operation, lane
    head): the operations' locks sorted by ``order`` (an insert's key lock, then every row
    lock, a transition's and an insert's ``also``, by key), then the main statements by
    ascending lane. So two trips, or a trip and a single transaction, never wait on each other
    in a cycle: no main waits on a row after its trip holds a lane head (an insert that
    conflicts with a row another transaction is updating waits for it in the lock phase).
    A lone item runs as it would alone.
    """
    if len(items) == 1:
        return [trip(list(items[0].alone), items[0].what)[-1]]
    phase = [(w.order, w.lock) for w in items]
    phase += [(w.also_order, w.also) for w in items if w.also is not None]
    locks = [lock for _, lock in sorted(phase, key=lambda p: p[0])]
    by_lane = sorted(range(len(items)), key=lambda i: items[i].lane)
    res = trip(locks + [items[i].main for i in by_lane], f"{len(items)} shared writes")
    out: list[Out] = list(res[: len(items)])  # placeholders, each replaced below
    for pos, i in enumerate(by_lane):
        out[i] = res[len(locks) + pos]
    return out


class TripsOf:
    """A store's :class:`SharedTrips` over its one-trip method ``trip`` (the dialect's hook:
    ``trip(statements, what)``, one transaction, every result), built on first use."""

    _build = threading.Lock()

    def __init__(self, trip: str, *, limit: int) -> None:
        self._trip, self._limit, self._name = trip, limit, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: Any, owner: type | None = None) -> SharedTrips[SharedWrite, Any]:
        with self._build:  # once per store; later reads find it in the instance's __dict__
            found: SharedTrips[SharedWrite, Any] | None = obj.__dict__.get(self._name)
            if found is None:
                trip = getattr(obj, self._trip)
                found = SharedTrips(lambda items: shared_trip(items, trip), limit=self._limit)
                obj.__dict__[self._name] = found
        return found
