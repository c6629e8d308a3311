"""The breaker's thresholds over one window's counts, as a pure rule (no I/O).

:func:`trips` is what the store's in-transaction observation applies after recording a
proposal's signal (store/_guard.py ``observe_proposal``) and what evaluate's forecast applies to
the window as read plus the proposal it would record (``_execute/breaker_forecast.py``): one
rule, so the forecast says "would trip" exactly when the submit would trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from effectgate._core.controls import VALUE_SCALE, BreakerConfig, to_micros

__all__ = ["WindowCounts", "trips"]


@dataclass(frozen=True, slots=True)
class WindowCounts:
    """A breaker window's counts, the proposal being decided included: proposals decided,
    rejected, the value of those not rejected (micros), operation ids under this repeat key
    or fingerprint, and proposals that brought a never-seen target."""

    decided: int
    rejected: int
    value_micros: int
    same_fingerprint: int
    new_targets: int


def trips(
    cfg: BreakerConfig, counts: WindowCounts, *, repeat: str, keyed: bool, fresh: list[str]
) -> list[tuple[str, str]]:
    """The signals ``counts`` cross, as ``(name, why)``. ``repeat``: what the repeat signal
    counts by (``keyed``: the class's repeat key, else the fingerprint); ``fresh``: the
    never-seen targets this proposal brings, for the message."""
    tripped: list[tuple[str, str]] = []
    if (
        cfg.max_rejection_rate is not None
        and counts.decided >= cfg.min_samples
        and counts.rejected > cfg.max_rejection_rate * counts.decided
    ):
        tripped.append(
            (
                "rejection_rate",
                f"rejection rate {counts.rejected}/{counts.decided} "
                f"over {cfg.max_rejection_rate:.0%} in {cfg.window:g}s",
            )
        )
    if cfg.max_value is not None and counts.value_micros > to_micros(cfg.max_value):
        shown = Decimal(counts.value_micros) / VALUE_SCALE
        tripped.append(
            ("value_rate", f"value {shown.normalize()} over {cfg.max_value} in {cfg.window:g}s")
        )
    if cfg.max_repeats is not None and counts.same_fingerprint > cfg.max_repeats:
        tripped.append(
            (
                "repeats",
                ("near-identical effects (repeat key " if keyed else "fingerprint ")
                + f"{repeat[:12]}{')' if keyed else ''} under "
                f"{counts.same_fingerprint} operation ids in {cfg.window:g}s",
            )
        )
    if cfg.max_new_targets is not None and counts.new_targets > cfg.max_new_targets:
        tripped.append(
            (
                "new_targets",
                f"{counts.new_targets} proposals with never-seen targets in {cfg.window:g}s"
                + (f" (this one: {', '.join(fresh)})" if fresh else ""),
            )
        )
    return tripped
