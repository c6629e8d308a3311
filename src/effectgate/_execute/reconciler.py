"""The reconciler: the venue, not the ledger, decides what happened.

Two passes share the work:

* ``sweep`` merge-joins the ledger (paged by operation key) with the venue's own enumeration
  (every record individually, in key order). It confirms uncertain rows it finds, writes off
  uncertain rows absent past their visibility horizon (invariant 4), and reports divergences:
  ``duplicate-effect`` (several records under one key, invariant 5), ``orphan`` (a record with no
  ledger row), ``ledger-says-<state>`` (the venue has it, the ledger says otherwise) and
  ``missing-at-venue`` (acknowledged, but absent past the horizon). Memory is bounded by the page
  size, never by the ledger. One replica sweeps at a time (the store's sweep lock).
* Repairs (compare-and-sets) are buffered and written in batches of at most ``flush_every``
  (``Store.transition_many``: one transaction each), at the end of every sweep and after every
  leased batch of ``repair``. A move that turns out stale (another replica or a late receipt
  settled the row first) is neither counted nor noted: it was not this pass's repair.
* ``repair`` probes leased uncertain rows one by one, so replicas that do not hold the sweep lock
  still share the repair work. Every repair is a compare-and-set, so two replicas never apply one
  twice, and divergences are stored once, so they alarm once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from itertools import groupby

from effectgate._core.controls import Alert
from effectgate._core.intent import Registry
from effectgate._core.states import State, check_transition
from effectgate._core.venue import ReadView
from effectgate._execute import tracing as _tracing
from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    Listing,
    VenueRecord,
    check_call_timeout,
    iter_records,
)
from effectgate._execute.alerts import AlertSink, default_sink, deliver, raise_alert
from effectgate._execute.maintenance import DIVERGENCE_ALERTS, check_maintenance, divergence_alert
from effectgate._execute.windowing import judged_in_window, sorted_window
from effectgate.errors import AdapterError, InvalidTransition
from effectgate.store.base import LedgerEntry, Move
from effectgate.store.roles import Store

__all__ = ["ALARM_KINDS", "NEVER_DISPATCHED", "ReconcileReport", "Reconciler", "Tally"]

log = logging.getLogger("effectgate.reconciler")

#: States of a row that was never dispatched: a venue record under its key is an effect made
#: outside the boundary, an alarm exactly like an orphan.
NEVER_DISPATCHED = frozenset(
    {
        State.PROPOSED,
        State.AWAITING_APPROVAL,
        State.VALIDATED,
        State.REJECTED,
        State.DENIED,
        State.SHADOWED,
        State.SUPERSEDED,
    }
)
#: Divergences that page (and make ``effectgate reconcile`` exit 3): an effect outside the
#: boundary, a key the venue did not honour, an acknowledged effect gone, a written-off row
#: that appeared after all.
ALARM_KINDS = frozenset(
    {"duplicate-effect", "orphan", "missing-at-venue", "ledger-says-failed"}
    | {f"ledger-says-{s.value}" for s in NEVER_DISPATCHED}
    | {"resolution-contradicted"}
)


@dataclass
class ReconcileReport:
    """What one pass saw and did. ``new_divergences`` are first sightings (alarmed once)."""

    swept: bool = False
    ledger_rows: int = 0
    venue_records: int = 0
    confirmed: int = 0
    written_off: int = 0
    still_uncertain: int = 0
    quarantined: int = 0
    probe_errors: int = 0
    new_divergences: list[tuple[str, str, tuple[str, ...], str | None]] = field(
        default_factory=list
    )
    divergences_seen: int = 0
    repaired: list[tuple[str, str]] = field(default_factory=list)

    @property
    def alarms(self) -> dict[str, int]:
        """``{kind: n}`` of the new divergences (``effectgate reconcile`` exits 3 on any); those
        in ``DIVERGENCE_ALERTS`` also page through the alert sink."""
        out: dict[str, int] = {}
        for kind, *_ in self.new_divergences:
            out[kind] = out.get(kind, 0) + 1
        return out

    def tally(self, kind: Tally) -> None:
        """Count one applied repair."""
        if kind is Tally.CONFIRMED:
            self.confirmed += 1
        elif kind is Tally.WRITTEN_OFF:
            self.written_off += 1
        else:
            self.quarantined += 1


class Tally(Enum):
    """Which count an applied repair adds to."""

    CONFIRMED = "confirmed"
    WRITTEN_OFF = "written_off"
    QUARANTINED = "quarantined"


@dataclass
class _Pass:
    """One pass's work: the report it fills, and the repairs decided but not yet written
    (``(move, op_key, note, tally)``, at most ``flush_every``)."""

    report: ReconcileReport
    pending: list[tuple[Move, str, str, Tally | None]] = field(default_factory=list)


class Reconciler:
    """Settles uncertain rows and reports divergences, once or as a standing job."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        adapters: Mapping[str, Adapter],
        clock: Callable[[], float] = time.time,
        page_size: int = 1000,
        owner: str | None = None,
        sweep_ttl: float = 3600.0,
        lease_seconds: float = 60.0,
        keep_repaired: bool = True,
        alerts: AlertSink | None = None,
        flush_every: int = 500,
        trip_on_duplicate: bool = True,
        authorise_read: Callable[[str, tuple[str, ...]], str | None] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.store = store
        #: Seconds each probe and each listing page may take (a venue that does not answer in
        #: time counts as a probe error, never as absence); at most the adapter-call ceiling.
        self.call_timeout = check_call_timeout(call_timeout, "call_timeout")
        #: The host's hook authorising the reconciler's reads (docs/continuations.md): called
        #: with an adapter's name and the classes read through it; a reason refuses the read
        #: (nothing is read, so nothing is written off), and a hook that raises refuses too.
        #: None: effectgate's own configuration decides (every configured adapter is read).
        self.authorise_read = authorise_read
        self.registry = registry
        self.adapters = dict(adapters)
        self.clock = clock
        self.page_size = page_size
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.sweep_ttl = sweep_ttl
        # How long a probing replica owns the uncertain rows it claimed before others may.
        self.lease_seconds = lease_seconds
        # Large sweeps would hold every repair in memory; callers that only want counts say so.
        self.keep_repaired = keep_repaired
        #: Called with the number of ledger rows swept so far, once per page (progress bars).
        self.progress: Callable[[int], None] | None = None
        # With a sink, new orphans and duplicate effects page at once, and every pass also
        # runs the maintenance rules (aged uncertain rows, horizon vs retention).
        # No sink given: the default one logs every alert at ERROR, so the maintenance rules
        # (aged uncertain rows, horizon vs retention) run for library users too (invariant 11).
        self.alerts = alerts if alerts is not None else default_sink()
        if flush_every < 1:
            raise ValueError("flush_every must be at least 1")
        #: Buffered repairs are written once this many are pending (and at every pass's end).
        self.flush_every = flush_every
        #: Records held in memory when sorting a time window's listing (more spill to disk).
        self.window_chunk = 10_000
        #: A duplicate effect means the venue did not honour the key, which invalidates the
        #: execute-once guarantee for the class: open its breaker until an operator looks.
        self.trip_on_duplicate = trip_on_duplicate

    def run_once(self) -> ReconcileReport:
        """Sweep if no other replica is sweeping; otherwise take a share of the repairs."""
        with _tracing.span("effectgate.reconcile", {"effectgate.owner": self.owner}):
            with self.store.sweep_lock(self.owner, now=self.clock(), ttl=self.sweep_ttl) as mine:
                report = self.sweep() if mine else None
            if report is None:
                report = self.repair()
            _tracing.event(
                "effectgate.reconciled",
                {"effectgate.repaired": len(report.repaired), "effectgate.swept": report.swept},
            )
        if self.alerts is not None:
            check_maintenance(self.store, self.registry, self.alerts, now=self.clock())
        return report

    def watch(
        self,
        interval: float,
        stop: threading.Event,
        on_report: Callable[[ReconcileReport], None] | None = None,
    ) -> None:
        """Run until ``stop`` is set: reconciliation as a standing job, not as recovery."""
        while not stop.is_set():
            report = self.run_once()
            if on_report is not None:
                on_report(report)
            stop.wait(interval)

    # --- sweep --------------------------------------------------------------------------

    def sweep(self) -> ReconcileReport:
        """Merge-join every adapter's venue records with the ledger rows of its classes."""
        run = _Pass(ReconcileReport(swept=True))
        by_adapter: dict[str, list[str]] = {}
        for name in self.registry.names():
            by_adapter.setdefault(self.registry.get(name).adapter, []).append(name)
        with self._batched(run):
            for adapter_name, actions in sorted(by_adapter.items()):
                if self._may_read(adapter_name, sorted(actions)):
                    self._sweep_one(self.adapters[adapter_name], sorted(actions), run)
        return run.report

    def _ledger(self, actions: list[str]) -> Iterator[LedgerEntry]:
        after: str | None = None
        done = 0
        while True:
            page = self.store.page_entries(after, self.page_size, actions)
            yield from page
            done += len(page)
            if self.progress is not None:
                self.progress(done)
            if len(page) < self.page_size:
                return
            after = page[-1].op_key

    def _venue_stream(
        self, adapter: Adapter, actions: list[str]
    ) -> tuple[Iterator[VenueRecord], float | None]:
        """The adapter's records in key order, and the start of the window they cover
        (None: every record ever made). See docs/adapters.md, "How your venue is listed"."""
        if adapter.listing is Listing.KEY_ORDER:
            return iter_records(adapter, self.page_size, timeout=self.call_timeout), None
        now = self.clock()
        lookback = adapter.listing_lookback
        if lookback is None or lookback <= 0:
            raise ValueError(
                f"adapter {adapter.name!r}: time_window listing needs listing_lookback"
            )
        # The horizon is the overlap: a record may carry a venue timestamp a little before the
        # ledger's submitted_at (clocks differ); list that much earlier than the rows judged.
        overlap = max(self.registry.get(a).visibility_horizon for a in actions)
        start = now - lookback
        records = adapter.window_records(start - overlap, now, timeout=self.call_timeout)
        return sorted_window(records, chunk=self.window_chunk), start

    def _sweep_one(self, adapter: Adapter, actions: list[str], run: _Pass) -> None:
        if adapter.listing is Listing.PROBE:
            # Nothing to list. A class with no read view still has its rows judged by
            # _absent (the one place that says what absence means for it: never a write-off);
            # other classes wait for repair()'s per-key probes.
            for row in self._ledger(actions):
                run.report.ledger_rows += 1
                if self.registry.get(row.action).venue.read_view is ReadView.NONE:
                    self._absent(row, run)
            return
        stream, window_start = self._venue_stream(adapter, actions)
        venue: Iterator[tuple[str, Iterator[VenueRecord]]] = groupby(
            stream, key=lambda r: r.operation_key
        )
        ledger = self._ledger(actions)
        entry = next(ledger, None)
        group = next(venue, None)
        while entry is not None or group is not None:
            if entry is not None and (group is None or entry.op_key < group[0]):
                run.report.ledger_rows += 1
                if window_start is None or judged_in_window(entry.submitted_at, window_start):
                    self._absent(entry, run)
                elif entry.state is State.SUBMITTED:
                    # Older than the window: the listing is no evidence either way (EC2 drops
                    # terminated instances), so only a probe of its key settles it. repair()
                    # probes only while another replica holds the sweep: a lone sweeper that
                    # skipped the row would leave it uncertain for good (invariant 11).
                    self._probe(adapter, entry, run)
                entry = next(ledger, None)
                continue
            if group is None:  # unreachable: the loop condition and the branch above exclude it
                break
            key, records = group[0], [r.venue_id for r in group[1]]
            run.report.venue_records += len(records)
            if entry is None or entry.op_key > key:
                self._unmatched(key, records, run)
            else:
                run.report.ledger_rows += 1
                self._present(entry, records, run)
                entry = next(ledger, None)
            group = next(venue, None)

    def _absent(self, entry: LedgerEntry, run: _Pass) -> None:
        """A ledger row with no venue record visible now."""
        action = self.registry.get(entry.action)
        horizon = action.visibility_horizon
        now = self.clock()
        no_read_view = action.venue.read_view is ReadView.NONE
        if entry.state is State.SUBMITTED:
            if entry.submitted_at is not None and (
                self._past_horizon(now - entry.submitted_at, horizon)
            ):
                if no_read_view:
                    # Absence at a venue that cannot be read proves nothing: never written
                    # off as failed, the row goes to the operators' queue (invariant 10).
                    self._move(
                        entry,
                        State.QUARANTINED,
                        run,
                        "unsettled-no-read-view",
                        detail=f"uncertain {horizon:g}s after submission at a venue with no "
                        "read view: an operator settles it with evidence",
                        tally=Tally.QUARANTINED,
                    )
                    return
                self._move(
                    entry,
                    State.FAILED,
                    run,
                    "absent-past-horizon",
                    detail=f"absent at the venue {horizon:g}s after submission",
                    tally=Tally.WRITTEN_OFF,
                )
            else:
                run.report.still_uncertain += 1
                self._note(
                    run,
                    entry.op_key,
                    "uncertain-no-read-view" if no_read_view else "still-uncertain-inside-horizon",
                )
        elif no_read_view:
            return  # an acknowledged row is never "missing" where nothing can be read
        elif (
            entry.state is State.ACKNOWLEDGED
            and now - entry.updated_at >= horizon
            and self._diverge("missing-at-venue", entry.op_key, [], entry.state.value, run)
        ):
            self._check_resolution(entry, [], run)

    def _present(self, entry: LedgerEntry, venue_ids: list[str], run: _Pass) -> None:
        """A ledger row with one or more venue records."""
        if len(venue_ids) > 1:
            if (
                self._diverge("duplicate-effect", entry.op_key, venue_ids, entry.state.value, run)
                and self.trip_on_duplicate
            ):
                self._trip(entry, venue_ids)
            if entry.state in NEVER_DISPATCHED:
                # Effects under a key the boundary never sent: alarm as such too.
                self._diverge(
                    f"ledger-says-{entry.state.value}",
                    entry.op_key,
                    venue_ids,
                    entry.state.value,
                    run,
                )
            if entry.state not in (State.ACKNOWLEDGED, State.FAILED, State.QUARANTINED):
                self._move(
                    entry,
                    State.QUARANTINED,
                    run,
                    "duplicate-effect",
                    detail=f"{len(venue_ids)} venue records under one operation key",
                    tally=Tally.QUARANTINED,
                )
            return
        if entry.state is State.SUBMITTED:
            self._move(
                entry,
                State.ACKNOWLEDGED,
                run,
                "confirmed",
                venue_id=venue_ids[0],
                tally=Tally.CONFIRMED,
            )
        elif entry.state is not State.ACKNOWLEDGED or entry.venue_id != venue_ids[0]:
            fresh = self._fresh(entry.op_key)
            if fresh is not None and fresh.state is not entry.state:
                # The row moved after its page was read (dispatched, receipted): judge the
                # row as it is now, not the snapshot, or live traffic raises false alarms.
                self._present(fresh, venue_ids, run)
                return
            if self._diverge(
                f"ledger-says-{entry.state.value}", entry.op_key, venue_ids, entry.state.value, run
            ):
                self._check_resolution(entry, venue_ids, run)

    def _check_resolution(self, entry: LedgerEntry, venue_ids: list[str], run: _Pass) -> None:
        """Whether the divergence just seen contradicts an operator's resolution of the row:
        then it is also a ``resolution-contradicted`` divergence (issue 20), naming who
        resolved it. Read only on a first sighting, so it costs nothing on the sweep's path."""
        resolved = _operator_resolution(self.store, entry.op_key)
        if resolved is None:
            return
        outcome, venue_id, by = resolved
        contradicted = (
            (outcome == "failed" and bool(venue_ids))
            or (outcome == "applied" and not venue_ids)
            or (outcome == "applied" and venue_id is not None and venue_ids != [venue_id])
        )
        if contradicted:
            log.error(
                "resolution by %s (%s) of %s contradicted by the venue: %s",
                by,
                outcome,
                entry.op_key,
                venue_ids or "no record",
            )
            self._diverge(
                "resolution-contradicted", entry.op_key, venue_ids, entry.state.value, run
            )

    def _unmatched(self, key: str, venue_ids: list[str], run: _Pass) -> None:
        """Venue records whose key the ledger page did not hold: an orphan, or a row too new."""
        fresh = self._fresh(key)
        if fresh is None:
            self._unmatched_row(key, venue_ids, run)
            return
        # Journalled (always before the venue call) after the sweep read that ledger page.
        run.report.ledger_rows += 1
        self._present(fresh, venue_ids, run)

    def _unmatched_row(self, key: str, venue_ids: list[str], run: _Pass) -> None:
        """Records under a key with no row: the record of a row a prune removed is accounted
        by what the prune kept (store/_prune.py); any other record is an effect made outside
        the boundary (``orphan``) or, beside the pruned row's own, a second one."""
        scope, sep, operation_id = key.partition(":")
        pruned = self.store.pruned_operation(scope, operation_id) if sep else None
        if pruned is not None and pruned[1] is not None and pruned[1] in venue_ids:
            run.report.ledger_rows += 1
            if venue_ids != [pruned[1]]:
                self._diverge("duplicate-effect", key, venue_ids, pruned[0], run)
            return
        self._diverge("orphan", key, venue_ids, None, run)

    def _fresh(self, op_key: str) -> LedgerEntry | None:
        """The row under ``op_key`` as it stands now (None: no row, or not a ledger key)."""
        scope, sep, operation_id = op_key.partition(":")
        if not sep:
            return None
        row = self.store.get(scope, operation_id)
        if row is None:
            return None
        return LedgerEntry(
            op_key=row.op_key,
            action=row.action,
            state=row.state,
            venue_id=row.venue_id,
            submitted_at=row.submitted_at,
            updated_at=row.updated_at,
        )

    # --- repair (probe) -------------------------------------------------------------------

    def repair(self, limit: int | None = None) -> ReconcileReport:
        """Probe leased uncertain rows individually (shared between replicas)."""
        run = _Pass(ReconcileReport())
        batch = self.page_size if limit is None else min(limit, self.page_size)
        seen: set[str] = set()
        with self._batched(run):
            while True:
                entries = self.store.lease_uncertain(
                    self.owner, now=self.clock(), lease_seconds=self.lease_seconds, limit=batch
                )
                fresh = [e for e in entries if e.op_key not in seen]
                if not fresh:
                    return run.report
                for entry in fresh:
                    seen.add(entry.op_key)
                    self._repair_one(entry, run)
                # The leased batch's repairs are written before the next lease is taken.
                self._flush(run)
                if limit is not None and len(seen) >= limit:
                    return run.report
        return run.report  # unreachable: the loop returns

    def _may_read(self, adapter_name: str, actions: list[str]) -> bool:
        if self.authorise_read is None:
            return True
        try:
            refused = self.authorise_read(adapter_name, tuple(actions))
        except Exception as exc:  # a configured hook that errors denies
            refused = f"the read authorisation hook failed ({type(exc).__name__})"
        if refused is None:
            return True
        log.warning("reads of %s (%s) not authorised: %s", adapter_name, actions, refused)
        return False

    def _repair_one(self, entry: LedgerEntry, run: _Pass) -> None:
        adapter_name = self.registry.get(entry.action).adapter
        adapter = self.adapters[adapter_name]
        if not self._may_read(adapter_name, [entry.action]):
            run.report.probe_errors += 1
            return
        run.report.ledger_rows += 1
        self._probe(adapter, entry, run)

    def _probe(self, adapter: Adapter, entry: LedgerEntry, run: _Pass) -> None:
        """Settle one uncertain row from a probe of its key (a failed probe settles nothing)."""
        try:
            venue_ids = adapter.probe(entry.op_key, timeout=self.call_timeout)
        except AdapterError as exc:
            run.report.probe_errors += 1
            log.warning("probe of %s failed: %s", entry.op_key, exc)
            return
        run.report.venue_records += len(venue_ids)
        if venue_ids:
            self._present(entry, venue_ids, run)
        else:
            self._absent(entry, run)

    # --- helpers --------------------------------------------------------------------------

    def _move(
        self,
        entry: LedgerEntry,
        target: State,
        run: _Pass,
        note: str,
        *,
        venue_id: str | None = None,
        detail: str | None = None,
        tally: Tally | None = None,
    ) -> None:
        """Buffer one compare-and-set; written (and counted) by :meth:`_flush`.

        A move the state table refuses (a terminal row cannot be quarantined) is recorded as an
        ``unapplied-<target>`` divergence instead: one row never aborts a pass, nor the repairs
        buffered beside it.
        """
        try:
            check_transition(entry.state, target)
        except InvalidTransition as exc:
            self._refused_move(entry, target, run, exc)
            return
        scope, _, operation_id = entry.op_key.partition(":")
        move = Move(
            scope,
            operation_id,
            entry.state,
            target,
            venue_id=venue_id,
            detail=detail,
            audit={"by": "reconciler", "owner": self.owner, "note": note},
        )
        run.pending.append((move, entry.op_key, note, tally))
        _tracing.event(
            "effectgate.repair",
            {"effectgate.operation_key": entry.op_key, "effectgate.target": target.value},
        )
        if len(run.pending) >= self.flush_every:
            self._flush(run)

    def _past_horizon(self, age: float, horizon: float) -> bool:
        """Whether an absent ``submitted`` row, ``age`` seconds old, may be settled (invariant 4).

        Inside its visibility horizon a venue may simply not show the write yet.
        """
        return age >= horizon

    def _refused_move(
        self, entry: LedgerEntry, target: State, run: _Pass, exc: InvalidTransition
    ) -> None:
        """A move the state table refused: record it as a divergence and carry on with the pass."""
        log.error(
            "cannot move %s %s -> %s (%s); recorded as a divergence",
            entry.op_key,
            entry.state.value,
            target.value,
            exc,
        )
        self._diverge(f"unapplied-{target.value}", entry.op_key, [], entry.state.value, run)

    def _flush(self, run: _Pass) -> None:
        """Write the buffered moves in one transaction; count and note those that applied."""
        if not run.pending:
            return
        pending, run.pending = run.pending, []
        applied = self.store.transition_many([p[0] for p in pending], now=self.clock())
        for (_, op_key, note, tally), done in zip(pending, applied, strict=True):
            if not done:
                # Someone else (a replica, a late receipt) settled it first: not ours to repeat.
                continue
            if tally is not None:
                run.report.tally(tally)
            self._note(run, op_key, note)

    @contextmanager
    def _batched(self, run: _Pass) -> Iterator[None]:
        """Write the pass's buffered moves when the block ends, however it ends.

        Moves decided before an error are still written (as they were when each was its own
        transaction); a failure to write them then is logged, not raised over the first error.
        """
        try:
            yield
        except BaseException:
            try:
                self._flush(run)
            except Exception as exc:  # the original error is the one to raise
                log.warning("buffered repairs not written after an aborted pass: %s", exc)
            finally:
                run.pending.clear()
            raise
        self._flush(run)

    def _note(self, run: _Pass, op_key: str, note: str) -> None:
        if self.keep_repaired:
            run.report.repaired.append((op_key, note))

    def _diverge(
        self, kind: str, op_key: str, venue_ids: list[str], ledger_state: str | None, run: _Pass
    ) -> bool:
        """Record a divergence; True the first time it is seen (it alarmed then)."""
        run.report.divergences_seen += 1
        if not self.store.record_divergence(
            kind, op_key, venue_ids, ledger_state, now=self.clock()
        ):
            return False
        run.report.new_divergences.append((kind, op_key, tuple(venue_ids), ledger_state))
        level = (
            logging.ERROR
            if kind in ALARM_KINDS or kind.startswith("unapplied")
            else logging.WARNING
        )
        log.log(
            level,
            "divergence %s: key=%s venue_ids=%s ledger_state=%s",
            kind,
            op_key,
            venue_ids,
            ledger_state,
        )
        if self.alerts is not None and kind in DIVERGENCE_ALERTS:
            raise_alert(
                self.store,
                self.alerts,
                divergence_alert(kind, op_key, venue_ids, ledger_state, at=self.clock()),
            )
        return True

    def _trip(self, entry: LedgerEntry, venue_ids: list[str]) -> None:
        """Open the class's breaker after a duplicate effect (paged by the store's alert)."""
        why = f"{len(venue_ids)} venue records under {entry.op_key}: the key was not honoured"
        now = self.clock()
        if self.store.trip_breaker(
            entry.action, [("duplicate-effect", why)], now=now, trigger=entry.op_key
        ):
            # Recorded by the trip's transaction; delivered once it has committed.
            deliver(
                self.alerts,
                Alert(
                    "breaker-tripped",
                    f"{entry.action}@{now!r}",
                    entry.action,
                    f"breaker for {entry.action} tripped: duplicate-effect: {why}",
                    {"signals": ["duplicate-effect"], "trigger": entry.op_key},
                    now,
                ),
            )


def _operator_resolution(store: Store, op_key: str) -> tuple[str, str | None, str] | None:
    """``(outcome, venue id, by)`` of the last operator resolution in the row's audit trail."""
    scope, sep, operation_id = op_key.partition(":")
    if not sep:
        return None
    found: tuple[str, str | None, str] | None = None
    for e in store.audit_entries(scope=scope, operation_id=operation_id, limit=10_000):
        res = e.detail.get("resolution")
        if isinstance(res, Mapping) and res.get("outcome") in ("applied", "failed"):
            vid = res.get("venue_id")
            found = (str(res["outcome"]), vid if isinstance(vid, str) else None, str(res.get("by")))
    return found
