"""The request-keys role: a minted-id class's request key, bound once to the operation the
boundary minted for it (docs/service.md, "Operation ids: caller or minted").

A binding maps ``(scope, class, request key)`` to ``(fingerprint, operation id)``, or to a
proposal handle until an approval mints the id (the hand-over rebinds it: store/_handover.py).
It is written in its own transaction before the operation's row, so every proposal under that
key, before or after a crash between the two, journals the same operation: the primary key
decides the binding, and the operations row's unique key decides the row (invariant 1). A key
bound with another fingerprint is refused by the caller; the store records only the refusal's
audit line.
"""

from __future__ import annotations

from effectgate._core.effects import is_proposal_handle
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["RequestKeyRoles"]


class RequestKeyRoles(StoreHooks):
    def bind_request_key(
        self,
        scope: str,
        action: str,
        request_key: str,
        *,
        fingerprint: str,
        operation_id: str,
        now: float,
    ) -> tuple[str, str]:
        """``(operation id, fingerprint)`` the key is bound to: ``operation_id`` if this call
        bound it, else the earlier binding's (audited as a conflict when its fingerprint is not
        ``fingerprint``)."""

        def work(tx: SharedTx, _: Operation | None) -> tuple[str, str]:
            if tx.rows(
                "INSERT INTO request_keys (scope, action, request_key, fingerprint, "
                "operation_id, created_at) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING "
                "RETURNING 1",
                (scope, action, request_key, fingerprint, operation_id, now),
            ):
                detail = {"action": action, "request_key": request_key, "fingerprint": fingerprint}
                # A proposal handle is no operation id: the id is minted at its approval.
                kind = (
                    "proposal_handle_bound"
                    if is_proposal_handle(operation_id)
                    else ("operation_id_minted")
                )
                tx.audit(kind, detail, now, scope, operation_id)
                return operation_id, fingerprint
            row = tx.rows(
                "SELECT operation_id, fingerprint FROM request_keys WHERE scope = ? AND "
                "action = ? AND request_key = ?",
                (scope, action, request_key),
            )[0]
            return str(row[0]), str(row[1])

        what = f"bind request key {scope}:{action}"
        bound = self._run(work, what, Hold(key=(scope, operation_id)))
        if bound[1] != fingerprint:
            # Its own transaction, in the bound operation's audit lane; nothing else changes.
            self._run(
                lambda tx, _: tx.audit(
                    "request_key_conflict",
                    {
                        "action": action,
                        "request_key": request_key,
                        "stored_fingerprint": bound[1],
                        "offered_fingerprint": fingerprint,
                    },
                    now,
                    scope,
                    bound[0],
                ),
                f"audit {what}",
                Hold(key=(scope, bound[0])),
            )
        return bound
