"""The evidence actor's own corner of the world: a second ledger, one class, one venue, one
anchor (:mod:`effectgate._sim.actors.evidence` drives it).

Why a ledger of its own: a prune is whole-ledger. It cuts a prefix of every audit lane, and
on SQLite (one lane) that prefix holds every actor's rows. Past a class's key retention that
is correct (a retry under a pruned id is a new action), but the other actors retry their own
ids for the whole seed and the world's at-most-once checker counts requests per key for the
whole seed, so pruning the shared ledger would make every later retry look like a second
dispatch. The sibling ledger is of the seed's kind (a SQLite file, or another schema on the
PostgreSQL server of ``--store``), runs on the world's clock, and restarts from its ledger
alone whenever the world's process does.

The class ``ev_order`` keeps keys 400 s (its horizon is 60 s), so the actor's clock jumps
cross the retention window inside a seed. Its venue lists by time window, 200 s back: a
settled row's record has left the listing long before the row may be pruned, so a pruned row
never comes back as an orphan (a venue that listed every record forever would report one,
and the orphan's divergence entry, about an operation with no row, would stop every later
prune; see "What it does not cover" in docs/simulation.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from effectgate._core.intent import ActionClass, IntentBase, Registry
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._evidence.anchor import Checkpoint
from effectgate._execute.adapter import DEFAULT_CALL_TIMEOUT, Listing, VenueRecord, call_budget
from effectgate._execute.executor import Gate
from effectgate._execute.reconciler import Reconciler
from effectgate._sim.actors._kit import order_class
from effectgate._sim.stores import SimLedger
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import InstrumentId
from effectgate.store.roles import Store

__all__ = [
    "ADAPTER",
    "EV_ACTION",
    "HORIZON",
    "KEY_RETENTION",
    "LISTED",
    "LOOKBACK",
    "SCOPES",
    "EvidenceLedger",
    "MemoryAnchor",
]

EV_ACTION = "ev_order"
ADAPTER = "paper-evidence"
#: Two scopes, so a hold on a whole scope leaves the other prunable.
SCOPES = ("ev-a", "ev-b")
HORIZON = 60.0
KEY_RETENTION = 400.0
#: The venue lists this far back (plus the reconciler's horizon of overlap): well short of
#: the retention window, so a prunable row's record is no longer listed.
LOOKBACK = 200.0
LISTED = frozenset({"ABC", "XYZ-PERP"})


class EvOrder(IntentBase):
    """An order of the evidence actor's class."""

    action: Literal["ev_order"]
    instrument: InstrumentId
    quantity: int


def ev_class() -> ActionClass:
    return order_class(EV_ACTION, EvOrder, ADAPTER, horizon=HORIZON, retention=KEY_RETENTION)


class WindowPaper(PaperAdapter):
    """A paper venue listed by creation time (as Stripe is), :data:`LOOKBACK` seconds back."""

    listing = Listing.TIME_WINDOW
    listing_lookback = LOOKBACK

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        call_budget(timeout)
        return iter(
            [
                VenueRecord(r.operation_key, r.venue_id)
                for r in self.venue.visible_records()
                if start <= r.created_at <= end
            ]
        )


class MemoryAnchor:
    """An :class:`~effectgate._evidence.anchor.AnchorProvider` outside the store: it keeps
    every checkpoint it was given (the actor checks each one's heads later), no file, no
    socket. ``latest`` parses the last one back, digest and signature checked."""

    name = "memory"

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def put(self, checkpoint: Checkpoint) -> str:
        self.written.append(checkpoint.to_dict())
        return f"memory:{len(self.written)}"

    def latest(self, *, key: bytes | None) -> Checkpoint | None:
        return Checkpoint.from_dict(self.written[-1], key=key) if self.written else None

    def heads(self) -> list[tuple[int, int, str]]:
        """Every head ever anchored, ``(lane, seq, hash)``, oldest first, each once."""
        seen: dict[tuple[int, int, str], None] = {}
        for written in self.written:
            for lane, head in sorted(written["heads"].items(), key=lambda kv: int(kv[0])):
                seen[(int(lane), int(head["seq"]), str(head["hash"]))] = None
        return list(seen)


def _quiet(_: object) -> None:
    """Alert sink: divergences are this actor's workload."""


class EvidenceLedger:
    """The sibling ledger and the process over it (a gate, a reconciler, an operator's store),
    rebuilt from the ledger alone by :meth:`crash`; the venue and the anchor live outside."""

    def __init__(self, parent: SimLedger, clock: Callable[[], float]) -> None:
        self.ledger = parent.sibling("ev")
        self.clock = clock
        self.venue = PaperVenue(clock=clock, instruments=LISTED)
        self.adapter = WindowPaper(self.venue)
        self.registry = Registry([ev_class()])
        self.anchor = MemoryAnchor()
        self._build()

    def _build(self) -> None:
        adapters = {ADAPTER: self.adapter}
        self.store: Store = self.ledger.connect("sim-ev-operator")
        self.gate = Gate(
            store=self.ledger.connect("sim-ev-process"),
            registry=self.registry,
            adapters=adapters,
            policy=PolicySet({EV_ACTION: LimitPolicy()}),
            clock=self.clock,
            alerts=_quiet,
            process_id="sim-ev-process",
        )
        self.reconciler = Reconciler(
            store=self.ledger.connect("sim-ev-reconciler"),
            registry=self.registry,
            adapters=adapters,
            clock=self.clock,
            page_size=5,
            owner="sim-ev-reconciler",
            alerts=_quiet,
            # A contradiction this actor makes is about receipts: it must not open the class's
            # breaker and hold every later order (the core workload checks that trip).
            trip_on_duplicate=False,
        )

    def crash(self) -> None:
        """The world's process died, and this one with it: reopen from the ledger alone."""
        self.ledger.crash()
        self._build()
