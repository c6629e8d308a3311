"""Group commit for threads sharing one write connection: serialised bodies, one COMMIT each group.

One write connection serves every thread of a process. A thread's transaction *body* (the SQL
between ``BEGIN`` and ``COMMIT``) runs alone, as the engine's write lock would serialise it
anyway; bodies that queue while one runs join the same transaction, and ONE ``COMMIT`` (one
fsync) makes all of them durable. No caller gets its result back before the commit that covers
its body, so a journalled row is durable before anything is dispatched on it (invariant 3),
exactly as with a transaction of its own. A lone caller pays nothing extra.

A body that fails is undone alone (a savepoint, taken whenever other bodies are pending in the
same transaction); the others still commit. A COMMIT that fails fails every body in it the way it
would fail one: :class:`StoreError` when nothing was written (another process held the lock),
:class:`CommitOutcomeUnknown` otherwise. An open group commits as soon as no body is queued or it
holds :data:`MAX_GROUP` bodies. When a ``BEGIN`` gives up because another process holds the
write lock, every thread that was already queued behind it fails with the same error at once,
rather than each waiting out the lock again in turn.

Reads use a second, read-only connection when the engine has one (SQLite in WAL mode), so they
see committed rows only, never wait for a group, and never hold one up. A thread reading inside
its own body reads through the write connection and sees its own writes. Without a second
connection (an in-memory ledger), reads take the turn like a body, once no transaction is open.

Nothing here names an engine: the statements and the error classification are an
:class:`Engine`'s (SQLite's is :mod:`effectgate.store._sqlite_tx`).

The same idea for a store whose hot writes are each one round trip on a connection of their
own (PostgreSQL) is :mod:`effectgate.store._shared_trips`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

from effectgate.errors import CommitOutcomeUnknown, StoreError

__all__ = ["MAX_GROUP", "Engine", "FinishingBody", "TxGate", "store_error"]

#: Bodies one commit covers at most (bounds how long the write lock is held for other processes).
MAX_GROUP = 64

Failure = tuple[type[StoreError | CommitOutcomeUnknown], str]


class Engine(Protocol):
    """The statements of one engine's transactions, and what its errors mean."""

    #: The driver's error base: every failure of these calls is one.
    error: type[Exception]

    def begin(self, conn: Any) -> None:
        """Start a write transaction holding the write lock from its first statement."""

    def savepoint(self, conn: Any) -> None: ...

    def release(self, conn: Any) -> None: ...

    def rollback_to(self, conn: Any) -> None:
        """Undo the savepoint's body and release it."""

    def commit(self, conn: Any) -> None: ...

    def rollback(self, conn: Any) -> None:
        """Leave the connection outside any transaction, whatever happened to it."""

    def in_transaction(self, conn: Any) -> bool: ...

    def busy(self, exc: Exception) -> bool:
        """Whether ``exc`` means another process held the lock (so nothing was written)."""


def store_error(what: str, exc: BaseException) -> StoreError:
    """A driver error as the store's own (one exception tree for callers)."""
    return StoreError(f"{what}: {type(exc).__name__}: {exc}")


class TxGate:
    """Who may use the write connection now, and which commit each body waits for.

    ``reader``: a read-only connection onto the same file, or None (in-memory ledgers).
    """

    def __init__(self, engine: Engine, conn: Any, reader: Any | None) -> None:
        self.engine = engine
        self.conn = conn
        self._reader = reader
        self._reader_lock = threading.Lock()
        # One lock, three queues: a hand-over wakes ONE writer, not every thread (under the
        # GIL a thundering herd of wake-ups costs more than the fsync the group saves).
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)  # writers waiting for the turn
        self._reads = threading.Condition(self._lock)  # in-memory readers waiting
        self._done = threading.Condition(self._lock)  # bodies waiting for their commit
        self._owner: int | None = None  # the thread running a body (or an in-memory read)
        self._open = False  # a transaction is open on the write connection
        self._pending = 0  # bodies done and waiting for the open transaction's commit
        self._queued = 0  # threads waiting for the turn to run a body
        self._readers = 0  # in-memory readers waiting
        self._epoch = 0  # transactions ended so far (committed, failed or rolled back)
        self._failed: dict[int, Failure] = {}  # epoch -> why its commit failed
        self._waiters: dict[int, int] = {}  # epoch -> bodies waiting for its commit
        self._closed = False
        self._closing = False  # close() was called: no new arrivals
        self._arrivals = 0  # writers that ever queued (a ticket per arrival)
        # The last arrival queued when a BEGIN gave up on another process's write lock, and
        # the error it raised; cleared by the next BEGIN that gets the lock.
        self._busy: tuple[int, str] = (0, "")

    # --- writes ---------------------------------------------------------------------------

    def transaction(self) -> _Body:
        """A context manager around one body: ``with gate.transaction() as conn: ...``."""
        return _Body(self)

    def _enter(self) -> tuple[int, bool]:
        """Take the turn and start the body: ``(epoch, joined)``; joined = others pending."""
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                raise StoreError("a write transaction cannot nest inside another")
            if self._closing:
                raise StoreError("the store is closed")
            self._arrivals = ticket = self._arrivals + 1
            if self._closed or self._owner is not None or (self._readers and not self._open):
                # The turn is taken: queue for it (a lone caller never gets here).
                self._queued += 1
                try:
                    while not self._closed and (
                        self._owner is not None or (self._readers and not self._open)
                    ):
                        self._turn.wait()
                except BaseException:
                    self._queued -= 1
                    self._wake()  # a hand-over meant for this thread must reach someone
                    raise
                self._queued -= 1
                if self._closed:
                    self._wake()
                    raise StoreError("the store is closed")
            busy_ticket = self._busy[0]
            if busy_ticket and not self._open and ticket <= busy_ticket:
                # Another process held the write lock past busy_timeout while this thread
                # waited its turn: fail now, as one, instead of each waiting it out again.
                # (Joining an open group needs no lock wait, so it is never refused.)
                self._wake()
                raise StoreError(self._busy[1])
            self._owner = me
            joined, epoch = self._open, self._epoch
            # Claimed before BEGIN runs: only the owner acts on an open transaction, so
            # nobody sees the claim before BEGIN's outcome (a failed BEGIN abandons it).
            self._open = True
        try:
            (self.engine.savepoint if joined else self.engine.begin)(self.conn)
        except self.engine.error as exc:
            why = str(store_error("cannot begin a write transaction, nothing written", exc))
            if not joined and self.engine.busy(exc):
                with self._lock:
                    self._busy = (self._arrivals, why)
            self._abandon(epoch, joined, "cannot begin a write transaction, nothing written")
            raise StoreError(why) from exc
        except BaseException:
            self._abandon(epoch, joined, "interrupted before the write began, nothing written")
            raise
        if not joined and self._busy[0]:
            with self._lock:
                self._busy = (0, "")  # the lock was free after all
        return epoch, joined

    def _exit(self, epoch: int, joined: bool, failed: BaseException | None) -> None:
        conn = self.conn
        if failed is not None:
            try:
                if joined:
                    self.engine.rollback_to(conn)
                else:
                    self.engine.rollback(conn)
            except self.engine.error as exc:
                # The engine rolled the whole transaction back itself (SQLite: an I/O error,
                # RAISE(ROLLBACK)):
                # every body pending in it is lost.
                self._abandon(epoch, joined, "the transaction was rolled back, nothing written")
                raise store_error(
                    "write failed and the transaction was rolled back, nothing written", exc
                ) from exc
            except BaseException:
                self._abandon(epoch, joined, "interrupted while undoing a write, nothing written")
                raise
            if not joined:
                with self._lock:
                    self._open = False
            self._finish(epoch, done=False)
            return
        if not self.engine.in_transaction(conn):
            # The engine ended the transaction inside the body (an error the body caught): what
            # ran after that was autocommitted, what ran before was rolled back.
            why = "the transaction ended inside a write; what it wrote may or may not be durable"
            self._abandon(epoch, joined, why, kind=CommitOutcomeUnknown)
            raise CommitOutcomeUnknown(why)
        if joined:
            try:
                self.engine.release(conn)
            except BaseException as exc:
                self._abandon(epoch, joined, "nothing written")
                if isinstance(exc, self.engine.error):
                    raise store_error("write failed before commit, nothing written", exc) from exc
                raise
        self._finish(epoch, done=True)

    def _finish(self, epoch: int, *, done: bool) -> None:
        """Commit the open transaction now, or hand the turn on (and wait for the commit).

        A waiting body commits the group itself if the turn is free and nobody is queued to
        take it (the thread it was handed to was interrupted, or failed fast).
        """
        failure: Failure | None = None
        with self._lock:
            if done:
                self._pending += 1
            commit_now = self._open and (
                self._queued == 0 or self._readers > 0 or self._pending >= MAX_GROUP
            )
            if not commit_now:
                self._owner = None
                self._wake()
                if not done:
                    return
                self._waiters[epoch] = self._waiters.get(epoch, 0) + 1
                try:
                    while self._epoch == epoch:
                        if self._owner is None and self._open and not self._queued:
                            self._owner = threading.get_ident()
                            commit_now = True
                            break
                        self._done.wait()
                    failure = None if commit_now else self._failed.get(epoch)
                finally:
                    self._waiters[epoch] -= 1
                    if not self._waiters[epoch]:
                        del self._waiters[epoch]
                        self._failed.pop(epoch, None)
        if commit_now:
            # Still the owner: the COMMIT (the fsync) runs outside the lock, so the next
            # group can queue up behind it meanwhile.
            failure = self._commit(epoch)
        if failure is not None and done:
            kind, message = failure
            raise kind(message)

    def _commit(self, epoch: int) -> Failure | None:
        """COMMIT the open transaction (called by its owner); record and return a failure."""
        failure: Failure | None = (
            CommitOutcomeUnknown,
            "interrupted during COMMIT; the write may or may not be durable",
        )
        try:
            self.engine.commit(self.conn)
            failure = None
        except self.engine.error as err:
            self.engine.rollback(self.conn)
            if self.engine.busy(err):
                failure = (
                    StoreError,
                    f"COMMIT refused, nothing written: {type(err).__name__}: {err}",
                )
            else:
                failure = (
                    CommitOutcomeUnknown,
                    f"COMMIT failed; the write may or may not be "
                    f"durable ({type(err).__name__}: {err})",
                )
        finally:
            # Whatever happened (a KeyboardInterrupt included), the turn is released and
            # everyone waiting for this epoch learns its outcome.
            with self._lock:
                if failure is not None and self._waiters.get(epoch):
                    self._failed[epoch] = failure
                self._open, self._pending, self._owner = False, 0, None
                self._epoch += 1
                if self._waiters or self._closing:  # a lone caller: nobody waits on it
                    self._done.notify_all()
                self._wake()
        return failure

    def _abandon(
        self,
        epoch: int,
        joined: bool,
        why: str,
        *,
        kind: type[StoreError | CommitOutcomeUnknown] = StoreError,
    ) -> None:
        """Roll the whole transaction back; every body pending in it fails with ``why``."""
        self.engine.rollback(self.conn)
        with self._lock:
            if joined or self._open:
                if self._waiters.get(epoch):
                    self._failed[epoch] = (kind, why)
                self._epoch += 1
            self._open, self._pending, self._owner = False, 0, None
            self._done.notify_all()
            self._wake()

    def _wake(self) -> None:
        """The turn is free (the lock is held): wake whoever goes next, and only them."""
        if self._closed:
            self._turn.notify_all()
            self._reads.notify_all()
        elif self._readers and not self._open:
            self._reads.notify_all()
        elif self._queued:
            self._turn.notify()
        elif self._open and self._owner is None:
            self._done.notify_all()  # nobody will take the turn: a waiting body commits

    # --- reads ----------------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A connection for reads: committed rows (the owner of a body reads its own)."""
        me = threading.get_ident()
        if self._owner == me:  # only this thread sets or clears its own ownership
            yield self.conn
            return
        if self._closed:
            raise StoreError("the store is closed")
        if self._reader is not None:
            with self._reader_lock:
                if self._closed:
                    raise StoreError("the store is closed")
                yield self._reader
            return
        with self._lock:  # in-memory: take the turn once no transaction is open
            self._readers += 1
            try:
                while not self._closed and (self._owner is not None or self._open):
                    self._reads.wait()
            except BaseException:
                self._readers -= 1
                self._wake()
                raise
            self._readers -= 1
            if self._closed:
                raise StoreError("the store is closed")
            self._owner = me
        try:
            yield self.conn
        finally:
            with self._lock:
                self._owner = None
                self._wake()

    def rows(self, query: str, args: Sequence[Any] = ()) -> list[Any]:
        """One read's rows (:meth:`read`); the engine's error comes out as a StoreError."""
        with self.read() as conn:
            try:
                found: list[Any] = conn.execute(query, args).fetchall()
            except self.engine.error as exc:
                raise store_error("read failed", exc) from exc
        return found

    def close(self) -> None:
        """Close once no body or read is running; later calls raise StoreError (again: no-op)."""
        me = threading.get_ident()
        with self._lock:
            if self._closed:
                return
            if self._owner == me:
                raise StoreError("cannot close the store from inside its own transaction")
            self._closing = True  # no new arrivals; those already queued finish first
            while self._owner is not None or self._open or self._queued:
                self._done.wait(0.05)
            self._closed = True
            self._wake()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
        self.conn.close()


class _Body:
    __slots__ = ("_gate", "_state")

    def __init__(self, gate: TxGate) -> None:
        self._gate = gate
        self._state: tuple[int, bool] | None = None

    def __enter__(self) -> Any:
        self._state = self._gate._enter()
        return self._gate.conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if self._state is None:
            return
        epoch, joined = self._state
        self._gate._exit(epoch, joined, exc)
        if isinstance(exc, self._gate.engine.error):
            raise store_error("write failed before commit, nothing written", exc) from exc


class _Finishing(Protocol):
    def finish(self) -> None: ...


F = TypeVar("F", bound=_Finishing)


class FinishingBody(Generic[F]):
    """One body as a transaction object: the gate's body, ``make(conn)`` over its connection,
    then that object's ``finish()`` before the body commits (not after an error: the body is
    rolled back). A plain class rather than a generator context manager: it runs twice per
    action."""

    __slots__ = ("_body", "_make", "_tx")

    def __init__(self, gate: TxGate, make: Callable[[Any], F]) -> None:
        self._body = gate.transaction()
        self._make = make

    def __enter__(self) -> F:
        self._tx = self._make(self._body.__enter__())
        return self._tx

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None:
            try:
                self._tx.finish()
            except BaseException as err:
                # Rolled back with the body; a driver error comes out as a StoreError.
                self._body.__exit__(type(err), err, err.__traceback__)
                raise
        self._body.__exit__(kind, exc, tb)
