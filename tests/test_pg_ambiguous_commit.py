"""Ambiguous commits: a wire proxy cuts the PostgreSQL connection around COMMIT.

The proxy forwards to the real server and parses the frontend protocol, so the cut lands exactly
between "COMMIT sent" and "reply received", the window where nobody can know whether the write is
durable. The venue is the paper venue behind a real HTTP server, counted in this process.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

import faultkit
from conftest import require_pg
from effectgate._core.states import State
from effectgate.store.base import NewOperation, with_schema

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def proxied() -> Iterator[tuple[str, str, faultkit.PgProxy]]:
    """(direct URL, proxied URL, proxy) onto one fresh schema."""
    from effectgate.store.postgres import drop_schema

    url = require_pg()
    parts = urlsplit(url)
    proxy = faultkit.PgProxy((parts.hostname or "127.0.0.1", parts.port or 5432)).start()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield with_schema(url, schema), with_schema(proxy.url(url), schema), proxy
    finally:
        proxy.close()
        drop_schema(url, schema)


@contextmanager
def _through_proxy(proxied) -> Iterator[tuple[Any, Any, Any, str, faultkit.PgProxy]]:
    """(gate via the proxy, a direct store, the counting venue, its URL, the proxy)."""
    from effectgate.store.postgres import PostgresStore

    direct_url, via_proxy, proxy = proxied
    with faultkit.venue_server(honour_key=False) as (venue, venue_url):
        store = PostgresStore(via_proxy)
        direct = PostgresStore(direct_url)
        try:
            yield faultkit.http_gate(store, venue_url), direct, venue, venue_url, proxy
        finally:
            store.close()
            direct.close()


def test_hot_path_is_one_round_trip(proxied) -> None:
    """Invariant 3 (cost of durability): journal and receipt each take ONE round trip (the
    journal's locks and statement pipelined as one implicit transaction, the receipt one
    statement), and neither sends BEGIN or COMMIT."""
    from effectgate.store.postgres import PostgresStore

    _, via_proxy, proxy = proxied
    store = PostgresStore(via_proxy, min_size=1, max_size=1)
    try:
        new = NewOperation(
            scope="default",
            operation_id="op-rt",
            action="submit_order",
            fingerprint="f" * 64,
            intent={"q": "4"},
            effect={"q": "4"},
            tier="validate",
            reason="ok",
            policy_version="t",
        )
        store.get("default", "warm-up")  # the pool's connection exists and is configured
        proxy.reset_counts()
        store.insert_operation(new, [State.PROPOSED, State.VALIDATED, State.SUBMITTED], now=1.0)
        journal = dict(proxy.counts)
        proxy.reset_counts()
        store.transition(
            "default", "op-rt", State.SUBMITTED, State.ACKNOWLEDGED, now=2.0, venue_id="V-1"
        )
        receipt = dict(proxy.counts)
    finally:
        store.close()
    # Each Sync (S) or simple Query (Q) ends in ReadyForQuery, which the client waits for; a
    # Flush (H) travels alongside the pipelined statements and adds no wait of its own.
    trips = {
        name: c.get("S", 0) + c.get("Q", 0)
        for name, c in (("journal", journal), ("receipt", receipt))
    }
    print(
        f"\n[round trips] journal={trips['journal']} ({journal}) "
        f"receipt={trips['receipt']} ({receipt})"
    )
    assert trips == {"journal": 1, "receipt": 1}
    assert "Q" not in journal and "Q" not in receipt


@pytest.mark.slow
def test_commit_cut_never_causes_a_second_dispatch(proxied) -> None:
    """Invariants 1 and 3: a COMMIT whose reply is lost is uncertain, settled by the reconciler,
    and never leads to a second venue call."""
    figures: list[str] = []
    with _through_proxy(proxied) as (gate, direct, venue, venue_url, proxy):
        # 1. The journal's COMMIT is forwarded, its reply cut: the caller cannot know.
        # The gate re-reads the row and returns it undispatched: uncertain, not failed.
        proxy.arm_cut(skip=0, forward=True)
        first = gate.submit("submit_order", "op-journal", faultkit.intent())
        seen = direct.get("default", "op-journal")
        again = gate.submit("submit_order", "op-journal", faultkit.intent())
        figures.append(
            f"journal COMMIT cut after forward: gate returned "
            f"{first.state.value} without calling, row "
            f"{seen.state.value if seen else 'absent'}, retry "
            f"replayed={again.replayed}, venue calls={venue.calls}"
        )
        assert first.state is State.SUBMITTED and proxy.cuts == ["after-forward"]
        assert seen is not None and seen.state is State.SUBMITTED
        assert again.replayed and venue.calls == 0

        # 2. The receipt's COMMIT is forwarded, its reply cut: durable, caller unsure.
        proxy.arm_cut(skip=1, forward=True)
        row = gate.submit("submit_order", "op-receipt", faultkit.intent())
        # The forwarded COMMIT may still be in flight to the server when the cut client
        # returns: wait (bounded) for it to land rather than race it.
        seen = _settled(direct, "op-receipt", State.ACKNOWLEDGED)
        figures.append(
            f"receipt COMMIT cut after forward: gate returned {row.state.value}, "
            f"ledger {seen.state.value if seen else 'absent'}, venue calls="
            f"{venue.calls}"
        )
        assert row.state is State.SUBMITTED and venue.calls == 1
        assert seen is not None and seen.state is State.ACKNOWLEDGED

        # 3. The receipt's COMMIT never arrives: the row stays uncertain in the ledger.
        proxy.arm_cut(skip=1, forward=False)
        row = gate.submit("submit_order", "op-lost", faultkit.intent())
        seen = direct.get("default", "op-lost")
        figures.append(
            f"receipt COMMIT cut before forward: gate returned {row.state.value}, "
            f"ledger {seen.state.value if seen else 'absent'}, venue calls="
            f"{venue.calls}"
        )
        assert seen is not None and seen.state is State.SUBMITTED and venue.calls == 2

        # Retries of all three dispatch nothing; the reconciler settles every row.
        for op in ("op-journal", "op-receipt", "op-lost"):
            assert gate.submit("submit_order", op, faultkit.intent()).replayed
        assert venue.calls == 2
        rec = faultkit.http_reconciler(direct, venue_url, offset=120.0)
        report = rec.run_once()
        states = {
            op: direct.get("default", op).state.value  # type: ignore[union-attr]
            for op in ("op-journal", "op-receipt", "op-lost")
        }
        per_key = {op: venue.effects_for(f"default:{op}") for op in states}
        figures.append(
            f"after reconcile: states={states} effects per key={per_key} "
            f"confirmed={report.confirmed} written_off={report.written_off} "
            f"divergences={report.alarms} cuts={proxy.cuts}"
        )
    print("\n[ambiguous commit]\n  " + "\n  ".join(figures))
    assert states == {
        "op-journal": "failed",
        "op-receipt": "acknowledged",
        "op-lost": "acknowledged",
    }
    assert per_key == {"op-journal": 0, "op-receipt": 1, "op-lost": 1}
    assert venue.calls == 2 and not report.new_divergences
    assert proxy.cuts == ["after-forward", "after-forward", "before-forward"]


def test_journal_commit_withheld_journals_again_once(proxied) -> None:
    """Invariants 1 and 3: the journal's commit point (the Sync ending its implicit transaction)
    never reaches the server, so nothing was written; the gate re-reads, finds no row, journals
    again on a fresh connection, and the venue is called exactly once."""
    with _through_proxy(proxied) as (gate, direct, venue, _, proxy):
        proxy.arm_cut(skip=0, forward=False)
        row = gate.submit("submit_order", "op-withheld", faultkit.intent())
        seen = direct.get("default", "op-withheld")
        again = gate.submit("submit_order", "op-withheld", faultkit.intent())
    print(
        f"\n[journal commit withheld] gate returned {row.state.value}, ledger "
        f"{seen.state.value if seen else 'absent'}, venue calls={venue.calls}, "
        f"cuts={proxy.cuts}"
    )
    assert proxy.cuts == ["before-forward"]
    assert row.state is State.ACKNOWLEDGED and not row.replayed
    assert seen is not None and seen.state is State.ACKNOWLEDGED
    assert again.replayed and venue.calls == 1
    assert venue.effects_for("default:op-withheld") == 1


def _settled(store, operation_id: str, expected: State, within: float = 5.0):
    """The row once it reaches ``expected``, or as it stands when ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        row = store.get("default", operation_id)
        if (row is not None and row.state is expected) or time.monotonic() > deadline:
            return row
        time.sleep(0.01)
