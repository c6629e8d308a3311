"""Checkers for the guarantees, shared by ``effectgate demo``, the tests and users' own tests.

Each checker reads what happened (the ledger, the audit log, what reached an adapter, what the
venue holds) and returns the violations it found, each naming the invariant of
``docs/design.md`` it breaks; :func:`assert_invariants` raises :class:`InvariantViolation` with
all of them. They judge outcomes, not code paths, so they hold for any run: a scripted test, a
demo scenario, a crash schedule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, MutableMapping
from dataclasses import dataclass

from effectgate._core.intent import Registry
from effectgate._core.states import TERMINAL, State
from effectgate._execute.adapter import OutboundRequest
from effectgate.store.base import LedgerEntry, Operation
from effectgate.store.roles import Store

__all__ = [
    "InvariantViolation",
    "Violation",
    "assert_invariants",
    "at_most_one_dispatch",
    "audit_chain_verifies",
    "duplicates_reported",
    "no_dispatch_while_held",
    "no_write_off_inside_horizon",
    "terminal_entries_unchanged",
    "terminal_rows_unchanged",
    "uncertain_rows_settled",
    "write_offs_inside_horizon",
]


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken guarantee: the invariant's number and what was seen."""

    invariant: int
    message: str

    def __str__(self) -> str:
        return f"invariant {self.invariant}: {self.message}"


class InvariantViolation(AssertionError):
    """Raised by :func:`assert_invariants`; ``violations`` lists every one found."""

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__("; ".join(str(v) for v in violations))
        self.violations = violations


def at_most_one_dispatch(requests: Iterable[OutboundRequest]) -> list[Violation]:
    """Invariant 1: no operation key reached an adapter twice (``CountingAdapter.requests``)."""
    counts = Counter(r.operation_key for r in requests)
    return [
        Violation(1, f"{key} was dispatched {n} times")
        for key, n in sorted(counts.items())
        if n > 1
    ]


def duplicates_reported(
    store: Store, venue_keys: Iterable[str], *, ledger_keys: Collection[str] | None = None
) -> list[Violation]:
    """Invariant 5: every key the venue holds more than once is a recorded divergence.

    ``venue_keys``: the operation key of every venue record, one per record (a paper venue's
    ``[r.operation_key for r in venue.visible_records()]``). Keys with no ledger row are
    orphans; they must be recorded too, as ``orphan``. ``ledger_keys``: every operation key
    of the ledger, when the caller has just read them (else one read per key).
    """
    counts = Counter(venue_keys)
    recorded = {(d.kind, d.op_key) for d in store.list_divergences(limit=1_000_000)}
    out: list[Violation] = []
    for key, n in sorted(counts.items()):
        scope, _, operation_id = key.partition(":")
        if not operation_id:
            known = False
        elif ledger_keys is not None:
            known = key in ledger_keys
        else:
            known = store.get(scope, operation_id) is not None
        kind = "duplicate-effect" if known and n > 1 else "orphan" if not known else None
        if kind is not None and (kind, key) not in recorded:
            out.append(Violation(5, f"{key} has {n} venue record(s) but no {kind} divergence"))
    return out


def no_write_off_inside_horizon(
    store: Store, registry: Registry, limit: int = 1_000_000
) -> list[Violation]:
    """Invariant 4: no row was written off as failed before its class's visibility horizon."""
    return write_offs_inside_horizon(
        store.list_operations(state=State.FAILED, limit=limit), registry
    )


def write_offs_inside_horizon(rows: Iterable[Operation], registry: Registry) -> list[Violation]:
    """:func:`no_write_off_inside_horizon` on given ``rows`` (others than ``failed`` are
    skipped): for a caller that already knows which rows changed."""
    out: list[Violation] = []
    for row in rows:
        if row.state is not State.FAILED:
            continue
        if not (row.detail or "").startswith("absent at the venue"):
            continue  # failed on the venue's own proof, not written off
        horizon = registry.get(row.action).visibility_horizon
        since = row.submitted_at if row.submitted_at is not None else row.created_at
        if row.updated_at - since < horizon:
            out.append(
                Violation(
                    4,
                    f"{row.op_key} written off {row.updated_at - since:g}s "
                    f"after submission, inside its {horizon:g}s horizon",
                )
            )
    return out


def audit_chain_verifies(store: Store) -> list[Violation]:
    """Invariant 8: the audit log verifies end to end against its recorded heads."""
    from effectgate._evidence.audit import verify_store

    result = verify_store(store)
    return [
        Violation(8, f"audit lane {f.lane} seq {f.seq}: {f.problem}: {f.message}")
        for f in result.findings
    ]


def terminal_rows_unchanged(
    store: Store, seen: MutableMapping[str, tuple[str, str | None]], limit: int = 1_000_000
) -> list[Violation]:
    """Invariants 1 and 10: a terminal row never changes state or venue id.

    ``seen``: ``{op_key: (state, venue_id)}`` of terminal rows seen by earlier calls; the
    caller keeps it between calls and this adds every terminal row it sees now. Reads the
    sweep's slim projection of every row (no intent or effect to decode).
    """
    return terminal_entries_unchanged(store.page_entries(None, limit), seen)


def terminal_entries_unchanged(
    entries: Iterable[LedgerEntry], seen: MutableMapping[str, tuple[str, str | None]]
) -> list[Violation]:
    """:func:`terminal_rows_unchanged` on ``entries``, which must be every row of the ledger
    (a row of ``seen`` missing from them is reported gone)."""
    out: list[Violation] = []
    now = {e.op_key: e for e in entries}
    for key, (state, venue_id) in sorted(seen.items()):
        row = now.get(key)
        if row is None or (row.state.value, row.venue_id) != (state, venue_id):
            after = "gone" if row is None else f"{row.state.value} (venue id {row.venue_id})"
            out.append(
                Violation(1, f"terminal {key} was {state} (venue id {venue_id}), now {after}")
            )
    for key, row in now.items():
        if row.state in TERMINAL and key not in seen:
            seen[key] = (row.state.value, row.venue_id)
    return out


def uncertain_rows_settled(
    store: Store, registry: Registry, now: float, limit: int = 1_000_000
) -> list[Violation]:
    """Invariants 4 and 11: after a reconcile pass at ``now``, with faults stopped, no row is
    still ``submitted`` past its class's visibility horizon (nothing waits silently)."""
    out: list[Violation] = []
    for row in store.list_operations(state=State.SUBMITTED, limit=limit):
        horizon = registry.get(row.action).visibility_horizon
        since = row.submitted_at if row.submitted_at is not None else row.created_at
        if now - since >= horizon:
            out.append(
                Violation(11, f"{row.op_key} still uncertain {now - since:g}s after submission")
            )
    return out


def no_dispatch_while_held(
    requests: Iterable[OutboundRequest], held: Collection[str]
) -> list[Violation]:
    """Invariant 7: nothing reached an adapter for a class whose kill switch or breaker held it.

    ``requests``: those made while the classes in ``held`` were stopped the whole time.
    """
    return [
        Violation(7, f"{r.operation_key} ({r.action}) dispatched while its class was held")
        for r in requests
        if r.action in held
    ]


def assert_invariants(
    store: Store,
    *,
    registry: Registry | None = None,
    requests: Iterable[OutboundRequest] | None = None,
    venue_keys: Iterable[str] | None = None,
) -> None:
    """Run every checker the arguments allow; raise :class:`InvariantViolation` if any fails."""
    found = audit_chain_verifies(store)
    if requests is not None:
        found += at_most_one_dispatch(requests)
    if venue_keys is not None:
        found += duplicates_reported(store, venue_keys)
    if registry is not None:
        found += no_write_off_inside_horizon(store, registry)
    if found:
        raise InvariantViolation(found)
