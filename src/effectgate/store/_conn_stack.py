"""A few connections kept outside the pool, for the hot path: a LIFO stack with a cap.

Whatever the driver: the stack pays no pool checkout, and each thread tends to get the
connection it used last. When all are taken, :meth:`ConnStack.take` says so (None) and the
caller falls back to its pool. A connection goes back on the stack only when healthy and, by
the dialect's ``reusable`` hook, idle; otherwise it is closed and its slot freed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["ConnStack"]


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)
T = TypeVar("T")


class ConnStack(Generic[C]):
    """Connections kept for the hot path, outside the pool: at most ``cap`` of them.

    ``reusable(conn)``: the dialect's check that a connection given back is idle (no open
    transaction, no half-finished pipeline) and still open.
    """

    def __init__(self, connect: Callable[[], C], cap: int, reusable: Callable[[C], bool]) -> None:
        self._connect, self._cap, self._reusable = connect, cap, reusable
        self._idle: list[C] = []
        self._count = 0
        self._mutex = threading.Lock()
        self._closed = False

    def take(self) -> C | None:
        """An idle hot connection, a new one if under the cap, or None (use the pool)."""
        try:
            return self._idle.pop()  # atomic under the GIL: no lock on the common path
        except IndexError:
            pass
        with self._mutex:
            if self._closed or self._count >= self._cap:
                return None
            self._count += 1
        try:
            return self._connect()
        except BaseException:
            with self._mutex:
                self._count -= 1
            raise

    def give(self, conn: C, healthy: bool) -> None:
        """Back on the stack if ``healthy`` and idle; otherwise closed (and its slot freed)."""
        if healthy and not self._closed and self._reusable(conn):
            self._idle.append(conn)
            return
        with self._mutex:
            self._count -= 1
        conn.close()

    def use(self, conn: C, work: Callable[[C], T]) -> T:
        """``work(conn)``, then ``conn`` given back: healthy only if ``work`` returned."""
        healthy = False
        try:
            result = work(conn)
            healthy = True
            return result
        finally:
            self.give(conn, healthy)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for conn in idle:
            conn.close()
