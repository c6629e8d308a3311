"""The rehearsals role: every kill switch rehearsal, a dry run or a drill, with its audit entry
in the same transaction (docs/controls.md, Kill switch)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from effectgate._core.rehearsal import Rehearsal
from effectgate.store._hooks import StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker, dumps, where

__all__ = ["RehearsalRoles"]

_COLUMNS = "id, action, kind, operator, at, detail"


class RehearsalRoles(StoreHooks):
    def record_rehearsal(
        self, action: str, kind: str, *, operator: str, detail: Mapping[str, object], now: float
    ) -> Rehearsal:
        """Record one rehearsal of ``action``'s kill switch (audited as ``kill_rehearsal``)."""

        def work(tx: SharedTx, _: Operation | None) -> Rehearsal:
            (rid,) = tx.one(
                "INSERT INTO kill_rehearsals (action, kind, operator, at, detail) "
                "VALUES (?,?,?,?,?) RETURNING id",
                (action, kind, operator, now, dumps(detail)),
            )
            tx.audit(
                "kill_rehearsal",
                {
                    "action": action,
                    "kind": kind,
                    "operator": operator,
                    "rehearsal": int(rid),
                    **dict(detail),
                    **credential_marker(operator),
                },
                now,
            )
            return Rehearsal(int(rid), action, kind, operator, now, dict(detail))

        return self._run(work, f"rehearsal {action}")

    def list_rehearsals(self, action: str | None = None, *, limit: int = 100) -> list[Rehearsal]:
        """Rehearsals, newest first (of ``action`` only, if given)."""
        clause, args = where((("action =", action),))
        return [
            Rehearsal(int(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), json.loads(r[5]))
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM kill_rehearsals {clause} ORDER BY at DESC, id DESC "
                "LIMIT ?",
                (*args, limit),
                "list_rehearsals",
            )
        ]

    def last_rehearsals(self) -> dict[str, float]:
        """When each class was last rehearsed, of either kind."""
        return {
            str(r[0]): float(r[1])
            for r in self._rows(
                "SELECT action, max(at) FROM kill_rehearsals GROUP BY action", (), "rehearsals"
            )
        }
