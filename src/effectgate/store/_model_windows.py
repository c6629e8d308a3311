"""The model windows role: one shadow comparison window per class and provenance, opened with
the class's shadow mode and its alert in one transaction (docs/controls.md, Shadow mode)."""

from __future__ import annotations

from dataclasses import replace

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

    def model_windows(self, action: str | None = None) -> list[ModelWindow]:
        """Every window opened, oldest first (of ``action`` only, if given)."""
        clause, args = where((("action =", action),))
        return [
            ModelWindow(str(r[0]), r[1] or None, r[2] or None, float(r[3]), float(r[4]))
            for r in self._rows(
                "SELECT action, model, harness_version, opened_at, closes_at FROM model_windows "
                f"{clause} ORDER BY opened_at, action",
                args,
                "model_windows",
            )
        ]
