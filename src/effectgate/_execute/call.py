"""The dispatch stage: the one outbound call for a row this process moved to ``submitted``,
then its receipt handed to the record stage.

An exception, a timeout or a lost receipt leaves the row ``submitted`` (uncertain) for the
reconciler; nothing here calls the venue twice (invariants 1, 9).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from effectgate._execute import tracing as _tracing
from effectgate._execute.adapter import Adapter, OutboundRequest, Outcome, Receipt
from effectgate._execute.crashpoints import crashpoint
from effectgate._execute.record import journal_receipt, late_receipt, unrecorded
from effectgate.errors import EffectgateError, OutcomeUnknown, StaleState, StoreError
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["call_once"]

log = logging.getLogger("effectgate.executor")


def call_once(
    store: Store, clock: Callable[[], float], adapter: Adapter, timeout: float, row: Operation
) -> Operation:
    """Call ``adapter`` once for ``row`` and journal what it answered; the row as it ends."""
    crashpoint("after_journal")
    request = OutboundRequest(operation_key=row.op_key, action=row.action, effect=row.effect)
    # Tracing off (the default) is a plain branch: no span, no attribute dict (tracing).
    traced = _tracing._tracer is not None
    where = (
        {"effectgate.operation_key": row.op_key, "effectgate.action": row.action} if traced else {}
    )
    try:
        if traced:
            with _tracing.span("effectgate.dispatch", where):
                receipt = adapter.execute(request, timeout=timeout)
        else:
            receipt = adapter.execute(request, timeout=timeout)
    except Exception as exc:
        log.warning(
            "dispatch of %s ended without a receipt (%s); left uncertain",
            row.op_key,
            type(exc).__name__,
        )
        receipt = Receipt(Outcome.UNKNOWN, detail={"error": _describe(exc)})
    crashpoint("after_venue_call")
    try:
        if traced:
            with _tracing.span(
                "effectgate.receipt", {**where, "effectgate.outcome": receipt.outcome.value}
            ):
                row = journal_receipt(store, clock(), row, receipt, request)
        else:
            row = journal_receipt(store, clock(), row, receipt, request)
    except StaleState:
        # The reconciler settled the row while the venue call was in flight. Its state
        # stands (compare-and-set); the receipt is recorded beside it, and the caller gets
        # the row as it is now, not the stale pre-call copy.
        return late_receipt(store, clock(), row, receipt, request)
    except (StoreError, OutcomeUnknown) as exc:
        # Nothing written, or the receipt may or may not be durable: the row is uncertain
        # either way and the reconciler settles it against the venue. Never dispatch again.
        log.error("receipt for %s not journalled (%s); reconciler will settle it", row.op_key, exc)
        return replace(row, cause=unrecorded(receipt, exc))
    crashpoint("after_receipt")
    return row


def _describe(exc: BaseException) -> str:
    # Adapters keep secrets out of their messages; still, cap what is journalled.
    text = str(exc) if isinstance(exc, EffectgateError) else type(exc).__name__
    return text[:500]
