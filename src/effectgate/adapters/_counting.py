"""An adapter wrapper that counts calls and keeps every request (what reached the venue)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    OutboundRequest,
    Receipt,
    SpeculationPassThrough,
    VenueRecord,
)

__all__ = ["CountingAdapter"]


class CountingAdapter(SpeculationPassThrough, Adapter):
    """Delegates to ``inner``; counts calls and keeps every :class:`OutboundRequest` it saw.

    A request is recorded before it is forwarded, so a call that raises still counts.
    """

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = inner.name  # registers under the wrapped adapter's name
        # A wrapper lists the way its venue does (time-window venues included).
        self.listing = inner.listing
        self.listing_lookback = inner.listing_lookback
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

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        with self._lock:
            self.probe_calls += 1
        return self.inner.probe(operation_key, timeout=timeout)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        with self._lock:
            self.records_calls += 1
        return self.inner.records(after, limit, timeout=timeout)

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        return self.inner.window_records(start, end, timeout=timeout)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"CountingAdapter({self.inner!r}, execute_calls={self.execute_calls})"
