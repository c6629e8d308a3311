"""Public helpers for testing code that uses effectgate.

- :class:`PaperVenue`, :class:`PaperAdapter`, :class:`VenueRejection`: an in-process venue with
  test hooks (key honouring, read lag, orphans, faults before/after apply).
- :class:`CountingAdapter`: wraps any adapter and records what reached it, to assert "zero venue
  calls" or "only validated effect fields reached the adapter".
"""

from __future__ import annotations

import threading

from effectgate.adapters.paper import PaperAdapter, PaperVenue, VenueRejection
from effectgate.execute.adapter import Adapter, OutboundRequest, Receipt, VenueRecord

__all__ = ["CountingAdapter", "PaperAdapter", "PaperVenue", "VenueRejection"]


class CountingAdapter(Adapter):
    """Delegates to ``inner``; counts calls and keeps every :class:`OutboundRequest` it saw.

    A request is recorded before it is forwarded, so a call that raises still counts.
    """

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = inner.name  # registers under the wrapped adapter's name
        self._lock = threading.Lock()
        self.requests: list[OutboundRequest] = []
        self.execute_calls = 0
        self.probe_calls = 0
        self.records_calls = 0

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        with self._lock:
            self.execute_calls += 1
            self.requests.append(request)
        return self.inner.execute(request, timeout=timeout)

    def probe(self, operation_key: str) -> list[str]:
        with self._lock:
            self.probe_calls += 1
        return self.inner.probe(operation_key)

    def records(self, after: VenueRecord | None, limit: int) -> list[VenueRecord]:
        with self._lock:
            self.records_calls += 1
        return self.inner.records(after, limit)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"CountingAdapter({self.inner!r}, execute_calls={self.execute_calls})"


# --- crash points (see effectgate.execute.crashpoints) ---
