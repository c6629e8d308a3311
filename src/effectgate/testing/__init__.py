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

from collections.abc import Iterator
from contextlib import contextmanager

from effectgate._core.clock import ManualClock
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
from effectgate._execute.crashpoints import (
    CRASH_POINTS,
    CrashMode,
    SimulatedCrash,
    arm,
    armed_point,
    disarm,
)
from effectgate.adapters._counting import CountingAdapter
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
from effectgate.store._scratch import temporary_store

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
