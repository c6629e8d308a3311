"""Evaluate's breaker forecast: would this proposal trip the class's breaker, read-only.

A submit's journal records the proposal's signal, reads the window and trips the breaker when a
threshold is crossed (store/_guard.py ``observe_proposal``), then holds the row if it would be
sent. The forecast reads the same window and the targets seen, adds the one signal the proposal
would record (nothing is written: no signal, no target remembered, no prune) and applies the
same rule (:func:`effectgate._core.breaker_signals.trips`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from effectgate._core.breaker_signals import WindowCounts, trips
from effectgate._core.controls import ApprovalRules, BreakerConfig, ClassControls
from effectgate._core.intent import ActionClass, Intent
from effectgate._execute.intake import submit_guard

__all__ = ["BreakerReads", "forecast"]


class BreakerReads(Protocol):
    """The store's breaker reads, or a transaction's (store/_tx_reads.py)."""

    def breaker_window(self, action: str, since: float, repeat: str) -> WindowCounts: ...
    def seen_targets(self, targets: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...


def forecast(
    store: BreakerReads,
    breakers: Mapping[str, BreakerConfig],
    ac: ActionClass,
    parsed: Intent,
    *,
    ctl: ClassControls,
    rejected: bool,
    now: float,
) -> dict[str, object] | None:
    """The breaker's answer for a new proposal of ``parsed`` (None: no breaker watches the
    class): ``open`` (already open: the row would be held), ``would_trip`` and the signals.
    ``rejected``: the proposal would be journalled ``rejected`` (policy or envelope)."""
    cfg = breakers.get(ac.name)
    if cfg is None:
        return None
    out: dict[str, object] = {"open": ctl.breaker_open, "window": cfg.window}
    if ctl.breaker_open:
        return out | {"would_trip": False, "signals": [], "reason": ""}
    guard = submit_guard(ac, parsed.effect, None, breakers=breakers, approvals=ApprovalRules())
    fresh: list[str] = []
    brings_new = False
    if cfg.max_new_targets is not None:
        watched = guard.watched
        if watched is None:
            watched = () if guard.target is None else ((ac.name, "", guard.target),)
        if watched:
            seen = store.seen_targets([(lane, v) for lane, _, v in watched])
            fresh = [
                f"{f} {v!r}" if f else repr(v) for lane, f, v in watched if (lane, v) not in seen
            ]
            brings_new = bool(fresh)
    repeat = guard.repeat_key or parsed.fingerprint
    was = store.breaker_window(ac.name, now - cfg.window, repeat)
    value = 0 if rejected or guard.value_micros is None else guard.value_micros
    counts = WindowCounts(
        was.decided + 1,
        was.rejected + int(rejected),
        was.value_micros + value,
        was.same_fingerprint + 1,  # a new row: its operation id is not in the window yet
        was.new_targets + int(brings_new),
    )
    tripped = trips(cfg, counts, repeat=repeat, keyed=bool(guard.repeat_key), fresh=fresh)
    signals = [f"{name}: {why}" for name, why in tripped]
    return out | {"would_trip": bool(tripped), "signals": signals, "reason": "; ".join(signals)}
