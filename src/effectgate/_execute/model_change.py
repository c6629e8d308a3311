"""A model change restarts the measurement (issue 39 item 13; :mod:`effectgate._core.model_window`).

Before a proposal of a class with ``model_window`` is journalled, its provenance (the intent's
``proposed_by`` model and harness version) is looked up in a per-gate set; the first sight in
this process asks the store, which opens the window (shadow mode on, the ``model-changed``
alert) only the first time any process sees it. So the proposal that brought the new model is
itself shadowed, and a class that sees no new provenance pays one set lookup per proposal.
The provenance is an audit field: it can only put the class in shadow mode, never out of it.

:func:`settle_model_windows` (a maintenance rule) ends the windows: each open window whose time
or count is up is judged on its own provenance's compared cases
(:func:`effectgate._core.model_window.judge`) and closed with its outcome, shadow mode lifted
only on a pass (or a failure the class only pages on); a window past its time with too few
cases raises ``model-window-overdue`` and stays open.
"""

from __future__ import annotations

from collections.abc import Callable

from effectgate._core.controls import Alert
from effectgate._core.intent import ActionClass, Intent, Registry
from effectgate._core.model_window import ModelWindow, judge
from effectgate._execute.alerts import AlertSink, deliver, raise_alert
from effectgate.store.roles import Store

__all__ = ["Seen", "note_provenance", "settle_model_windows"]

#: ``(class, model, harness version)`` a gate has seen (and the store recorded).
Seen = set[tuple[str, str | None, str | None]]


def note_provenance(
    store: Store,
    seen: Seen,
    ac: ActionClass,
    parsed: Intent,
    clock: Callable[[], float],
    alerts: AlertSink | None,
) -> None:
    """Open the class's comparison window if this provenance is new; deliver its alert."""
    period = ac.model_window
    if period is None:
        return
    by = parsed.audit.get("proposed_by")
    by = by if isinstance(by, dict) else {}
    model, harness = by.get("model"), by.get("harness_version")
    key = (
        ac.name,
        model if isinstance(model, str) else None,
        harness if isinstance(harness, str) else None,
    )
    if key in seen:
        return
    window = store.open_model_window(key[0], key[1], key[2], now=clock(), period=period)
    seen.add(key)
    if window is not None:
        deliver(alerts, window.alert())


def settle_model_windows(
    store: Store, registry: Registry, sink: AlertSink | None, *, now: float
) -> list[Alert]:
    """End every open window whose time or count is up; the alerts raised for the first time."""
    raised: list[Alert] = []
    for window in store.model_windows():
        if window.closed_at is not None or window.action not in registry:
            continue
        ac = registry.get(window.action)
        end = ac.model_window_end
        compared, disagreed = _measured(store, window, by_count=end.cases is not None)
        verdict = judge(window, end, compared, disagreed, now)
        if verdict is None:
            continue
        if verdict.outcome == "overdue":
            if verdict.alert is not None and raise_alert(store, sink, verdict.alert):
                raised.append(verdict.alert)
            continue
        closed = store.close_model_window(
            window,
            outcome=verdict.outcome,
            compared=compared,
            disagreement_rate=disagreed / compared,
            lift_shadow=verdict.lift_shadow,
            alert=verdict.alert,
            now=now,
        )
        if closed is not None and verdict.alert is not None:
            deliver(sink, verdict.alert)  # recorded in the closing transaction
            raised.append(verdict.alert)
    return raised


def _measured(store: Store, window: ModelWindow, *, by_count: bool) -> tuple[int, int]:
    """``(compared, disagreed)``: the window's own provenance's cases since it opened (until
    its time, unless it ends by count, when an overdue window keeps measuring)."""
    compared = disagreed = 0
    for pair in store.shadow_pairs(window.action):
        at = pair.at
        if (pair.model, pair.harness_version) != (window.model, window.harness_version):
            continue
        if at is None or at < window.opened_at or (not by_count and at >= window.closes_at):
            continue
        verdict = pair.agrees
        if verdict is not None:
            compared += 1
            disagreed += not verdict
    return compared, disagreed
