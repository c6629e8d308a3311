"""The simulator's own checkers: guarantees judged from the simulated world's ground truth.

The shared checkers of :mod:`effectgate._evidence.invariants` judge what any run leaves behind;
these also use what only the simulator knows (what the venue really applied, which records it
injected from outside, which operations an operator approved), so a planted bug in the
mutation catalogue (:mod:`effectgate._sim.mutations`) cannot hide behind a plausible ledger.
Each returns violations naming the invariant of docs/design.md it breaks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from decimal import Decimal

from effectgate._core.states import State
from effectgate._evidence.invariants import Violation
from effectgate._execute.adapter import Adapter, OutboundRequest, Receipt
from effectgate.adapters._counting import CountingAdapter
from effectgate.adapters.paper import PaperVenue
from effectgate.store.base import LedgerEntry
from effectgate.store.roles import Store

__all__ = [
    "Witness",
    "acknowledged_at_the_venue",
    "approvals_expire",
    "dispatched_as_authorised",
    "failed_only_with_proof",
    "journalled_before_dispatch",
    "venue_records_accounted",
]

#: The mark of a write-off as absent past the horizon (the reconciler's detail).
WRITE_OFF = "absent at the venue"


class Witness(CountingAdapter):
    """A :class:`CountingAdapter` that also notes the ledger state of each request's row at the
    moment the request reached it (invariant 3: ``submitted`` is durable before the call).

    ``store_of`` returns the current process's store (it changes on every simulated crash).
    """

    def __init__(self, inner: Adapter, store_of: Callable[[], Store]) -> None:
        super().__init__(inner)
        self._store_of = store_of
        self.states: list[str] = []  # parallel to ``requests``

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        scope, _, operation_id = request.operation_key.partition(":")
        row = self._store_of().get(scope, operation_id)
        self.states.append("none" if row is None else row.state.value)
        return super().execute(request, timeout=timeout)


def journalled_before_dispatch(
    requests: Iterable[OutboundRequest], states: Iterable[str]
) -> list[Violation]:
    """Invariant 3: every request found its row already ``submitted`` in the ledger."""
    return [
        Violation(3, f"{r.operation_key} reached the adapter while its row was {s}")
        for r, s in zip(requests, states, strict=True)
        if s != State.SUBMITTED.value
    ]


def failed_only_with_proof(
    store: Store, venue: PaperVenue, injected: Mapping[str, int], actions: Collection[str]
) -> list[Violation]:
    """Invariant 3: a row is ``failed`` on the venue's refusal (or written off, judged by
    invariant 4), never while the venue holds an effect the boundary sent under its key.

    ``injected``: records made outside the boundary, per key (they prove nothing either way);
    ``actions``: the classes ``venue`` serves.
    """
    out: list[Violation] = []
    for row in store.list_operations(state=State.FAILED, limit=1_000_000):
        if row.action not in actions or (row.detail or "").startswith(WRITE_OFF):
            continue
        sent = venue.effects_for(row.op_key) - injected.get(row.op_key, 0)
        if sent > 0:
            out.append(Violation(3, f"{row.op_key} is failed but the venue applied it"))
    return out


def acknowledged_at_the_venue(
    store: Store, venue: PaperVenue, actions: Collection[str]
) -> list[Violation]:
    """Invariant 4: absence never becomes an outcome: an ``acknowledged`` row of the classes
    ``venue`` serves has a record there under its key (ground truth, whatever the read view
    shows)."""
    return [
        Violation(4, f"{row.op_key} is acknowledged with no record at the venue")
        for row in store.list_operations(state=State.ACKNOWLEDGED, limit=1_000_000)
        if row.action in actions and venue.effects_for(row.op_key) == 0
    ]


def venue_records_accounted(
    store: Store,
    records: Iterable[tuple[str, str]],
    entries: Mapping[str, LedgerEntry] | None = None,
) -> list[Violation]:
    """Invariant 5: right after a sweep, each key holding exactly one visible record is either
    the acknowledged row with that venue id or a recorded divergence (duplicates and orphans
    are :func:`~effectgate._evidence.invariants.duplicates_reported`'s).

    ``records``: ``(operation key, venue id)`` of every record the sweep's read view showed;
    ``entries``: every row's slim entry by key, when the caller has just read them (else one
    read per key).
    """
    by_key: dict[str, list[str]] = {}
    for key, venue_id in records:
        by_key.setdefault(key, []).append(venue_id)
    diverged = {d.op_key for d in store.list_divergences(limit=1_000_000)}
    out: list[Violation] = []
    for key, ids in sorted(by_key.items()):
        if len(ids) != 1 or key in diverged:
            continue
        scope, _, operation_id = key.partition(":")
        row = entries.get(key) if entries is not None else store.get(scope, operation_id)
        if row is None:
            continue  # an orphan: duplicates_reported's to judge
        if row.state is not State.ACKNOWLEDGED or row.venue_id != ids[0]:
            out.append(
                Violation(
                    5,
                    f"{key}: the venue shows {ids[0]} but the ledger says {row.state.value} "
                    f"({row.venue_id}) and no divergence is recorded",
                )
            )
    return out


def dispatched_as_authorised(
    requests: Iterable[OutboundRequest],
    approved: Collection[str],
    *,
    limit: Decimal,
    approve_above: Decimal,
) -> list[Violation]:
    """Invariant 6: only what policy allowed reaches the adapter: no order over ``limit``, and
    none over ``approve_above`` that an operator did not approve (``approved``: operation keys)."""
    out: list[Violation] = []
    for r in requests:
        if r.action != "submit_order" or "limit_price" not in r.effect:
            continue
        value = Decimal(str(r.effect["quantity"])) * Decimal(str(r.effect["limit_price"]))
        if value > limit:
            out.append(Violation(6, f"{r.operation_key} dispatched at {value}, over {limit}"))
        elif value > approve_above and r.operation_key not in approved:
            out.append(Violation(6, f"{r.operation_key} dispatched at {value} unapproved"))
    return out


def approvals_expire(store: Store, now: float, ttl: float) -> list[Violation]:
    """Invariant 11: after an expiry pass at ``now``, no approval has waited past ``ttl``."""
    return [
        Violation(11, f"{row.op_key} still awaits approval {now - row.updated_at:g}s on")
        for row in store.list_operations(state=State.AWAITING_APPROVAL, limit=1_000_000)
        if now - row.updated_at > ttl
    ]
