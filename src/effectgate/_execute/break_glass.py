"""Loud use of a break-glass grant: every dispatch under one is audited and alerted.

Creating a break-glass grant is audited and alerted by the store (``grant_break_glass``); this
module makes each *use* loud too. The grant authoriser (:func:`~effectgate._execute.authority.
grant_authoriser`) notes which grant covered an operation; when that grant is a break-glass one:

* :meth:`BreakGlassUses.in_tx` (an in-transaction check of the pre-dispatch pipeline) writes a
  ``grant_break_glass_used`` audit entry on the operation and records a ``break-glass-use``
  alert, in the SAME transaction that writes ``submitted``: a use that commits is always on
  the record, and one that rolls back (held, refused, lost race) leaves nothing;
* :meth:`BreakGlassUses.after_commit` hands the alert to the gate's sink once committed.

The note travels by operation key, not by context variable: the dispatch transaction may run
on another thread (SQLite's group commit), and a retried transaction reads it again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from effectgate._core.controls import Alert
from effectgate._core.grants import Grant
from effectgate._execute.alerts import AlertSink, deliver
from effectgate._execute.predispatch import Refusal
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["ALERT_KIND", "AUDIT_KIND", "BreakGlassUses"]

AUDIT_KIND = "grant_break_glass_used"
ALERT_KIND = "break-glass-use"

#: Notes kept for dispatches that never reached their commit (held, refused): bounded.
_MAX_NOTES = 4096


class BreakGlassUses:
    """The notes between the authoriser and the dispatch transaction of one gate."""

    def __init__(self, sink: AlertSink | None = None) -> None:
        self.sink = sink
        self._lock = threading.Lock()
        self._covering: OrderedDict[str, Grant] = OrderedDict()
        self._pending: dict[str, Alert] = {}

    def note(self, op_key: str, grant: Grant | None) -> None:
        """The grant that covered ``op_key`` just now (None: none did, or not break-glass)."""
        with self._lock:
            self._covering.pop(op_key, None)
            self._pending.pop(op_key, None)
            if grant is not None and grant.spec.break_glass:
                self._covering[op_key] = grant
                while len(self._covering) > _MAX_NOTES:
                    self._covering.popitem(last=False)

    def in_tx(self, tx: SharedTx, row: Operation, now: float) -> Refusal | None:
        """Audit and record the use in the dispatch transaction; never refuses."""
        with self._lock:
            grant = self._covering.get(row.op_key)
        if grant is None:
            return None
        detail: dict[str, object] = {
            "grant_id": grant.grant_id,
            "holder": grant.holder,
            "created_by": grant.created_by,
            "expires_at": grant.spec.expires_at,
            "action": row.action,
        }
        tx.audit(AUDIT_KIND, detail, now, row.scope, row.operation_id)
        alert = Alert(
            ALERT_KIND,
            f"{grant.grant_id}:{row.op_key}",  # one alert per use: an operation dispatches once
            row.action,
            f"break-glass grant {grant.grant_id} of {grant.holder} used to dispatch {row.op_key}",
            detail,
            now,
        )
        tx.record_alert(
            alert.kind, alert.subject, alert.action, alert.message, alert.detail, alert.at
        )
        with self._lock:
            self._pending[row.op_key] = alert
        return None

    def after_commit(self, row: Operation) -> None:
        """Deliver the use's alert once its transaction committed."""
        with self._lock:
            self._covering.pop(row.op_key, None)
            alert = self._pending.pop(row.op_key, None)
        if alert is not None:
            deliver(self.sink, alert)
