"""Signed receipts as the agent doors hand them out (HTTP ``GET .../receipt``, MCP
``get_receipt``): the agent's own scope and capability (another tenant's operation is not
found), the service's signer read once at start (docs/evidence.md, "Receipts")."""

from __future__ import annotations

from typing import Any

from effectgate._evidence.receipt_signing import signer_from
from effectgate._evidence.signed_receipts import issue_receipts
from effectgate._service import Principal, Service

__all__ = ["ReceiptIssuer"]


class ReceiptIssuer:
    """Issues the receipts of the operations an agent may read. Built once per door: a bad
    key file stops the service at start, not at the first request."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._signer = signer_from(service.config.receipt_key_file)

    def issue(self, who: Principal, operation_id: str, history: bool) -> list[dict[str, Any]]:
        """The signed current receipt (``history``: every revision, oldest first)."""
        op = self._service.lookup(who, operation_id)  # the agent's scope and capability, or 404
        return issue_receipts(
            self._service.store,
            op.scope,
            op.operation_id,
            self._signer,
            now=self._service.clock(),
            history=history,
        )
