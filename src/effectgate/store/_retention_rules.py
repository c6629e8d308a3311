"""When an audit entry that is not about an operation is no longer in force (prune, issue 20).

docs/evidence.md states these rules word for word. A prune removes such an entry outright when
:func:`entry_in_force` returns None, and otherwise carries it in its checkpoint
(store/_prune.py). Every kind not named here is in force for ever (grants, policy steps,
authority steps, key mappings, incumbent outcomes, divergences without a row, anything new).

* kill switch (``kill_switch_on|off``), breaker (``breaker_tripped``, ``breaker_reset``),
  shadow (``shadow_on|off``): superseded by a later change of the same control of the same
  class (the latest change of each control of each class is in force);
* ``principal_created`` / ``principal_revoked``: that token (name and prefix) is revoked, the
  revocation was before the cut-off and at least ``retention`` seconds ago;
* ``legal_hold_placed`` / ``legal_hold_released``: that hold is released, before the cut-off;
* a run's entries (``run_call_recorded``, ``run_call_completed``, ``run_sealed``,
  ``run_snapshot``, ``run_refused`` with no operation): the run is sealed before the cut-off
  and at least ``retention`` seconds ago, and a snapshot of it was taken after the seal.

Checkpoints (``audit_pruned``) and anchorings (``audit_anchored``) are not judged here: the
next prune's checkpoint absorbs them (store/_prune.py).

``retention``: the longest key retention / visibility horizon of the configured classes.
"""

from __future__ import annotations

import json
from typing import Any

from effectgate.store._tx import SharedTx

__all__ = ["CONTROL_FAMILIES", "RUN_KINDS", "SUPERSEDING_KINDS", "Superseding", "entry_in_force"]

CONTROL_FAMILIES: dict[str, tuple[str, ...]] = {
    "kill_switch_on": ("kill_switch_on", "kill_switch_off"),
    "kill_switch_off": ("kill_switch_on", "kill_switch_off"),
    "breaker_tripped": ("breaker_tripped", "breaker_reset"),
    "breaker_reset": ("breaker_tripped", "breaker_reset"),
    "shadow_on": ("shadow_on", "shadow_off"),
    "shadow_off": ("shadow_on", "shadow_off"),
}
RUN_KINDS = frozenset(
    {"run_call_recorded", "run_call_completed", "run_sealed", "run_snapshot", "run_refused"}
)


SUPERSEDING_KINDS: tuple[str, ...] = tuple(
    sorted({k for family in CONTROL_FAMILIES.values() for k in family})
)


class Superseding:
    """The entries a later one may supersede (control changes), read once per lane batch.

    Such entries are rare next to the operations' own, so one read of them per prune costs
    less than an index on the audit log, which every action's two entries would pay for.
    """

    def __init__(self, tx: SharedTx) -> None:
        self._tx = tx
        self._by_kind: dict[str, list[tuple[float, dict[str, Any]]]] | None = None
        self.reads = 0  # how many times the log was read (tests check it stays at one)

    def later(self, kinds: tuple[str, ...], at: float) -> list[dict[str, Any]]:
        """Details of the entries of ``kinds`` written after ``at``."""
        if self._by_kind is None:
            self._by_kind = {}
            self.reads += 1
            marks = ",".join("?" * len(SUPERSEDING_KINDS))
            for kind, when, text in self._tx.rows(
                f"SELECT kind, at, detail FROM audit_log WHERE kind IN ({marks})", SUPERSEDING_KINDS
            ):
                try:
                    detail = json.loads(str(text))
                except ValueError:
                    detail = None
                self._by_kind.setdefault(str(kind), []).append(
                    (float(when), detail if isinstance(detail, dict) else {})
                )
        return [d for k in kinds for when, d in self._by_kind.get(k, ()) if when > at]


def _control(later: Superseding, kind: str, detail: dict[str, Any], at: float) -> str | None:
    action = detail.get("action")
    if any(d.get("action") == action for d in later.later(CONTROL_FAMILIES[kind], at)):
        return None
    return f"{kind} on {action} is the control's latest change (in force)"


def _principal(
    tx: SharedTx, kind: str, detail: dict[str, Any], before: float, now: float, retention: float
) -> str | None:
    rows = tx.rows(
        "SELECT revoked_at FROM principals WHERE name = ? AND token_prefix = ?",
        (str(detail.get("name")), str(detail.get("token_prefix"))),
    )
    revoked = [float(r[0]) for r in rows if r[0] is not None]
    if revoked and max(revoked) < before and now - max(revoked) >= retention:
        return None
    return f"{kind} {detail.get('name')}: the token is live or revoked too recently"


def _hold(tx: SharedTx, kind: str, detail: dict[str, Any], before: float) -> str | None:
    rows = tx.rows(
        "SELECT released_at FROM legal_holds WHERE hold_id = ?", (str(detail.get("hold_id")),)
    )
    if rows and rows[0][0] is not None and float(rows[0][0]) < before:
        return None
    return f"{kind} {detail.get('hold_id')}: the hold is active or released after the cut-off"


def _run(
    tx: SharedTx,
    kind: str,
    scope: str | None,
    detail: dict[str, Any],
    before: float,
    now: float,
    retention: float,
) -> str | None:
    run_id = str(detail.get("run_id"))
    rows = tx.rows(
        "SELECT r.sealed_at FROM runs r WHERE r.scope = ? AND r.run_id = ? AND r.sealed_at < ? "
        "AND EXISTS (SELECT 1 FROM run_snapshots s WHERE s.scope = r.scope "
        "AND s.run_id = r.run_id AND s.created_at >= r.sealed_at)",
        (str(scope), run_id, before),
    )
    if rows and now - float(rows[0][0]) >= retention:
        return None
    return f"{kind} {scope}/{run_id}: the run is unsealed, not snapshotted or too recent"


def entry_in_force(
    tx: SharedTx,
    kind: str,
    detail_text: str,
    scope: str | None,
    at: float,
    *,
    before: float,
    now: float,
    retention: float,
    later: Superseding | None = None,
) -> str | None:
    """None when this entry (not about an operation) is no longer in force; else why it is."""
    try:
        detail = json.loads(detail_text)
    except ValueError:
        return f"{kind}: unreadable detail"
    if not isinstance(detail, dict):
        return f"{kind}: unreadable detail"
    later = later if later is not None else Superseding(tx)
    if kind in CONTROL_FAMILIES:
        return _control(later, kind, detail, at)
    if kind in ("principal_created", "principal_revoked"):
        return _principal(tx, kind, detail, before, now, retention)
    if kind in ("legal_hold_placed", "legal_hold_released"):
        return _hold(tx, kind, detail, before)
    if kind in RUN_KINDS:
        return _run(tx, kind, scope, detail, before, now, retention)
    return f"{kind}: an entry of this kind is always in force"
