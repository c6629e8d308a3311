"""Public helpers for testing code that uses effectgate (and for effectgate's own tests).

- **A venue**: :class:`PaperVenue` and :class:`PaperAdapter`, an in-process system of record with
  fault hooks (ignore the key, read lag, injected records, failures before or after applying);
  :class:`VenueRejection`.
- **What reached the venue**: :class:`CountingAdapter` wraps any adapter and keeps every request.
- **Time**: :class:`ManualClock`, moved by hand, so horizons pass without waiting.
- **A ledger**: :func:`temporary_store`, a fresh store that is removed afterwards.
- **Crashes**: :func:`crash_at` arms a crash point for a block: the process is SIGKILLed there
  (``mode="kill"``, for a child process) or :class:`SimulatedCrash` is raised (``mode="raise"``,
  in process).
- **A whole service**: :func:`paper_service` serves the HTTP API on the paper venue on a loopback
  port, with a harness, an approver and an operator token (:class:`PaperService`): for agents
  built with the framework integrations (``examples/``) and their tests. Needs the server extra.
- **The guarantees**: :func:`assert_invariants` and the checkers it runs, each naming the
  invariant it checks (at most one dispatch per operation, every duplicate reported, nothing
  written off inside its horizon, the audit chain verifies, a terminal row never changes, every
  uncertain row settled past its horizon, nothing dispatched while its class is held).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from effectgate._evidence.invariants import (
    InvariantViolation,
    Violation,
    assert_invariants,
    at_most_one_dispatch,
    audit_chain_verifies,
    duplicates_reported,
    no_dispatch_while_held,
    no_write_off_inside_horizon,
    terminal_rows_unchanged,
    uncertain_rows_settled,
)
from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    OutboundRequest,
    Receipt,
    SpeculationPassThrough,
    VenueRecord,
)
from effectgate._execute.crashpoints import (
    CRASH_POINTS,
    CrashMode,
    SimulatedCrash,
    arm,
    armed_point,
    disarm,
)
from effectgate.adapters.conformance.kit import (
    AT_MOST_ONCE,
    EXACTLY_ONCE,
    ConformanceReport,
    VenueDriver,
    delivery_claim,
    read_report,
    run_conformance,
)
from effectgate.adapters.paper import PaperAdapter, PaperVenue, VenueRejection
from effectgate.integrations._paper import PaperService, paper_service
from effectgate.store import open_store
from effectgate.store.base import with_schema
from effectgate.store.roles import Store

__all__ = [
    "AT_MOST_ONCE",
    "CRASH_POINTS",
    "EXACTLY_ONCE",
    "ConformanceReport",
    "CountingAdapter",
    "CrashMode",
    "InvariantViolation",
    "ManualClock",
    "PaperAdapter",
    "PaperService",
    "PaperVenue",
    "SimulatedCrash",
    "VenueDriver",
    "VenueRejection",
    "Violation",
    "assert_invariants",
    "at_most_one_dispatch",
    "audit_chain_verifies",
    "crash_at",
    "delivery_claim",
    "duplicates_reported",
    "no_dispatch_while_held",
    "no_write_off_inside_horizon",
    "paper_service",
    "read_report",
    "run_conformance",
    "temporary_store",
    "terminal_rows_unchanged",
    "uncertain_rows_settled",
]


class ManualClock:
    """A clock tests move by hand: pass it as ``clock=`` to the gate, reconciler and venue."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


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


@contextmanager
def crash_at(point: str, mode: CrashMode = "raise") -> Iterator[None]:
    """Arm crash point ``point`` for the block (and disarm it after, whatever happens).

    ``raise`` (the default, for in-process tests) raises :class:`SimulatedCrash` there; ``kill``
    SIGKILLs the process (for a child process: set ``EFFECTGATE_CRASH_AT`` in its environment
    instead when it is spawned).
    """
    previous = armed_point()
    arm(point, mode)
    try:
        yield
    finally:
        if previous is None:
            disarm()
        else:
            arm(*previous)


@contextmanager
def temporary_store(url: str | None = None) -> Iterator[Store]:
    """A fresh, migrated ledger for the block, removed afterwards.

    ``url``: None for a SQLite file in a temporary folder; a ``postgresql://`` URL for a new
    schema there (dropped afterwards).
    """
    if url is None or url.startswith("sqlite"):
        folder = Path(tempfile.mkdtemp(prefix="effectgate-"))
        store = open_store(f"sqlite:///{folder / 'ledger.db'}", create=True)
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    from effectgate.store.postgres import drop_schema

    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = open_store(with_schema(url, schema), create=True)
    try:
        yield store
    finally:
        store.close()
        drop_schema(url, schema)
