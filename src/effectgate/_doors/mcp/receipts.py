"""The MCP ``get_receipt`` tool: the signed receipt of a final operation the agent proposed.

The same answer as ``GET /v1/operations/{id}/receipt`` and ``effectgate receipt get``
(docs/evidence.md, "Receipts"): the current receipt, or with ``history`` every revision oldest
first (``{"receipts": [...]}``), so a receipt a reconciliation superseded is visible. Another
tenant's operation is not found; one not final, or a service without a receipt key, is an
``isError`` result with code ``receipt_unavailable`` and its ``reason``. Read-only.
"""

from __future__ import annotations

from typing import Any, Final

import mcp_types as types

from effectgate._doors._shared.receipts import ReceiptIssuer
from effectgate._service import Principal
from effectgate.errors import IntentError
from effectgate.store.base import OPERATION_ID_PATTERN

__all__ = ["RECEIPT_TOOL", "receipt_call", "receipt_tool"]

RECEIPT_TOOL: Final = "get_receipt"
_FIELDS: Final = ("operation_id", "history")


def receipt_tool(operation_id_schema: dict[str, Any]) -> types.Tool:
    """The tool's definition (``operation_id`` as every agent tool takes it)."""
    return types.Tool(
        name=RECEIPT_TOOL,
        title="get receipt",
        description=(
            "The signed receipt of a final operation you proposed: its key, fingerprint, final "
            "state, venue id, decision and approvals, timestamps and the audit head covering "
            "it, signed with the service's Ed25519 key; anyone can verify it offline "
            "(effectgate receipt verify). history=true: every revision, oldest first."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "operation_id": operation_id_schema,
                "history": {
                    "type": "boolean",
                    "description": "Every revision, not only the current one",
                },
            },
            "required": ["operation_id"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )


def receipt_call(issuer: ReceiptIssuer, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's structured answer; bad arguments raise :class:`IntentError` naming the
    field (run it in a worker thread: it reads the ledger)."""
    extra = sorted(set(args) - set(_FIELDS))
    if extra:
        raise IntentError(
            f"unknown field {extra[0]!r} (allowed: {', '.join(_FIELDS)})",
            field=extra[0],
            reason="extra_forbidden",
        )
    op_id = args.get("operation_id")
    if not isinstance(op_id, str) or not OPERATION_ID_PATTERN.fullmatch(op_id):
        raise IntentError(
            f"must be a string matching {OPERATION_ID_PATTERN.pattern}",
            field="operation_id",
            reason="missing" if op_id is None else "invalid_operation_id",
        )
    history = args.get("history", False)
    if not isinstance(history, bool):
        raise IntentError("must be a boolean", field="history", reason="bool_type")
    receipts = issuer.issue(who, op_id, history)
    return {"receipts": receipts} if history else receipts[-1]
