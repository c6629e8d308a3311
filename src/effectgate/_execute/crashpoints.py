"""Named crash points for fault tests: the process dies there, or (in-process) raises.

Arm a point with :func:`effectgate.testing.crash_at` (a context manager), :func:`arm`, or
``EFFECTGATE_CRASH_AT=<name>`` in a child's environment. ``kill`` mode SIGKILLs the process (a
real crash: no ``finally``, no cleanup); ``raise`` mode raises :class:`SimulatedCrash`, a
``BaseException`` no ``except Exception`` in effectgate swallows, so an in-process test or a
simulator can observe the ledger exactly as a crash there would leave it. An unarmed check is
one global read, so the points stay in production code at no real cost.
"""

from __future__ import annotations

import os
import signal
from typing import Literal

__all__ = [
    "CRASH_POINTS",
    "CrashMode",
    "SimulatedCrash",
    "arm",
    "armed_point",
    "crashpoint",
    "disarm",
]

#: Where the executor can be killed: after "submitted" is durable, after the venue answered but
#: before the receipt is journalled, and after the receipt is journalled.
CRASH_POINTS = ("after_journal", "after_venue_call", "after_receipt")

CrashMode = Literal["kill", "raise"]


class SimulatedCrash(BaseException):
    """The process "died" at crash point ``point`` (``raise`` mode)."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


_armed: tuple[str, CrashMode] | None = (
    (os.environ["EFFECTGATE_CRASH_AT"], "kill") if os.environ.get("EFFECTGATE_CRASH_AT") else None
)


def arm(name: str, mode: CrashMode = "kill") -> None:
    """Arm ``name``: the next time the process reaches it, it crashes (``mode``)."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}")
    if mode not in ("kill", "raise"):
        raise ValueError(f"unknown crash mode {mode!r}; 'kill' or 'raise'")
    global _armed
    _armed = (name, mode)


def disarm() -> None:
    global _armed
    _armed = None


def armed_point() -> tuple[str, CrashMode] | None:
    """The armed point and its mode, or None."""
    return _armed


def crashpoint(name: str) -> None:
    """Crash here if this point is armed: SIGKILL (``kill``) or :class:`SimulatedCrash`."""
    armed = _armed
    if armed is not None and armed[0] == name:
        if armed[1] == "raise":
            raise SimulatedCrash(name)
        os.kill(os.getpid(), signal.SIGKILL)
