"""A clock moved by hand, so horizons pass without waiting (tests, ``verify``, the simulator)."""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """A clock tests move by hand: pass it as ``clock=`` to the gate, reconciler and venue."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
