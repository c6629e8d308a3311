"""The model windows role: one shadow comparison window per class and provenance, opened with
the class's shadow mode and its alert in one transaction, and closed with its outcome, the lift
of shadow mode it allows and its alert in another (docs/controls.md, Shadow mode)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from effectgate._core.controls import Alert
from effectgate._core.model_window import ModelWindow
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, where

__all__ = ["ModelWindowRoles"]

#: Who turns shadow mode on for a model change (a system actor, never an operator's name).
ACTOR = "system:model-change"


class ModelWindowRoles(StoreHooks):
    def open_model_window(
        self,
        action: str,
        model: str | None,
        harness_version: str | None,
        *,
        now: float,
        period: float,
    ) -> ModelWindow | None:
        """The first time ``action`` sees this provenance: record its window, turn the class's
        shadow mode on and record the alert; None when the provenance was seen before."""
        window = ModelWindow(action, model, harness_version, now, now + period)

        def work(tx: SharedTx, _: Operation | None) -> ModelWindow | None:
            fresh = tx.rows(
                "INSERT INTO model_windows (action, model, harness_version, opened_at, "
                "closes_at) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                (action, model or "", harness_version or "", now, window.closes_at),
            )
            if not fresh:
                return None
            ctl = tx.controls(action)
            if not ctl.shadow:
                tx.save_controls(
                    replace(ctl, shadow=True, updated_by=ACTOR, updated_at=now), at=now
                )
                tx.release_holds(action)  # a held row of a class in shadow mode is shadowed
            tx.audit("model_window_opened", {**window.to_dict(), "operator": ACTOR}, now)
            alert = window.alert()
            tx.record_alert(
                alert.kind, alert.subject, alert.action, alert.message, alert.detail, alert.at
            )
            return window

        return self._run(work, f"model window {action}", Hold(exclusive_class=action))

    def close_model_window(
        self,
        window: ModelWindow,
        *,
        outcome: str,
        compared: int,
        disagreement_rate: float,
        lift_shadow: bool,
        alert: Alert | None,
        now: float,
    ) -> ModelWindow | None:
        """End an open ``window`` with its ``outcome`` and figures, record ``alert`` and, with
        ``lift_shadow``, turn the class's shadow mode off if it is still the model change's
        (:func:`_still_ours`); None if the window was closed already (another process)."""
        key = (window.action, window.model or "", window.harness_version or "")

        def work(tx: SharedTx, _: Operation | None) -> ModelWindow | None:
            if not tx.rows(
                "UPDATE model_windows SET closed_at = ?, outcome = ?, compared = ?, "
                "disagreement_rate = ? WHERE action = ? AND model = ? AND harness_version = ? "
                "AND closed_at IS NULL RETURNING 1",
                (now, outcome, compared, disagreement_rate, *key),
            ):
                return None
            closed = replace(
                window,
                closed_at=now,
                outcome=outcome,
                compared=compared,
                disagreement_rate=disagreement_rate,
            )
            ctl = tx.controls(window.action)
            lifted = (
                lift_shadow
                and ctl.shadow
                and _still_ours(tx, closed, ctl.updated_by, ctl.updated_at)
            )
            if lifted:
                tx.save_controls(
                    replace(ctl, shadow=False, updated_by=ACTOR, updated_at=now), at=now
                )
            detail = {**closed.to_dict(), "shadow_lifted": lifted, "operator": ACTOR}
            tx.audit("model_window_closed", detail, now)
            if alert is not None:
                tx.record_alert(
                    alert.kind, alert.subject, alert.action, alert.message, alert.detail, alert.at
                )
            return closed

        return self._run(
            work, f"close model window {window.action}", Hold(exclusive_class=window.action)
        )

    def model_windows(self, action: str | None = None) -> list[ModelWindow]:
        """Every window opened, oldest first (of ``action`` only, if given)."""
        clause, args = where((("action =", action),))
        return [
            _window(r)
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM model_windows {clause} ORDER BY opened_at, action",
                args,
                "model_windows",
            )
        ]


_COLUMNS = (
    "action, model, harness_version, opened_at, closes_at, closed_at, outcome, compared, "
    "disagreement_rate"
)


def _window(r: Sequence[Any]) -> ModelWindow:
    return ModelWindow(
        str(r[0]),
        r[1] or None,
        r[2] or None,
        float(r[3]),
        float(r[4]),
        None if r[5] is None else float(r[5]),
        None if r[6] is None else str(r[6]),
        None if r[7] is None else int(r[7]),
        None if r[8] is None else float(r[8]),
    )


def _still_ours(
    tx: SharedTx, closed: ModelWindow, updated_by: str | None, updated_at: float | None
) -> bool:
    """Whether shadow mode is still the model changes' to lift: a model window changed the
    class's controls last (no operator has since), no other window of the class is open, and
    none was demoted since that change (a demotion keeps shadow on for an operator)."""
    if updated_by != ACTOR or updated_at is None:
        return False
    others = tx.rows(
        "SELECT 1 FROM model_windows WHERE action = ? AND NOT (model = ? AND "
        "harness_version = ?) AND (closed_at IS NULL OR (outcome = 'demoted' AND "
        "closed_at >= ?)) LIMIT 1",
        (closed.action, closed.model or "", closed.harness_version or "", updated_at),
    )
    return not others
