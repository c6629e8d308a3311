"""Mutations of the reconciler, the operator and the audit chain: what the sweep settles,
reports and writes, and what an operator's waits end in. Each replaces one named production
function or method for a run (see :mod:`effectgate._sim.mutations`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from effectgate._core.chain import GENESIS
from effectgate._core.states import State
from effectgate._execute.reconciler import Tally
from effectgate._sim.actor import Mutation

__all__ = ["RECONCILE"]

F = Callable[..., Any]


def _always_past(original: F) -> F:
    # An absent row is written off as soon as it is seen missing, inside its horizon.
    def _past_horizon(self: Any, age: float, horizon: float) -> bool:
        return True

    return _past_horizon


def _abort_on_refused(original: F) -> F:
    # A repair the state table refuses aborts the whole pass.
    def _refused_move(self: Any, entry: Any, target: Any, run: Any, exc: Exception) -> None:
        raise exc

    return _refused_move


def _first_ledger_page(original: F) -> F:
    # The sweep reads only the first page of the ledger's rows.
    def _ledger(self: Any, actions: list[str]) -> Iterator[Any]:
        yield from self.store.page_entries(None, self.page_size, actions)

    return _ledger


def _first_venue_page(original: F) -> F:
    # The sweep reads only the first page of the venue's listing.
    def iter_records(adapter: Any, page_size: int = 1000, **kw: Any) -> Iterator[Any]:
        return islice(original(adapter, page_size, **kw), page_size)

    return iter_records


def _one_record_per_key(original: F) -> F:
    # Several venue records under one key are judged as the first one alone.
    def _present(self: Any, entry: Any, venue_ids: list[str], run: Any) -> None:
        original(self, entry, venue_ids[:1], run)

    return _present


def _orphans_ignored(original: F) -> F:
    # Venue records with no ledger row are skipped instead of reported.
    def _unmatched(self: Any, key: str, venue_ids: list[str], run: Any) -> None:
        if self._fresh(key) is not None:
            original(self, key, venue_ids, run)

    return _unmatched


def _disagreements_unrecorded(original: F) -> F:
    # A ledger state the venue contradicts is not recorded as a divergence.
    def _diverge(self: Any, kind: str, *args: Any) -> bool:
        if kind.startswith("ledger-says-"):
            return False
        return bool(original(self, kind, *args))

    return _diverge


def _state_table_skipped(original: F) -> F:
    # The sweep's repairs skip the state table, so a terminal row can be moved.
    def check_transition(current: Any, target: Any) -> None:
        return None

    return check_transition


def _no_trip(original: F) -> F:
    # A duplicate effect is reported but the class's breaker stays shut.
    def _trip(self: Any, entry: Any, venue_ids: list[str]) -> None:
        return None

    return _trip


def _absence_as_applied(original: F) -> F:
    # An uncertain row still absent past its horizon is confirmed instead of written off.
    def _absent(self: Any, entry: Any, run: Any) -> None:
        horizon = self.registry.get(entry.action).visibility_horizon
        if (
            entry.state is State.SUBMITTED
            and entry.submitted_at is not None
            and self.clock() - entry.submitted_at >= horizon
        ):
            self._move(
                entry, State.ACKNOWLEDGED, run, "confirmed", venue_id="V-assumed",
                tally=Tally.CONFIRMED,
            )  # fmt: skip
            return
        original(self, entry, run)

    return _absent


def _never_expire(original: F) -> F:
    # Approvals left open are never denied: the wait has no bound.
    def expire_approvals(self: Any) -> list[Any]:
        return []

    return expire_approvals


def _unlinked(original: F) -> F:
    # Each audit entry is chained to the genesis instead of to the entry before it.
    def chain_hash(prev_hash: str, digest: str) -> str:
        return str(original(GENESIS, digest))

    return chain_hash


_R = "effectgate._execute.reconciler"

RECONCILE: tuple[Mutation, ...] = (
    Mutation(
        "write_off_inside_horizon",
        "4 no_write_off_inside_horizon",
        f"{_R}:Reconciler._past_horizon",
        _always_past,
    ),
    Mutation(
        "abort_pass_on_refused_move",
        "11 no_pass_aborts",
        f"{_R}:Reconciler._refused_move",
        _abort_on_refused,
    ),
    Mutation(
        "ledger_first_page_only",
        "11 uncertain_rows_settled",
        f"{_R}:Reconciler._ledger",
        _first_ledger_page,
    ),
    Mutation(
        "listing_first_page_only", "5 duplicates_reported", f"{_R}:iter_records", _first_venue_page
    ),
    Mutation(
        "duplicates_hidden",
        "5 duplicates_reported",
        f"{_R}:Reconciler._present",
        _one_record_per_key,
    ),
    Mutation(
        "orphans_ignored", "5 duplicates_reported", f"{_R}:Reconciler._unmatched", _orphans_ignored
    ),
    Mutation(
        "disagreement_unrecorded",
        "5 venue_records_accounted",
        f"{_R}:Reconciler._diverge",
        _disagreements_unrecorded,
    ),
    Mutation(
        "repair_skips_state_table",
        "11 no_pass_aborts",
        f"{_R}:check_transition",
        _state_table_skipped,
    ),
    Mutation(
        "duplicate_leaves_breaker_shut",
        "7 breaker_trips_on_duplicate",
        f"{_R}:Reconciler._trip",
        _no_trip,
    ),
    Mutation(
        "absence_confirmed_as_applied",
        "4 acknowledged_at_the_venue",
        f"{_R}:Reconciler._absent",
        _absence_as_applied,
    ),
    Mutation(
        "approvals_never_expire",
        "11 approvals_expire",
        "effectgate._execute.operator:Operator.expire_approvals",
        _never_expire,
    ),
    Mutation(
        "audit_link_skipped",
        "8 audit_chain_verifies",
        "effectgate.store._sqlite_schema:chain_hash",
        _unlinked,
    ),
)
