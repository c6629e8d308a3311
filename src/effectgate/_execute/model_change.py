"""A model change restarts the measurement (issue 39 item 13; :mod:`effectgate._core.model_window`).

Before a proposal of a class with ``model_window`` is journalled, its provenance (the intent's
``proposed_by`` model and harness version) is looked up in a per-gate set; the first sight in
this process asks the store, which opens the window (shadow mode on, the ``model-changed``
alert) only the first time any process sees it. So the proposal that brought the new model is
itself shadowed, and a class that sees no new provenance pays one set lookup per proposal.
The provenance is an audit field: it can only put the class in shadow mode, never out of it.
"""

from __future__ import annotations

from collections.abc import Callable

from effectgate._core.intent import ActionClass, Intent
from effectgate._execute.alerts import AlertSink, deliver
from effectgate.store.roles import Store

__all__ = ["Seen", "note_provenance"]

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
