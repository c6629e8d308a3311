"""What a failed write tells its caller, whatever the engine: nothing was written
(:class:`StoreError`), or the commit may have happened (:class:`CommitOutcomeUnknown`), and the
wording of each. A dialect decides which applies; imports only the error tree."""

from __future__ import annotations

from effectgate.errors import CommitOutcomeUnknown, StoreError

__all__ = ["first_line", "in_flight", "no_connection", "not_written"]


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]


def no_connection(what: str, timeout: float) -> StoreError:
    """No connection within ``timeout`` seconds: nothing was sent."""
    return StoreError(f"{what}: no database connection within {timeout:g}s")


def not_written(what: str, how: str, exc: BaseException) -> StoreError:
    """``what`` failed ``how`` (``"failed before commit"``, ``"failed and was rolled back"``):
    nothing written."""
    return StoreError(f"{what} {how}, nothing written: {type(exc).__name__}: {first_line(exc)}")


def in_flight(what: str, during: str, exc: BaseException) -> CommitOutcomeUnknown:
    """The connection was lost while ``during`` (``"COMMIT was"``) in flight: the write may or
    may not be durable, and is never retried."""
    return CommitOutcomeUnknown(
        f"{what}: connection lost while {during} in flight; the write may or may not be "
        f"durable ({type(exc).__name__})"
    )
