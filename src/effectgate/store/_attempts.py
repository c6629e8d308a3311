"""How a call on a pooled connection is classified, whatever the driver: the shared runner of
a store whose connections come from a pool and fail with the driver's errors.

A dialect gives its :class:`Driver`: how a connection is taken (within the pool's timeout), the
driver's error class and its pool's timeout error, and whether a failure lost the connection.
What happens then is written once: a connection lost before ``COMMIT`` changed nothing and is
retried once (:func:`retried`), and one whose ``COMMIT`` was sent may have committed
(:func:`commit`); a write sent with its commit in one trip is never retried, and
a lost connection then may have committed (:func:`one_trip`, :func:`trip_failed`). The errors
and their wording are :mod:`effectgate.store._outcome`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, TypeVar

from effectgate.errors import CommitOutcomeUnknown, StoreError
from effectgate.store._outcome import first_line, in_flight, no_connection, not_written

__all__ = ["ONE_TRIP", "Driver", "commit", "one_trip", "read_twice", "retried", "trip_failed"]

C = TypeVar("C")
T = TypeVar("T")

#: What a one-trip write has in flight when its connection is lost (see :func:`one_trip`).
ONE_TRIP = "the statements and their commit were"


@dataclass(frozen=True, slots=True)
class Driver(Generic[C]):
    """A dialect's connections and failures, as the runners here need them."""

    #: A pooled connection, taken within :attr:`timeout` seconds or failing with ``pool_timeout``.
    connection: Callable[[], AbstractContextManager[C]]
    error: type[Exception]
    pool_timeout: type[Exception]
    timeout: float
    #: True when a failure is the connection (or the server going away), not a SQL answer.
    lost: Callable[[BaseException, C | None], bool]


def retried(
    driver: Driver[C],
    work: Callable[[C], T],
    what: str,
    failed: Callable[[Exception], Exception],
    log: logging.Logger | None = None,
) -> T:
    """``work`` on a pooled connection; a lost connection is retried once on a fresh one.

    Only for work that changed nothing when it failed (a read, or a transaction whose
    ``COMMIT`` was not sent): ``failed(exc)`` is what any other failure, or a second one,
    raises. ``log``: where the retry of a write is reported.
    """
    for attempt in (1, 2):
        conn: C | None = None
        try:
            with driver.connection() as conn:
                return work(conn)
        except driver.pool_timeout as exc:
            raise no_connection(what, driver.timeout) from exc
        except driver.error as exc:
            if attempt == 1 and driver.lost(exc, conn):
                if log is not None:
                    log.warning(
                        "%s: connection failed before COMMIT (%s); retrying once",
                        what,
                        type(exc).__name__,
                    )
                continue
            raise failed(exc) from exc
    raise StoreError(f"{what}: unreachable")  # the loop returns or raises


def commit(driver: Driver[C], conn: C, what: str, send: Callable[[], object]) -> None:
    """``send()`` the transaction's ``COMMIT``: a connection lost on the way may have
    committed; an error the server answered with means it rolled the transaction back."""
    try:
        send()
    except driver.error as exc:
        if driver.lost(exc, conn):
            raise in_flight(what, "COMMIT was", exc) from exc
        raise StoreError(f"{what}: COMMIT refused, nothing written: {first_line(exc)}") from exc


def trip_failed(what: str, exc: Exception, lost: bool) -> Exception:
    """A write sent with its commit in one trip failed: a server error aborted it (nothing
    written); a lost connection may have come after the server committed."""
    if lost:
        return in_flight(what, ONE_TRIP, exc)
    return not_written(what, "failed and was rolled back", exc)


def one_trip(driver: Driver[C], work: Callable[[C], T], what: str) -> T:
    """``work`` on a pooled connection, as a write that is sent with its commit: never retried,
    classified by :func:`trip_failed`."""
    conn: C | None = None
    try:
        with driver.connection() as conn:
            return work(conn)
    except driver.pool_timeout as exc:
        raise no_connection(what, driver.timeout) from exc
    except driver.error as exc:
        raise trip_failed(what, exc, driver.lost(exc, conn)) from exc


def read_twice(read: Callable[[], T]) -> T:
    """A read sent through a one-trip call, once more when its connection was lost: that call
    answers a lost connection with :class:`CommitOutcomeUnknown` (a write may have committed),
    but a read changed nothing, so trying it again is safe, and a second loss is a plain
    :class:`StoreError` (nothing is uncertain about a read)."""
    try:
        return read()
    except CommitOutcomeUnknown:
        pass
    try:
        return read()
    except CommitOutcomeUnknown as exc:
        raise StoreError(f"a read lost its connection twice: {first_line(exc)}") from exc
