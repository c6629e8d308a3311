"""The simulation on both stores (issue 38 items 3 and 5): PostgreSQL seeds hold every invariant
and replay byte for byte, and ledger faults come from the world (the driver's own errors on the
connections a simulated process uses), are counted, and leave the invariants standing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from conftest import require_pg
from effectgate import Gate, LimitPolicy, Operator, PolicySet, Reconciler
from effectgate._sim.runner import seed_runner, simulate
from effectgate._sim.simulator import run_seed
from effectgate._sim.stores import SimLedger, sim_ledger
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import CommitOutcomeUnknown, StoreError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.testing import CountingAdapter, ManualClock

POLICY = PolicySet({"submit_order": LimitPolicy(), "cancel_order": LimitPolicy()})


def causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None:
        out.append(cur)
        cur = cur.__cause__
    return out


def gate_on(store: object) -> tuple[Gate, CountingAdapter, ManualClock]:
    clock = ManualClock()
    adapter = CountingAdapter(PaperAdapter(PaperVenue(clock=clock)))
    gate = Gate(
        store=store,  # type: ignore[arg-type]
        registry=default_registry(),
        adapters={"paper": adapter},
        policy=POLICY,
        clock=clock,
    )
    return gate, adapter, clock


class TestLedgerFaultsAreTheDriversOwn:
    """Invariant 3: a ledger write that fails leaves no effect without a journal entry written
    before it; the error is the one the real driver raises."""

    def test_sqlite_busy_is_database_is_locked_and_the_journal_sends_nothing(self) -> None:
        led = sim_ledger(None, 1)
        try:
            gate, adapter, _ = gate_on(led.connect("p"))
            led.faults.arm("busy", 0)
            with pytest.raises(StoreError) as caught:
                gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
            driver = [e for e in causes(caught.value) if isinstance(e, sqlite3.OperationalError)]
            assert driver and driver[0].sqlite_errorcode == sqlite3.SQLITE_BUSY
            assert str(driver[0]) == "database is locked"
            assert led.faults.fired["busy"] == 1
            assert led.connect("p").get("default", "op-1") is None
            assert adapter.requests == []
        finally:
            led.close()

    def test_sqlite_failed_journal_commit_is_rolled_back_before_any_dispatch(self) -> None:
        led = sim_ledger(None, 2)
        try:
            store = led.connect("p")
            gate, adapter, _ = gate_on(store)
            states: list[str | None] = []
            execute = adapter.execute

            def witness(request: object, *, timeout: float) -> object:
                row = store.get("default", "op-1")
                states.append(row.state.value if row else None)
                return execute(request, timeout=timeout)  # type: ignore[arg-type]

            adapter.execute = witness  # type: ignore[method-assign]
            led.faults.arm("commit", 0)
            row = gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
            assert led.faults.fired["commit"] == 1
            # The gate journalled again (the first insert was rolled back) and only then sent.
            assert states == ["submitted"] and len(adapter.requests) == 1
            assert row.state.value == "acknowledged"
        finally:
            led.close()

    @pytest.mark.postgres
    def test_pg_serialization_failure_is_the_servers_40001_and_writes_nothing(self) -> None:
        import psycopg

        led = sim_ledger(require_pg(), 3)
        try:
            store = led.connect("operator")
            op = Operator(store=store, registry=default_registry(), clock=ManualClock())
            led.faults.arm("serialization", 0)
            with pytest.raises(StoreError) as caught:
                op.kill("submit_order", operator="alice")
            driver = [e for e in causes(caught.value) if isinstance(e, psycopg.Error)]
            assert isinstance(driver[0], psycopg.errors.SerializationFailure)
            assert driver[0].sqlstate == "40001"
            assert not store.controls("submit_order").killed
        finally:
            led.close()

    @pytest.mark.postgres
    def test_pg_refused_commit_writes_nothing(self) -> None:
        led = sim_ledger(require_pg(), 4)
        try:
            store = led.connect("operator")
            op = Operator(store=store, registry=default_registry(), clock=ManualClock())
            led.faults.arm("commit", 0)
            with pytest.raises(StoreError, match="COMMIT refused"):
                op.kill("submit_order", operator="alice")
            assert led.faults.fired["commit"] == 1
            assert not store.controls("submit_order").killed
        finally:
            led.close()

    @pytest.mark.postgres
    def test_pg_lost_connection_after_the_journal_is_uncertain_and_sends_nothing(self) -> None:
        led = sim_ledger(require_pg(), 5)
        try:
            store = led.connect("p")
            gate, adapter, _ = gate_on(store)
            led.faults.arm("lost", 0)
            row = gate.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
            assert led.faults.fired["lost"] == 1
            # The journal committed but its answer was lost: never guessed, never sent.
            assert row.state.value == "submitted" and adapter.requests == []
            again = store.get("default", "op-1")
            assert again is not None and again.state.value == "submitted"
        finally:
            led.close()


class TestSweepLockAfterAFailedUnlock:
    """SQLite's sweep lock is a row with an expiry (PostgreSQL's is a session lock, released
    with the connection its unlock drops on any failure)."""

    @pytest.fixture
    def ledger(self) -> Iterator[SimLedger]:
        led = sim_ledger(None, 6)
        try:
            yield led
        finally:
            led.close()

    def test_invariant_5_a_live_sweeper_whose_unlock_failed_sweeps_again(
        self, ledger: SimLedger
    ) -> None:
        """Invariant 5: a sweeper whose unlock failed (a failed COMMIT) sweeps on its next pass
        instead of waiting out its own lock's ttl, so duplicates and orphans stay visible.
        Found by ``effectgate simulate --seeds 1 --seed 8 --steps 28`` (issue 38)."""
        store = ledger.connect("reconciler")
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        rec = Reconciler(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(venue)},
            clock=clock,
            owner="rec",
        )
        with pytest.raises(CommitOutcomeUnknown):
            with store.sweep_lock("rec", now=clock(), ttl=3600.0):
                ledger.faults.arm("commit", 0)  # the unlock's commit fails
        ledger.faults.disarm()
        clock.advance(1)
        venue.inject_record("default:ext-1")
        report = rec.run_once()
        assert report.swept
        assert [d.op_key for d in store.list_divergences()] == ["default:ext-1"]


class TestSimulateOnBothStores:
    @pytest.mark.postgres
    def test_pg_seeds_hold_every_invariant_and_replay_byte_for_byte(self) -> None:
        """Invariants 1-8 and 11 on PostgreSQL, a store per simulated process; the same seeds
        give the same digest twice."""
        url = require_pg()
        first = simulate(3, run=seed_runner(url))
        assert first.violations == 0, [str(v) for f in first.failures for v in f.violations]
        assert simulate(3, run=seed_runner(url), jobs=2).digest == first.digest
        assert sum(n for k, n in first.faults.items() if k.startswith("ledger_")) > 0

    def test_sqlite_seeds_inject_and_count_ledger_faults(self) -> None:
        summary = simulate(10)
        assert summary.violations == 0, [str(v) for f in summary.failures for v in f.violations]
        assert summary.faults["ledger_busy"] > 0 and summary.faults["ledger_commit"] > 0
        # Counted only when fired: the history says which armed faults were reached.
        result = run_seed(0)
        fired = sum(1 for line in result.history if "ledger-fault" in line and " fired;" in line)
        assert fired == sum(
            n for k, n in result.faults.items() if k.startswith("ledger_") and k != "ledger_armed"
        )

    def test_cli_refuses_a_store_that_is_neither_sqlite_nor_postgresql(self) -> None:
        from typer.testing import CliRunner

        from effectgate._doors.cli.main import app

        out = CliRunner().invoke(app, ["simulate", "--seeds", "1", "--store", "mysql://x/y"])
        assert out.exit_code == 2 and "--store" in out.output

    @pytest.mark.postgres
    def test_cli_on_postgresql_prints_the_faults_and_the_summary(self) -> None:
        from typer.testing import CliRunner

        from effectgate._doors.cli.main import app

        url = require_pg()
        # Three seeds: the first two draw no ledger fault since the preconditions actor.
        out = CliRunner().invoke(app, ["simulate", "--seeds", "3", "--store", url])
        assert out.exit_code == 0, out.output
        assert (
            "seeds=3 violations=0" in out.output
            and "faults " in out.output
            and " ledger_" in out.output
        )

    def test_a_replay_line_never_prints_the_store_password(self) -> None:
        from effectgate._sim.cli import _masked

        assert _masked("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
        assert _masked("postgresql://postgres@h/db") == "postgresql://postgres@h/db"
