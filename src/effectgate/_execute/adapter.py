"""The adapter protocol: the only code that talks to a venue, and the only holder of its credential.

An adapter is constructed with its endpoint and credential by the operator's configuration. What
it receives per call is an :class:`OutboundRequest`: the operation key (used as the venue's
idempotency token) and the validated, canonical effect fields. Nothing the agent wrote beyond
those fields reaches it (invariant 6).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from effectgate.errors import AdapterError

__all__ = [
    "Adapter",
    "DryRun",
    "Listing",
    "OutboundRequest",
    "Outcome",
    "ReadsPrecondition",
    "Receipt",
    "Speculates",
    "SpeculationPassThrough",
    "VenueRecord",
    "iter_records",
    "speculator",
    "unkeyed",
]

#: Prefix of the operation key given to a venue record that carries none (made outside the
#: boundary, e.g. in the venue's dashboard). It holds no ``:``, so no ledger row can match it.
UNKEYED_PREFIX = "!unkeyed/"


def unkeyed(venue_id: str) -> str:
    """The sweep key of a record with no operation key: one orphan per record, never merged."""
    return f"{UNKEYED_PREFIX}{venue_id}"


class Listing(StrEnum):
    """How an adapter's venue can be enumerated; the reconciler's sweep follows it.

    ``key_order``: :meth:`Adapter.records` pages every record sorted by (key, venue id).
    ``time_window``: the venue lists by creation time (Stripe) or by its own id (EC2), never by
    key; :meth:`Adapter.window_records` yields the records created in a time window, in any
    order, and the reconciler sorts them into key order itself (bounded memory, spilling).
    ``probe``: the venue cannot be listed; only :meth:`Adapter.probe` per operation key.
    """

    KEY_ORDER = "key_order"
    TIME_WINDOW = "time_window"
    PROBE = "probe"


class Outcome(StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """What the executor hands an adapter: never a credential, endpoint or free text."""

    operation_key: str
    action: str
    effect: Mapping[str, str | int | bool]


@dataclass(frozen=True, slots=True)
class Receipt:
    """The adapter's account of one call.

    ``not_applied`` must carry ``proof`` (the venue's explicit refusal); anything less certain is
    ``unknown`` and leaves the operation uncertain for the reconciler.
    """

    outcome: Outcome
    venue_id: str | None = None
    proof: str | None = None
    detail: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome is Outcome.APPLIED and not self.venue_id:
            raise ValueError("an applied receipt needs the venue's id")
        if self.outcome is Outcome.NOT_APPLIED and not self.proof:
            raise ValueError("a not_applied receipt needs proof from the venue")


@dataclass(frozen=True, slots=True, order=True)
class VenueRecord:
    """One effect as the venue records it. Sorted by (operation_key, venue_id)."""

    operation_key: str
    venue_id: str


class Adapter(ABC):
    """Base class for venue adapters. Subclasses hold their credential privately."""

    #: Registry name that action classes refer to.
    name: str = "adapter"
    #: How the venue can be enumerated (see :class:`Listing`).
    listing: Listing = Listing.KEY_ORDER
    #: With ``time_window``: how far back (seconds) the venue still lists every record it made,
    #: ended ones included (EC2 drops terminated instances after a while). The sweep judges
    #: absence only for ledger rows submitted inside that window; older uncertain rows are
    #: settled by per-key probes.
    listing_lookback: float | None = None

    @abstractmethod
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        """Send the effect once, with ``request.operation_key`` as the idempotency token.

        Raise nothing for venue-side refusals (return ``not_applied`` with proof). Raising, or
        exceeding ``timeout``, means the outcome is unknown; the row stays uncertain.
        """

    @abstractmethod
    def probe(self, operation_key: str) -> list[str]:
        """Venue ids of every record under ``operation_key`` (empty: not visible now).

        Read-only. Raise :class:`~effectgate.errors.AdapterError` when the venue cannot answer.
        """

    @abstractmethod
    def records(self, after: VenueRecord | None, limit: int) -> list[VenueRecord]:
        """Up to ``limit`` venue records strictly after ``after``, sorted by (key, venue id).

        Each record is one effect, enumerated individually, so several effects under one key are
        visible (invariant 5).
        """

    def window_records(self, start: float, end: float) -> Iterator[VenueRecord]:
        """Every venue record created in ``[start, end]`` (epoch seconds), in any order.

        Only for ``listing = time_window``. Every record of the window once, effectgate's or
        not (an effect made outside the boundary must show as an orphan); a record without an
        operation key is yielded under :func:`unkeyed` (its own orphan).
        """
        raise NotImplementedError(f"{type(self).__name__} does not list by time window")

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing to close
        """Release connections. Optional."""


def iter_records(adapter: Adapter, page_size: int = 1000) -> Iterator[VenueRecord]:
    """Every venue record in key order, fetched page by page (bounded memory)."""
    after: VenueRecord | None = None
    while True:
        page = adapter.records(after, page_size)
        yield from page
        if len(page) < page_size:
            return
        after = page[-1]


# --- the optional capability to speculate (seed 000) --------------------------------------


@dataclass(frozen=True, slots=True)
class DryRun:
    """A sandbox's verdict on one request, without any effect.

    ``verdict``: ``ALLOW``, ``DENY`` or ``RETRYABLE_TIMEOUT``; ``reason`` says why.
    ``sandbox_key``: the idempotency key the sandbox says it used (None: it did not say).
    ``subject``: the operation key the sandbox says it validated (None: the one it was given).
    ``expires_in``: seconds from when the dry run was asked for that the verdict may be
    committed (the executor turns it into an expiry on its own clock, from before the call).
    """

    verdict: str
    reason: str
    sandbox_key: str | None
    expires_in: float
    subject: str | None = None
    evidence: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in ("ALLOW", "DENY", "RETRYABLE_TIMEOUT"):
            raise ValueError(f"verdict {self.verdict!r} is not ALLOW, DENY or RETRYABLE_TIMEOUT")


@runtime_checkable
class Speculates(Protocol):
    """An adapter that can dry-run a request at its venue's sandbox.

    ``request.operation_key`` is the ledger key: a sandbox that honours it uses it as its own.
    ``attempt`` is how many times the proposal arrived, for the sandbox's audit only. The call
    must have no effect at the venue; raising means no verdict (treated as a timeout).
    """

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun: ...


@runtime_checkable
class ReadsPrecondition(Protocol):
    """An adapter that can read the venue state an approval is given against (optional).

    ``read_precondition`` returns the resource state the effect depends on (an account
    balance, a position, an order book level) as JSON-able data; an approval binds its
    fingerprint, and the pre-dispatch check re-reads and compares it (docs/authority.md). It
    must have no effect at the venue; raising means the state is unknown.
    """

    def read_precondition(
        self, action: str, effect: Mapping[str, str | int | bool], *, timeout: float
    ) -> Mapping[str, object]: ...


def speculator(adapter: Adapter) -> Speculates | None:
    """The adapter as a speculator, or None when it cannot speculate (an adapter may say so
    at run time with a false ``can_speculate``)."""
    if isinstance(adapter, Speculates) and getattr(adapter, "can_speculate", True):
        return adapter
    return None


class SpeculationPassThrough:
    """For wrappers that hold the real adapter as ``inner`` (timing, counting): they can
    speculate exactly when ``inner`` can, and forward the dry run unchanged."""

    inner: Adapter

    @property
    def can_speculate(self) -> bool:
        return speculator(self.inner) is not None

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        inner = speculator(self.inner)
        if inner is None:
            raise AdapterError(f"{self.inner.name}: this adapter cannot speculate")
        return inner.speculate(request, attempt=attempt, timeout=timeout)
