"""The paper venue: an in-process reference system of record (its adapter is
:mod:`effectgate.adapters.paper`, which re-exports everything here).

Users point their harness at a :class:`PaperVenue` before going live. It behaves like a real
venue in the ways that matter to the boundary: it may or may not honour the operation key, its
read view may lag its writes, it refuses some effects, and its calls can fail before or after the
effect is applied. Methods marked *test hook* exist to drive those cases from tests. Both the
adapter and its sandbox (:mod:`effectgate.adapters._paper_sandbox`) import the venue from here.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

from effectgate._core.frozen import quick_init
from effectgate._execute.adapter import VenueRecord

__all__ = [
    "CANCEL_ACTION",
    "ORDER_ACTION",
    "EffectValue",
    "PaperRecord",
    "PaperVenue",
    "Submitted",
    "VenueRejection",
    "submitted_version",
]

EffectValue = str | int | bool


class VenueRejection(Exception):
    """The venue explicitly refused the effect: nothing was applied."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


ORDER_ACTION = "submit_order"
CANCEL_ACTION = "cancel_order"


@quick_init
@dataclass(frozen=True, slots=True)
class PaperRecord:
    """One effect at the paper venue, exactly as it was applied."""

    venue_id: str
    operation_key: str
    action: str
    effect: Mapping[str, EffectValue]
    created_at: float


class Submitted(tuple[str, bool]):
    """``(venue_id, created)`` as :meth:`PaperVenue.submit` answers, with the record's
    ``version`` as of that answer. Still a pair, so a subclass that wraps ``submit`` (counting
    or holding calls) passes it through unchanged."""

    version: int

    def __new__(cls, venue_id: str, created: bool, version: int) -> Submitted:
        made = super().__new__(cls, (venue_id, created))
        made.version = version
        return made


def submitted_version(venue: PaperVenue, answer: tuple[str, bool]) -> int | None:
    """The version :meth:`PaperVenue.submit` answered with; a subclass's ``submit`` that built
    its own pair loses it, and the record's current version is read instead."""
    if isinstance(answer, Submitted):
        return answer.version
    return venue.version(answer[0])


class PaperVenue:
    """A thread-safe in-process venue.

    Every effect is kept as its own record (never a dict keyed by operation key), so a venue that
    ignores the key shows two effects for one key (invariant 5). Reads only show records at least
    ``read_lag`` seconds old by ``clock``. Each record has a version, 1 when it is made and one
    more on each change to it (an order's cancel), reported with every answer about it.
    """

    def __init__(
        self,
        *,
        honour_key: bool = True,
        read_lag: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        instruments: frozenset[str] | None = None,
        max_quantity: int | None = None,
        strict_orders: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self._honour_key = honour_key
        self._read_lag = float(read_lag)
        self._clock = clock
        self._instruments = instruments
        self._max_quantity = max_quantity
        self._records: list[PaperRecord] = []  # creation order
        self._by_id: dict[str, PaperRecord] = {}
        self._ids_by_key: dict[str, list[str]] = {}
        # Sorted (key, venue id) index for keyed paging. New entries go to ``_pending`` and are
        # merged on the next read: list.sort on "sorted run + short sorted run" is a linear merge
        # (timsort), so bulk loads cost O(n log n) once instead of an O(n) insort per write.
        self._index: list[tuple[str, str]] = []
        self._pending: list[tuple[str, str]] = []
        self._next_serial = 1
        self._calls = 0
        self._fail_remaining = 0
        self._fail_after_apply = False
        # Order state: every submit_order record is an order, open until a cancel_order whose
        # ``order_ref`` is its venue id cancels it (docs/paper-venue.md). ``strict_orders``:
        # a cancel of an order this venue never took is refused rather than recorded.
        self._cancelled: dict[str, str] = {}  # order venue id -> the cancel's venue id
        self._versions: dict[str, int] = {}  # venue id -> its version (records are immutable)
        self._strict_orders = strict_orders

    # -- the venue's API ------------------------------------------------------------------

    def submit(
        self, operation_key: str, action: str, effect: Mapping[str, EffectValue]
    ) -> tuple[str, bool]:
        """Apply an effect; return ``(venue_id, created)``, a :class:`Submitted` that also
        carries ``version``, the record's version as of this answer (read under the same lock).

        With ``honour_key`` an existing record under ``operation_key`` is returned with
        ``created=False`` and no new effect. Raises :class:`VenueRejection` for a refused effect
        and ``ConnectionError`` for an injected fault (see :meth:`fail_next`).
        """
        with self._lock:
            self._calls += 1
            fault = self._fail_remaining > 0
            if fault:
                self._fail_remaining -= 1
                if not self._fail_after_apply:
                    raise ConnectionError("paper venue: connection lost before the call arrived")
            try:
                result = self._apply(operation_key, action, effect)
            except VenueRejection:
                if fault:  # the refusal happened, but its answer was lost with the connection
                    raise ConnectionError("paper venue: connection lost before the reply") from None
                raise
            if fault:
                raise ConnectionError("paper venue: connection lost before the reply")
            return Submitted(*result, self._versions[result[0]])

    def order_state(self, venue_id: str) -> str | None:
        """``open`` or ``cancelled`` for a submitted order; None: no such order."""
        with self._lock:
            record = self._by_id.get(venue_id)
            if record is None or record.action != ORDER_ACTION:
                return None
            return "cancelled" if venue_id in self._cancelled else "open"

    def version(self, venue_id: str) -> int | None:
        """The version of the visible record ``venue_id`` (None: no such visible record)."""
        with self._lock:
            record = self._by_id.get(venue_id)
            if record is None or record.created_at > self._cutoff():
                return None
            return self._versions[venue_id]

    def find_versioned(self, operation_key: str) -> list[tuple[str, int]]:
        """:meth:`find`, each venue id with its record's version, in one read."""
        with self._lock:
            cutoff = self._cutoff()
            ids = self._ids_by_key.get(operation_key, [])
            return [(i, self._versions[i]) for i in ids if self._by_id[i].created_at <= cutoff]

    def refusal(self, effect: Mapping[str, EffectValue]) -> str | None:
        """Why the venue would refuse ``effect`` (None: it would accept it). Applies nothing."""
        try:
            self._check(effect)
        except VenueRejection as exc:
            return exc.reason
        return None

    def position(self, instrument: str) -> tuple[Decimal, int]:
        """The net position in ``instrument`` (buys minus sells of applied orders) and how
        many orders made it: the state an approval of an order is given against."""
        net = Decimal(0)
        count = 0
        with self._lock:
            for r in self._records:
                if r.effect.get("instrument") != instrument or "quantity" not in r.effect:
                    continue
                qty = Decimal(str(r.effect["quantity"]))
                net += -qty if r.effect.get("side") == "sell" else qty
                count += 1
        return net, count

    def visible_records(self) -> list[PaperRecord]:
        """Records the read view shows now, in creation order."""
        with self._lock:
            cutoff = self._cutoff()
            return [r for r in self._records if r.created_at <= cutoff]

    def find(self, operation_key: str) -> list[str]:
        """Venue ids of visible records under ``operation_key``, in creation order."""
        with self._lock:
            cutoff = self._cutoff()
            ids = self._ids_by_key.get(operation_key, [])
            return [i for i in ids if self._by_id[i].created_at <= cutoff]

    def records_after(self, after: VenueRecord | None, limit: int) -> list[VenueRecord]:
        """Up to ``limit`` visible records strictly after ``after``, sorted by (key, venue id)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._lock:
            self._merge_pending()
            cutoff = self._cutoff()
            start = (
                0
                if after is None
                else bisect_right(self._index, (after.operation_key, after.venue_id))
            )
            page: list[VenueRecord] = []
            index, position = self._index, start
            # Records still inside the lag are skipped, not paged: the reader has not seen them.
            while position < len(index) and len(page) < limit:
                key, venue_id = index[position]
                if self._by_id[venue_id].created_at <= cutoff:
                    page.append(VenueRecord(key, venue_id))
                position += 1
            return page

    # -- test hooks -----------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Test hook: every :meth:`submit` call, including refused and failed ones."""
        with self._lock:
            return self._calls

    @property
    def effect_count(self) -> int:
        """Test hook: every effect applied (ground truth, ignores read lag)."""
        with self._lock:
            return len(self._records)

    def effects_for(self, operation_key: str) -> int:
        """Test hook: effects applied under ``operation_key`` (ground truth, ignores read lag)."""
        with self._lock:
            return len(self._ids_by_key.get(operation_key, []))

    def inject_record(self, operation_key: str, venue_id: str | None = None) -> str:
        """Test hook: an effect made outside the boundary (an orphan) or a late appearance.

        Subject to read lag like any other record. Returns its venue id.
        """
        with self._lock:
            if venue_id is not None and venue_id in self._by_id:
                raise ValueError(f"venue id {venue_id!r} already exists")
            return self._append(operation_key, "injected", {}, venue_id)

    def set_honour_key(self, honour: bool) -> None:
        """Test hook: whether later submits deduplicate on the operation key."""
        with self._lock:
            self._honour_key = honour

    def set_read_lag(self, seconds: float) -> None:
        """Test hook: how far the read view trails writes."""
        with self._lock:
            self._read_lag = float(seconds)

    def fail_next(self, n: int, *, after_apply: bool) -> None:
        """Test hook: the next ``n`` submits raise ``ConnectionError``.

        ``after_apply=False``: nothing happened at the venue. ``after_apply=True``: the effect
        was applied (as a normal submit would) but the caller never hears: the crash/timeout
        window that leaves an operation uncertain.
        """
        if n < 0:
            raise ValueError("n must be non-negative")
        with self._lock:
            self._fail_remaining = n
            self._fail_after_apply = after_apply

    # -- internals (caller holds the lock) --------------------------------------------------

    def _apply(
        self, operation_key: str, action: str, effect: Mapping[str, EffectValue]
    ) -> tuple[str, bool]:
        if self._honour_key:
            existing = self._ids_by_key.get(operation_key)
            if existing:
                return existing[0], False
        self._check(effect)
        if action == CANCEL_ACTION:
            return self._cancel(operation_key, effect), True
        return self._append(operation_key, action, effect, None), True

    def _cancel(self, operation_key: str, effect: Mapping[str, EffectValue]) -> str:
        ref = effect.get("order_ref")
        order = self._by_id.get(ref) if isinstance(ref, str) else None
        if order is None or order.action != ORDER_ACTION:
            if self._strict_orders:
                raise VenueRejection(f"no order {ref!r} to cancel")
            return self._append(operation_key, CANCEL_ACTION, effect, None)
        if order.effect.get("instrument") != effect.get("instrument"):
            raise VenueRejection(f"order {ref} is not for {effect.get('instrument')!r}")
        if ref in self._cancelled:
            raise VenueRejection(f"order {ref} is already cancelled")
        venue_id = self._append(operation_key, CANCEL_ACTION, effect, None)
        self._cancelled[str(ref)] = venue_id
        self._versions[str(ref)] += 1  # the order changed: open -> cancelled
        return venue_id

    def _check(self, effect: Mapping[str, EffectValue]) -> None:
        if self._instruments is not None:
            instrument = effect.get("instrument")
            if not isinstance(instrument, str) or instrument not in self._instruments:
                raise VenueRejection(f"unknown instrument {instrument!r}")
        if self._max_quantity is not None and "quantity" in effect:
            raw = effect["quantity"]
            try:
                quantity = Decimal(str(raw)) if not isinstance(raw, bool) else None
            except InvalidOperation:
                quantity = None
            if quantity is None or not quantity.is_finite():
                raise VenueRejection(f"quantity {raw!r} is not a number")
            if quantity > self._max_quantity:
                raise VenueRejection(f"quantity {raw} over maximum {self._max_quantity}")

    def _append(
        self,
        operation_key: str,
        action: str,
        effect: Mapping[str, EffectValue],
        venue_id: str | None,
    ) -> str:
        if venue_id is None:
            venue_id = self._mint_id()
        record = PaperRecord(
            venue_id=venue_id,
            operation_key=operation_key,
            action=action,
            effect=MappingProxyType(dict(effect)),  # a snapshot: later caller edits can't reach it
            created_at=self._clock(),
        )
        self._records.append(record)
        self._by_id[venue_id] = record
        self._versions[venue_id] = 1
        self._ids_by_key.setdefault(operation_key, []).append(venue_id)
        self._pending.append((operation_key, venue_id))
        return venue_id

    def _mint_id(self) -> str:
        while True:  # skip ids a test injected explicitly
            venue_id = f"V-{self._next_serial:06d}"
            self._next_serial += 1
            if venue_id not in self._by_id:
                return venue_id

    def _merge_pending(self) -> None:
        if self._pending:
            self._pending.sort()
            self._index.extend(self._pending)
            self._index.sort()  # two sorted runs: timsort merges them in linear time
            self._pending.clear()

    def _cutoff(self) -> float:
        if self._read_lag <= 0:
            return float("inf")  # no lag: every record is visible, whatever the clock says
        return self._clock() - self._read_lag
