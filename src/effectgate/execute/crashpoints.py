"""Named crash points for fault tests: a test arms one, the process SIGKILLs itself there.

Arm with :func:`arm` in-process or ``EFFECTGATE_CRASH_AT=<name>`` in a child's environment. An
unarmed check is one global read, so the points stay in production code at no real cost.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_POINTS", "arm", "armed", "crashpoint", "disarm"]

#: Where the executor can be killed: after "submitted" is durable, after the venue answered but
#: before the receipt is journalled, and after the receipt is journalled.
CRASH_POINTS = ("after_journal", "after_venue_call", "after_receipt")

_armed: str | None = os.environ.get("EFFECTGATE_CRASH_AT") or None


def arm(name: str) -> None:
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}")
    global _armed
    _armed = name


def disarm() -> None:
    global _armed
    _armed = None


def armed() -> str | None:
    return _armed


def crashpoint(name: str) -> None:
    """Die here, now, without cleanup, if this point is armed (a real SIGKILL, not an exception)."""
    if _armed == name:
        os.kill(os.getpid(), signal.SIGKILL)
