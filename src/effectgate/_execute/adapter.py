"""The adapter protocol: the only code that talks to a venue, and the only holder of its credential.

An adapter is constructed with its endpoint and credential by the operator's configuration. What
it receives per call is an :class:`OutboundRequest`: the operation key (used as the venue's
idempotency token) and the validated, canonical effect fields. Nothing the agent wrote beyond
those fields reaches it (invariant 6).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar, cast, runtime_checkable

from effectgate._core.frozen import quick_init
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate.errors import AdapterError, ConfigError

__all__ = [
    "ADAPTER_CALL_CEILING",
    "DEFAULT_CALL_TIMEOUT",
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
    "call_budget",
    "check_call_timeout",
    "iter_records",
    "not_sent",
    "refusal",
    "speculator",
    "unkeyed",
    "within",
    "within_each",
]

_T = TypeVar("_T")

#: No one adapter call (dispatch, probe, record listing, dry run) may be given longer than this,
#: in seconds: a stuck venue must not hold a dispatcher, a reconciler pass or a recovery probe
#: for longer. A configured timeout above it is refused (:func:`check_call_timeout`), and every
#: adapter bounds what it is given by it (:func:`call_budget`).
ADAPTER_CALL_CEILING = 30.0
#: What a probe or a listing is given when its caller names no timeout.
DEFAULT_CALL_TIMEOUT = 10.0


def check_call_timeout(value: object, field: str) -> float:
    """``value`` as a timeout of one adapter call; :class:`ConfigError` naming ``field`` when
    it is not a number in (0, :data:`ADAPTER_CALL_CEILING`]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{field}: a timeout must be a positive number of seconds")
    if value > ADAPTER_CALL_CEILING:
        raise ConfigError(
            f"{field}: {value:g}s is above the {ADAPTER_CALL_CEILING:g}s ceiling on one adapter "
            "call"
        )
    return float(value)


def call_budget(timeout: float, own: float | None = None) -> float:
    """The seconds one call may take: what the caller gave, no more than the adapter's own
    configured timeout (``own``) and never above the ceiling. A non-positive or non-numeric
    timeout raises :class:`AdapterError` (the call is not made)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise AdapterError(f"an adapter call needs a positive timeout, not {timeout!r}")
    budget = min(float(timeout), ADAPTER_CALL_CEILING)
    return budget if own is None else min(budget, own)


def within(budget: float, call: Callable[[], _T], what: str) -> _T:
    """``call()`` on a helper thread, waited for at most ``budget`` seconds; past it,
    :class:`AdapterError` (the caller treats the venue as not answering). For read-only venue
    SDK calls whose client cannot be given a per-call timeout: the abandoned thread ends with
    the client's own timeout, which the configuration caps at the ceiling."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="effectgate-venue-call")
    try:
        return pool.submit(call).result(timeout=budget)
    except FutureTimeout:
        raise AdapterError(f"{what}: no answer within {budget:g}s") from None
    finally:
        pool.shutdown(wait=False)


def within_each(budget: float, items: Iterator[_T], what: str) -> Iterator[_T]:
    """``items`` with each step (one venue page fetch at most) bounded by ``budget`` seconds,
    as :func:`within`; the listing stays lazy (bounded memory)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="effectgate-venue-list")
    done = object()
    try:
        while True:
            try:
                item = pool.submit(next, items, done).result(timeout=budget)
            except FutureTimeout:
                raise AdapterError(f"{what}: no page within {budget:g}s") from None
            if item is done:
                return
            yield cast(_T, item)
    finally:
        pool.shutdown(wait=False)


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


@quick_init
@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """What the executor hands an adapter: never a credential, endpoint or free text."""

    operation_key: str
    action: str
    effect: Mapping[str, str | int | bool]


@quick_init
@dataclass(frozen=True, slots=True)
class Receipt:
    """The adapter's account of one call.

    ``not_applied`` must carry ``proof``: a :class:`~effectgate._core.resolution.Proof` that the
    request cannot apply later (the venue's refusal, see :func:`refusal`). The gate settles the
    row ``failed`` only with such proof; a ``not_applied`` whose proof is of another kind is
    journalled as an unknown outcome and leaves the operation uncertain for the reconciler.
    ``venue_version``: the venue's version of the record it answered about (an ETag, a revision,
    an update time), when it reports one; the gate journals it with the receipt.
    """

    outcome: Outcome
    venue_id: str | None = None
    proof: Proof | None = None
    detail: Mapping[str, str] = field(default_factory=dict)
    venue_version: str | None = None

    def __post_init__(self) -> None:
        if self.outcome is Outcome.APPLIED and not self.venue_id:
            raise ValueError("an applied receipt needs the venue's id")
        if self.outcome is Outcome.NOT_APPLIED and not isinstance(self.proof, Proof):
            raise ValueError(
                "a not_applied receipt needs a Proof that it cannot apply later (a text, a "
                "digest or nothing is not proof)"
            )


def not_sent(text: str, **detail: str) -> Proof:
    """Proof that the request never left effectgate (nothing was written to the venue)."""
    return Proof(EvidenceKind.NOT_SENT, note=text[:2000], detail=detail)


def refusal(text: str, *, reference: str | None = None, **detail: str) -> Proof:
    """The venue's explicit refusal of a request, as the proof a ``not_applied`` receipt
    carries (at most 2000 characters of ``text``)."""
    return Proof(EvidenceKind.VENUE_REFUSAL, reference=reference, note=text[:2000], detail=detail)


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
    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        """Venue ids of every record under ``operation_key`` (empty: not visible now).

        Read-only. Raise :class:`~effectgate.errors.AdapterError` when the venue cannot answer,
        including when it has not answered within ``timeout`` seconds (bounded by
        :func:`call_budget`).
        """

    @abstractmethod
    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        """Up to ``limit`` venue records strictly after ``after``, sorted by (key, venue id).

        Each record is one effect, enumerated individually, so several effects under one key are
        visible (invariant 5). ``timeout`` bounds this one page's call, as for :meth:`probe`.
        """

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        """Every venue record created in ``[start, end]`` (epoch seconds), in any order.

        ``timeout`` bounds each call the listing makes to the venue (one per page), as for
        :meth:`probe`; a page not answered in time raises :class:`AdapterError`.

        Only for ``listing = time_window``. Every record of the window once, effectgate's or
        not (an effect made outside the boundary must show as an orphan); a record without an
        operation key is yielded under :func:`unkeyed` (its own orphan).
        """
        raise NotImplementedError(f"{type(self).__name__} does not list by time window")

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing to close
        """Release connections. Optional."""


def iter_records(
    adapter: Adapter, page_size: int = 1000, *, timeout: float = DEFAULT_CALL_TIMEOUT
) -> Iterator[VenueRecord]:
    """Every venue record in key order, fetched page by page (bounded memory); ``timeout``
    bounds each page's call."""
    after: VenueRecord | None = None
    while True:
        page = adapter.records(after, page_size, timeout=timeout)
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
