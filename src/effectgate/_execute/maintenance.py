"""The maintenance rules as alerts: each rule that the seed says to page on, through one sink.

- ``orphan``: a venue record with no ledger row (an effect made outside the boundary), any > 0.
- ``duplicate-effect``: several venue records under one operation key (the venue did not honour
  the key), any > 0, alerted separately from orphans.
- ``uncertain-aged``: a row ``submitted`` for longer than its class's settlement window (the
  visibility horizon when the class declares none).
- ``horizon-retention``: a visibility horizon or settlement window not well inside the venue's
  key-retention window (a retry after the venue forgets the key is a new effect).
- ``hold-aged``: a row held by a control (``validated``, ``detail`` ``held: ...``) for longer
  than its class's hold bound (:attr:`~effectgate.ActionClass.hold_limit`): an action the agent
  decided on goes stale as it waits, and a release would still send it (invariant 11).
- ``quarantine-aged``: a row waiting in the quarantine queue for longer than its class's hold
  bound: an operator's resolution is overdue (invariants 10 and 11).
- ``rehearsal-overdue``: a class with a ``rehearsal_period`` whose kill switch was not
  rehearsed (dry run or drill) within it (:mod:`effectgate._execute.rehearsal`).
- ``model-window-failed``, ``model-window-ended``, ``model-window-overdue``: a model change's
  comparison window that ended over its disagreement limit, ended unjudged, or is past its
  time without its cases; a window that passes lifts shadow mode
  (:mod:`effectgate._execute.model_change`).

Alerts are stored once per subject, so running the checks every pass pages once.
"""

from __future__ import annotations

from effectgate._core.controls import Alert
from effectgate._core.intent import HORIZON_RETENTION_RATIO, Registry
from effectgate._core.states import State
from effectgate._execute.alerts import AlertSink, raise_alert
from effectgate._execute.model_change import settle_model_windows
from effectgate._execute.rehearsal import overdue_rehearsals
from effectgate.store.roles import Store

__all__ = ["DIVERGENCE_ALERTS", "check_maintenance", "divergence_alert"]

#: Divergence kinds that page, each under its own alert kind: effects made outside the boundary
#: (orphans, and records under keys the boundary never dispatched), keys the venue did not
#: honour, and written-off rows that appeared after all.
DIVERGENCE_ALERTS = frozenset(
    {"orphan", "duplicate-effect", "ledger-says-failed", "resolution-contradicted"}
    | {
        f"ledger-says-{s}"
        for s in (
            "proposed",
            "awaiting_approval",
            "validated",
            "rejected",
            "denied",
            "shadowed",
            "superseded",
        )
    }
)


def divergence_alert(
    kind: str,
    op_key: str,
    venue_ids: tuple[str, ...] | list[str],
    ledger_state: str | None,
    *,
    at: float,
) -> Alert:
    if kind == "duplicate-effect":
        what = "the venue did not honour the operation key"
    elif kind == "ledger-says-failed":
        what = "a row written off as failed has an effect at the venue after all"
    elif kind == "resolution-contradicted":
        what = "an operator's resolution of the row is contradicted by what the venue shows"
    elif kind == "orphan":
        what = "an effect made outside the boundary"
    else:
        what = (
            f"an effect under the key of an operation that was never dispatched (the "
            f"ledger says {ledger_state}): made outside the boundary"
        )
    return Alert(
        kind,
        f"{op_key}|{','.join(venue_ids)}",
        None,
        f"{kind} at {op_key} (venue ids {', '.join(venue_ids) or '-'}): {what}",
        {"op_key": op_key, "venue_ids": list(venue_ids), "ledger_state": ledger_state},
        at,
    )


def check_maintenance(
    store: Store,
    registry: Registry,
    sink: AlertSink | None,
    *,
    now: float,
    ratio: float = HORIZON_RETENTION_RATIO,
    limit: int = 1000,
) -> list[Alert]:
    """Evaluate every rule now; return the alerts raised for the first time."""
    raised: list[Alert] = []

    def emit(alert: Alert) -> None:
        if raise_alert(store, sink, alert):
            raised.append(alert)

    for ac in registry:
        for label, value in (
            ("visibility_horizon", ac.visibility_horizon),
            ("settlement_window", ac.settlement_window),
        ):
            if value is not None and value > ratio * ac.key_retention:
                emit(
                    Alert(
                        "horizon-retention",
                        f"{ac.name}:{label}:{value}:{ac.key_retention}",
                        ac.name,
                        f"{ac.name}: {label} {value:g}s is not well inside the key "
                        f"retention {ac.key_retention:g}s (limit {ratio:.0%})",
                        {label: value, "key_retention": ac.key_retention},
                        now,
                    )
                )
        window = ac.settlement_window or ac.visibility_horizon
        for row in store.list_operations(
            state=State.SUBMITTED, action=ac.name, older_than=now - window, limit=limit
        ):
            since = row.submitted_at or row.updated_at
            emit(
                Alert(
                    "uncertain-aged",
                    row.op_key,
                    ac.name,
                    f"{row.op_key} has been uncertain for {now - since:.0f}s, past the "
                    f"{window:g}s settlement window",
                    {"submitted_at": since, "window": window},
                    now,
                )
            )
        bound = ac.hold_limit
        for row, since in store.aged_holds(ac.name, before=now - bound, limit=limit):
            emit(
                Alert(
                    "hold-aged",
                    row.op_key,
                    ac.name,
                    f"{row.op_key} has been held for {now - since:.0f}s, past the {bound:g}s "
                    f"hold bound ({row.detail}); a release would still send it",
                    {"held_since": since, "bound": bound, "detail": row.detail},
                    now,
                )
            )
    for row in store.list_quarantined(limit=limit):
        if row.action not in registry:
            continue
        bound = registry.get(row.action).hold_limit
        if now - row.updated_at > bound:
            emit(
                Alert(
                    "quarantine-aged",
                    f"{row.op_key}@{row.updated_at!r}",
                    row.action,
                    f"{row.op_key} has waited {now - row.updated_at:.0f}s in the quarantine "
                    f"queue, past the {bound:g}s bound ({row.detail}); it needs an operator's "
                    "resolution",
                    {"quarantined_at": row.updated_at, "bound": bound, "detail": row.detail},
                    now,
                )
            )
    for alert in overdue_rehearsals(store, registry, now=now):
        emit(alert)
    raised.extend(settle_model_windows(store, registry, sink, now=now))
    # Divergences are recorded once by the reconciler; alerting from the table as well means a
    # reconciler that died between recording and alerting still pages on the next check.
    for d in store.list_divergences(limit=100_000):
        if d.kind in DIVERGENCE_ALERTS:
            emit(divergence_alert(d.kind, d.op_key, d.venue_ids, d.ledger_state, at=now))
    return raised
