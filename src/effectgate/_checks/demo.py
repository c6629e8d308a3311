"""``effectgate demo``: every guarantee of the ledger contract, run and observed.

Each scenario builds a fresh ledger and paper venue, acts, and checks what it observed. The last
one kills a real executor subprocess with SIGKILL between the journal and the venue call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from effectgate._core.clock import ManualClock
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._core.states import State
from effectgate._evidence.invariants import audit_chain_verifies, duplicates_reported
from effectgate._execute.adapter import OutboundRequest, Receipt
from effectgate._execute.executor import Gate
from effectgate._execute.reconciler import Reconciler
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import IdempotencyConflict, IntentError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store import open_store
from effectgate.store.base import with_schema
from effectgate.store.roles import Store

__all__ = ["ScenarioResult", "run_demo"]

INTENT = dict(EXAMPLE_ORDER)
POLICY_LIMIT = Decimal("1000")


@dataclass
class ScenarioResult:
    number: str
    title: str
    invariant: str
    observed: str
    held: bool


@dataclass
class World:
    store: Store
    venue: PaperVenue
    gate: Gate
    reconciler: Reconciler
    clock: ManualClock
    extras: list[Store] = field(default_factory=list)


class _Died(BaseException):
    """Stands for the process dying between journal and dispatch (in-process scenarios)."""


class _DyingAdapter(PaperAdapter):
    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        raise _Died


StoreFactory = Callable[[str], Store]


def _policy() -> PolicySet:
    return PolicySet({"submit_order": LimitPolicy(POLICY_LIMIT), "cancel_order": LimitPolicy()})


def _world(
    stores: StoreFactory, name: str, *, honour_key: bool = True, dying: bool = False
) -> World:
    clock = ManualClock()
    venue = PaperVenue(honour_key=honour_key, clock=clock)
    adapter = _DyingAdapter(venue) if dying else PaperAdapter(venue)
    registry = default_registry()
    store = stores(name)
    gate = Gate(
        store=store, registry=registry, adapters={"paper": adapter}, policy=_policy(), clock=clock
    )
    rec = Reconciler(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    return World(store, venue, gate, rec, clock)


def _crash_submit(w: World, op: str) -> None:
    dying = Gate(
        store=w.store,
        registry=w.gate.registry,
        adapters={"paper": _DyingAdapter(w.venue)},
        policy=w.gate.policy,
        clock=w.clock,
    )
    with suppress(_Died):
        dying.submit("submit_order", op, INTENT)


def scenarios(stores: StoreFactory) -> Iterator[ScenarioResult]:
    # 1. A retry of the same approved operation submits once.
    w = _world(stores, "s1")
    w.gate.submit("submit_order", "op-1", INTENT)
    again = w.gate.submit("submit_order", "op-1", dict(INTENT))
    yield ScenarioResult(
        "1",
        "retry of op-1 (model re-ran, same intent)",
        "inv 1",
        f"venue calls={w.venue.calls} effects={w.venue.effect_count} "
        f"replayed={again.replayed} state={again.state.value}",
        w.venue.calls == 1 and w.venue.effect_count == 1 and again.replayed,
    )

    # 2. Two separately approved identical orders are two actions.
    w = _world(stores, "s2")
    a = w.gate.submit("submit_order", "op-a", INTENT)
    b = w.gate.submit("submit_order", "op-b", dict(INTENT))
    yield ScenarioResult(
        "2",
        "two approved identical orders (op-a, op-b)",
        "identity",
        f"effects={w.venue.effect_count}; fingerprints equal="
        f"{a.fingerprint == b.fingerprint} ({a.fingerprint[:8]})",
        w.venue.effect_count == 2 and a.fingerprint == b.fingerprint,
    )

    # 3. Same id, changed payload: an error, never a silent dedup.
    try:
        w.gate.submit("submit_order", "op-a", dict(INTENT, quantity="400"))
        observed, held = "accepted (!)", False
    except IdempotencyConflict as exc:
        observed, held = f"refused: {exc.code}", w.venue.effect_count == 2
    yield ScenarioResult("3", "op-a reused with quantity 400", "inv 2", observed, held)

    # 4. Audit fields and decimal spellings don't change identity; bad numbers are refused.
    w = _world(stores, "s4")
    first = w.gate.submit("submit_order", "op-4", INTENT)
    same = [
        w.gate.submit(
            "submit_order",
            "op-4",
            dict(INTENT, limit_price=p, rationale="reworded", context_digest="sha256:0123456789"),
        )
        for p in ("100.0", "0100.00", "1E2")
    ]
    refused: list[str] = []
    for bad in (
        dict(INTENT, limit_price=100.0),
        dict(INTENT, quantity="-4"),
        dict(INTENT, quantity="0"),
        dict(INTENT, quantity="NaN"),
    ):
        try:
            w.gate.submit("submit_order", f"op-bad-{len(refused)}", bad)
        except IntentError as exc:
            refused.append(exc.reason)
    rows = sum(w.store.count_by_state().values())
    yield ScenarioResult(
        "4",
        "rationale/context and 100.0|0100.00|1E2 vs 100.00; float, -4, 0, NaN",
        "inv 2",
        f"all replays of {first.fingerprint[:8]}; refused {refused}; ledger rows={rows}",
        all(s.replayed and s.fingerprint == first.fingerprint for s in same)
        and len(refused) == 4
        and rows == 1
        and w.venue.calls == 1,
    )

    # 5-7. Crash after journal: uncertain, zero venue calls; a retry does not re-dispatch;
    # reconcile inside the horizon stays uncertain; a late appearance is confirmed.
    w = _world(stores, "s5")
    _crash_submit(w, "op-c")
    row = w.gate.submit("submit_order", "op-c", INTENT)
    yield ScenarioResult(
        "5",
        "crash between journal and dispatch, then a retry",
        "inv 3",
        f"state={row.state.value} venue calls={w.venue.calls}",
        row.state is State.SUBMITTED and w.venue.calls == 0,
    )
    w.clock.advance(10)
    w.reconciler.run_once()
    row = w.gate.get("op-c")
    yield ScenarioResult(
        "6",
        "reconcile at t=10s inside a 60s horizon",
        "inv 4",
        f"state={row.state.value}",
        row.state is State.SUBMITTED,
    )
    w.clock.advance(20)
    w.venue.inject_record(row.op_key)
    w.reconciler.run_once()
    row = w.gate.get("op-c")
    yield ScenarioResult(
        "7",
        "t=30s, the order is now visible at the venue",
        "inv 4",
        f"state={row.state.value} venue_id={row.venue_id}",
        row.state is State.ACKNOWLEDGED and row.venue_id is not None,
    )

    # 8. Written off past the horizon, then it appears: reported, not buried.
    w = _world(stores, "s8")
    _crash_submit(w, "op-d")
    w.clock.advance(120)
    w.reconciler.run_once()
    failed = w.gate.get("op-d").state
    w.clock.advance(60)
    w.venue.inject_record(w.gate.get("op-d").op_key)
    report = w.reconciler.run_once()
    kinds = [d[0] for d in report.new_divergences]
    yield ScenarioResult(
        "8",
        "written off at t=120s, appears at t=180s",
        "inv 4",
        f"state at 120s={failed.value}; then {kinds}",
        failed is State.FAILED and kinds == ["ledger-says-failed"],
    )

    # 9. A venue record with no ledger row: an orphan, an alarm.
    w.venue.inject_record("default:op-unknown")
    report = w.reconciler.run_once()
    kinds = [d[0] for d in report.new_divergences]
    yield ScenarioResult(
        "9", "venue record with no ledger row", "inv 5", f"{kinds}", kinds == ["orphan"]
    )

    # 10. Two replicas with no shared state, against a venue that honours the key and one that
    # does not: the receiver decides; the sweep makes a duplicate visible.
    for honour in (True, False):
        clock = ManualClock()
        venue = PaperVenue(honour_key=honour, clock=clock)
        kinds = []
        store = None
        for replica in ("a", "b"):
            store = stores(f"s10-{honour}-{replica}")
            gate = Gate(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                policy=_policy(),
                clock=clock,
            )
            gate.submit("submit_order", "op-e", INTENT)
            rec = Reconciler(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                clock=clock,
            )
            kinds += [d[0] for d in rec.run_once().new_divergences]
        # Only the second replica's sweep can see two records under one key, and it records it.
        expected = [] if honour else ["duplicate-effect"]
        unreported = (
            duplicates_reported(store, [r.operation_key for r in venue.visible_records()])
            if store
            else []
        )
        yield ScenarioResult(
            "10",
            f"two replicas, venue honours key={honour}",
            "inv 5",
            f"calls={venue.calls} effects={venue.effect_count} "
            f"flags={sorted(set(kinds)) or 'nothing'}",
            venue.calls == 2
            and venue.effect_count == (1 if honour else 2)
            and kinds == expected
            and not unreported,
        )

    # 11. A terminal row is inert: replaying a rejected action never dispatches.
    w = _world(stores, "s11")
    first = w.gate.submit("submit_order", "op-f", dict(INTENT, quantity="400"))
    replay = w.gate.submit("submit_order", "op-f", dict(INTENT, quantity="400"))
    yield ScenarioResult(
        "11",
        "replay of a rejected action (notional 40000)",
        "terminal inert",
        f"state={replay.state.value} reason={first.reason!r} venue calls={w.venue.calls}",
        first.state is State.REJECTED and replay.state is State.REJECTED and w.venue.calls == 0,
    )


def _subprocess_crash(store_url: str) -> ScenarioResult:
    """SIGKILL a real executor process between the journal and the venue call."""
    from effectgate.adapters._paper_server import serve_paper_venue

    venue = PaperVenue()
    key = uuid.uuid4().hex
    with serve_paper_venue(venue, api_key=key) as server:
        env = dict(os.environ, EFFECTGATE_CRASH_AT="after_journal", EFFECTGATE_DEMO_VENUE_KEY=key)
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from effectgate._checks.demo import _child; _child()",
                store_url,
                server.url,
                "op-kill",
            ],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        store = open_store(store_url, create=True)
        try:
            row = store.get("default", "op-kill")
            state = row.state.value if row else "missing"
            gate = Gate(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                policy=_policy(),
            )
            after = gate.submit("submit_order", "op-kill", INTENT)
            calls = venue.calls
            # Past the 60 s horizon with nothing at the venue, the reconciler writes it off.
            later = time.time() + 61
            Reconciler(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(venue)},
                clock=lambda: later,
            ).run_once()
            settled = gate.get("op-kill").state
        finally:
            store.close()
    held = (
        child.returncode == -9
        and state == "submitted"
        and calls == 0
        and after.state is State.SUBMITTED
        and settled is State.FAILED
    )
    return ScenarioResult(
        "12",
        "real executor subprocess SIGKILLed after journal, restarted",
        "inv 3",
        f"exit={child.returncode} state={state} venue calls after "
        f"restart+retry={calls}; reconciled past horizon: {settled.value}",
        held,
    )


def _child() -> None:
    """Entry point of the subprocess in scenario 12."""
    from effectgate.adapters.http import HttpVenueAdapter

    store_url, venue_url, operation_id = sys.argv[1:4]
    store = open_store(store_url, create=True)
    adapter = HttpVenueAdapter(venue_url, credential_env="EFFECTGATE_DEMO_VENUE_KEY")
    gate = Gate(
        store=store,
        registry=default_registry(adapter="http"),
        adapters={"http": adapter},
        policy=_policy(),
    )
    gate.submit("submit_order", operation_id, INTENT)
    print(json.dumps({"survived": True}))  # only reached when the crash point is not armed


@contextmanager
def _sqlite_stores() -> Iterator[tuple[StoreFactory, str, list[Store]]]:
    with tempfile.TemporaryDirectory(prefix="effectgate-demo-") as tmp:
        opened: list[Store] = []

        def factory(name: str) -> Store:
            store = open_store(f"sqlite:///{Path(tmp) / name}.db", create=True)
            opened.append(store)
            return store

        try:
            yield factory, f"sqlite:///{Path(tmp) / 'crash.db'}", opened
        finally:
            for s in opened:
                s.close()


@contextmanager
def _postgres_stores(url: str) -> Iterator[tuple[StoreFactory, str, list[Store]]]:
    """One throwaway schema per scenario, dropped afterwards; nothing else in the database moves."""
    from effectgate.store.postgres import PostgresStore, drop_schema

    run = f"eg_demo_{uuid.uuid4().hex[:8]}"
    opened: list[Store] = []
    schemas: list[str] = []

    def factory(name: str) -> Store:
        schemas.append(f"{run}_{name.replace('-', '_').lower()}")
        store = PostgresStore(url, schema=schemas[-1])
        opened.append(store)
        return store

    crash_schema = f"{run}_crash"
    try:
        yield factory, with_schema(url, crash_schema), opened
    finally:
        for s in opened:
            s.close()
        for schema in [*schemas, crash_schema]:
            drop_schema(url, schema)


def run_demo(store_url: str | None = None) -> list[ScenarioResult]:
    """Run every scenario; ``store_url`` picks PostgreSQL, otherwise temporary SQLite files."""
    cm = (
        _postgres_stores(store_url)
        if store_url and store_url.startswith("postgres")
        else _sqlite_stores()
    )
    with cm as (factory, crash_url, opened):
        results = list(scenarios(factory))
        results.append(_subprocess_crash(crash_url))
        broken = [v for store in opened for v in audit_chain_verifies(store)]
        results.append(
            ScenarioResult(
                "13",
                f"every scenario's audit log, {len(opened)} ledgers",
                "inv 8",
                "; ".join(map(str, broken)) or "every hash chain verifies",
                not broken,
            )
        )
    return results
