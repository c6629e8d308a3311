"""Provider receipts about model calls, written once over the hooks (part of roles.Runs).

A receipt is a provider's authenticated terminal answer about one journalled model call. It is
checked against the call as journalled now (routing evidence, any local return) inside the
transaction that keeps it, which first locks the run's row like every other writer of the run.
Receipts are keyed by their digest: one that disagrees with a kept one is kept beside it.
"""

from __future__ import annotations

import json
from typing import Any

from effectgate._core.runs import ProviderReceipt, check_scope
from effectgate.errors import RunCallConflict, RunCallNotFound
from effectgate.store._hooks import StoreHooks
from effectgate.store._runs import CALL_COLUMNS, LOCK_RUN, call_record, refusing, run_lane
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, dumps

__all__ = ["ProviderReceiptRoles"]


class ProviderReceiptRoles(StoreHooks):
    """Keep and read provider receipts."""

    def put_provider_receipt(
        self,
        scope: str,
        run_id: str,
        slot: str,
        receipt: ProviderReceipt,
        *,
        now: float,
        actor: str,
    ) -> bool:
        """Keep an authenticated receipt about the model call in ``slot`` (True: new).

        Refused (:class:`RunCallConflict`) when it contradicts the call as journalled now.
        A receipt that disagrees with one kept before is kept beside it, never over it.
        """
        scope = check_scope(scope)
        digest = receipt.digest()

        def work(tx: SharedTx, _: Operation | None) -> bool:
            tx.rows(LOCK_RUN, (scope, run_id))  # ordered with snapshots of the run
            found = tx.rows(
                f"UPDATE run_calls SET effects = effects WHERE scope = ? AND run_id = ? "
                f"AND slot = ? RETURNING {CALL_COLUMNS}",
                (scope, run_id, slot),
            )
            if not found:
                raise RunCallNotFound(f"no call in slot {slot!r} of run {run_id!r}")
            why = receipt.contradiction(call_record(found[0]))
            if why is not None:
                raise RunCallConflict(f"the receipt contradicts the journal: {why}")
            stored = tx.rows(
                "INSERT INTO provider_receipts (scope, run_id, slot, receipt_digest, receipt, "
                "recorded_at, recorded_by) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (scope, run_id, slot, digest, dumps(receipt.to_dict()), now, actor),
            )
            if stored:
                tx.audit(
                    "provider_receipt_recorded",
                    {
                        "run_id": run_id,
                        "slot": slot,
                        "receipt_digest": digest,
                        **receipt.to_dict(),
                        "by": actor,
                    },
                    now,
                    scope,
                )
            return bool(stored)

        return refusing(
            self,
            lambda: self._run(work, f"provider receipt {run_id}", run_lane(scope, run_id)),
            now=now,
            scope=scope,
            what={"action": "provider_receipt", "run_id": run_id, "slot": slot, "by": actor},
        )

    def provider_receipts(
        self, scope: str, run_id: str, slot: str | None = None
    ) -> list[tuple[str, ProviderReceipt]]:
        """``(slot, receipt)`` pairs of a run (of one slot), in slot and digest order."""
        extra, args = ("AND slot = ? ", (slot,)) if slot is not None else ("", ())
        rows = self._rows(
            "SELECT slot, receipt FROM provider_receipts WHERE scope = ? AND run_id = ? "
            f"{extra}ORDER BY slot, receipt_digest",
            (scope, run_id, *args),
            "provider_receipts",
        )
        return [(str(r[0]), _receipt(json.loads(r[1]))) for r in rows]


def _receipt(d: dict[str, Any]) -> ProviderReceipt:
    d["observed_at"] = float(d["observed_at"])
    return ProviderReceipt(**d)
