"""SQLite transactions for threads sharing one store: serialised bodies, group commit.

One connection serves every thread of a process. A thread's transaction *body* (the SQL between
``BEGIN`` and ``COMMIT``) runs alone, as ``BEGIN IMMEDIATE`` would serialise it anyway; bodies
that queue while one runs join the same SQLite transaction, and ONE ``COMMIT`` (one fsync under
``synchronous=FULL``) makes all of them durable. No caller gets its result back before the
commit that covers its body, so a journalled row is durable before anything is dispatched on it
(invariant 3), exactly as with a transaction of its own. A lone caller pays nothing extra.

A body that fails is undone alone (a SAVEPOINT, taken whenever other bodies are pending in the
same transaction); the others still commit. A COMMIT that fails fails every body in it the way it
would fail one: :class:`StoreError` when nothing was written (another process held the lock),
:class:`IndeterminateCommit` otherwise. Reads wait for the open transaction to commit, so no
thread ever reads another's uncommitted writes; an open group commits as soon as no body is
queued, a reader is waiting, or it holds :data:`MAX_GROUP` bodies.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from effectgate.errors import IndeterminateCommit, StoreError

__all__ = ["MAX_GROUP", "TxGate", "rollback", "store_error"]

#: Bodies one commit covers at most (bounds how long the write lock is held for other processes).
MAX_GROUP = 64

# SQLite result codes that mean "another writer holds the lock": nothing was written.
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def store_error(what: str, exc: sqlite3.Error) -> StoreError:
    """A ``sqlite3`` error as the store's own (one exception tree for callers)."""
    return StoreError(f"{what}: {type(exc).__name__}: {exc}")


def rollback(conn: sqlite3.Connection) -> None:
    """Leave the shared connection outside any transaction, whatever happened to it."""
    if conn.in_transaction:
        with suppress(sqlite3.Error):  # SQLite may already have rolled it back itself
            conn.execute("ROLLBACK")


class TxGate:
    """Who may use the connection now, and which commit each body waits for."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # One lock, three queues: a hand-over wakes ONE writer, not every thread (under the
        # GIL a thundering herd of wake-ups costs more than the fsync the group saves).
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)  # writers waiting for the body turn
        self._reads = threading.Condition(self._lock)  # readers waiting
        self._done = threading.Condition(self._lock)  # bodies waiting for their commit
        self._owner: int | None = None  # the thread running a body or a read
        self._open = False  # a SQLite transaction is open
        self._pending = 0  # bodies done and waiting for the open transaction's commit
        self._queued = 0  # threads waiting to run a body
        self._readers = 0  # threads waiting to read
        self._epoch = 0  # transactions ended so far (committed, failed or rolled back)
        self._failed: dict[int, tuple[type[StoreError], str]] = {}  # epoch -> why it failed
        self._waiters: dict[int, int] = {}  # epoch -> bodies waiting for its commit
        self._closed = False

    # --- writes ---------------------------------------------------------------------------

    def transaction(self) -> _Body:
        """A context manager around one body: ``with gate.transaction() as conn: ...``."""
        return _Body(self)

    def _enter(self) -> tuple[int, bool]:
        """Take the body turn: ``(epoch, joined)``, joined meaning other bodies are pending."""
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                raise StoreError("a write transaction cannot nest inside another")
            self._queued += 1
            while self._owner is not None or (self._readers and not self._open):
                self._turn.wait()
            self._queued -= 1
            self._owner = me
            joined = self._open
            epoch = self._epoch
        conn = self.conn
        try:
            if joined:
                conn.execute("SAVEPOINT eg_body")
            else:
                conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._abandon(epoch, joined, StoreError, "cannot begin a write transaction, "
                          "nothing written")
            raise store_error("cannot begin a write transaction, nothing written", exc) from exc
        except BaseException:
            self._abandon(epoch, joined, StoreError, "interrupted before the write began")
            raise
        if not joined:
            with self._lock:
                self._open = True
        return epoch, joined

    def _exit(self, epoch: int, joined: bool, failed: BaseException | None) -> None:
        conn = self.conn
        if failed is not None:
            try:
                if joined:
                    conn.execute("ROLLBACK TO eg_body")
                    conn.execute("RELEASE eg_body")
                else:
                    rollback(conn)
            except sqlite3.Error:
                # The earlier bodies' state is unknown: undo the whole transaction.
                self._abandon(epoch, joined, StoreError,
                              "a failed body could not be undone alone; nothing written")
                raise
            if not joined:
                with self._lock:
                    self._open = False
                    self._epoch += 1
            self._finish(epoch, done=False)
            return
        if joined:
            try:
                conn.execute("RELEASE eg_body")
            except sqlite3.Error as exc:
                self._abandon(epoch, joined, StoreError, "nothing written")
                raise store_error("write failed before commit, nothing written", exc) from exc
        with self._lock:
            self._pending += 1
        self._finish(epoch, done=True)

    def _finish(self, epoch: int, *, done: bool) -> None:
        """Commit the open transaction now, or hand the turn on and wait for its commit."""
        with self._lock:
            commit_now = self._open and (self._queued == 0 or self._readers > 0
                                         or self._pending >= MAX_GROUP)
            if not commit_now:
                self._owner = None
                self._wake()
                if not done:
                    return
                self._waiters[epoch] = self._waiters.get(epoch, 0) + 1
                while self._epoch == epoch:
                    self._done.wait()
                failure = self._failed.get(epoch)
                self._waiters[epoch] -= 1
                if not self._waiters[epoch]:
                    del self._waiters[epoch]
                    self._failed.pop(epoch, None)
        if commit_now:
            # Still the owner: the COMMIT (the fsync) runs outside the condition, so the
            # next group can queue up behind it meanwhile.
            failure = self._commit(epoch)
        if failure is not None and done:
            kind, message = failure
            raise kind(message)

    def _commit(self, epoch: int) -> tuple[type[StoreError], str] | None:
        """COMMIT the open transaction (called by its owner); record and return a failure."""
        failure: tuple[type[StoreError], str] | None = None
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as err:
            rollback(self.conn)
            if (getattr(err, "sqlite_errorcode", 0) or 0) & 0xFF in _BUSY:
                failure = (StoreError, f"COMMIT refused, nothing written: "
                                       f"{type(err).__name__}: {err}")
            else:
                failure = (IndeterminateCommit, f"COMMIT failed; the write may or may not be "
                                                f"durable ({type(err).__name__}: {err})")
        with self._lock:
            if failure is not None and self._waiters.get(epoch):
                self._failed[epoch] = failure
            self._open, self._pending, self._owner = False, 0, None
            self._epoch += 1
            self._done.notify_all()
            self._wake()
        return failure

    def _abandon(self, epoch: int, joined: bool, kind: type[StoreError], why: str) -> None:
        """Roll the whole transaction back; every body pending in it fails with ``why``."""
        rollback(self.conn)
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
        if self._readers and not self._open:
            self._reads.notify_all()
        elif self._queued:
            self._turn.notify()
        elif self._readers:
            self._reads.notify()

    def close(self) -> None:
        """Close the connection once no body or read is using it (again: a no-op)."""
        with self._lock:
            if self._closed:
                return
            while self._owner is not None or self._open:
                self._done.wait(0.05)
            self._closed = True
        self.conn.close()

    # --- reads ----------------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads: committed state only (the owner reads its own writes)."""
        me = threading.get_ident()
        with self._lock:
            nested = self._owner == me
            if not nested:
                self._readers += 1
                while self._owner is not None or self._open:
                    self._reads.wait()
                self._readers -= 1
                self._owner = me
        try:
            yield self.conn
        finally:
            if not nested:
                with self._lock:
                    self._owner = None
                    self._wake()


class _Body:
    __slots__ = ("_gate", "_state")

    def __init__(self, gate: TxGate) -> None:
        self._gate = gate
        self._state: tuple[int, bool] | None = None

    def __enter__(self) -> sqlite3.Connection:
        self._state = self._gate._enter()
        return self._gate.conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if self._state is None:
            return
        epoch, joined = self._state
        self._gate._exit(epoch, joined, exc)
        if isinstance(exc, sqlite3.Error):
            raise store_error("write failed before commit, nothing written", exc) from exc
