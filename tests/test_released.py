"""Released rows get dispatched: the standing dispatcher, on every store (issue 11, item 5).

A row a control held, or one waiting for approvals, is sent once the control lets go, by the
service's standing dispatcher rather than only by the agent's retry; a row its caller journalled
with ``Gate.propose`` is never sent by it. Each docstring names the invariant it checks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from decimal import Decimal

import pytest

from effectgate import Dispatcher, Gate, LimitPolicy, Operator, PolicySet, State, Tier
from effectgate._core.intent import ActionClass, EffectClass, Registry
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, SubmitOrder, cancel_order_class, notional
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock

INTENT = dict(EXAMPLE_ORDER)  # notional 400
BIG = {**INTENT, "quantity": "60"}  # 6000: over approve_above, needs one approval


def registry(hold_bound: float | None = None) -> Registry:
    submit = ActionClass(
        name="submit_order",
        model=SubmitOrder,
        adapter="paper",
        effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
        visibility_horizon=60.0,
        key_retention=86400.0,
        value_of=notional,
        target_field="instrument",
        tier_floor=Tier.VALIDATE,
        hold_bound=hold_bound,
    )
    return Registry([submit, cancel_order_class()])


@dataclass
class World:
    store: Store
    venue: PaperVenue
    adapter: CountingAdapter
    gate: Gate
    operator: Operator
    clock: ManualClock

    def gate_on(self, store: Store) -> Gate:
        """Another service process: its own store handle, the same ledger and venue."""
        return Gate(
            store=store,
            registry=self.gate.registry,
            adapters={"paper": self.adapter},
            policy=self.gate.policy,
            clock=self.clock,
        )


def make_world(store: Store, *, hold_bound: float | None = None) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    adapter = CountingAdapter(PaperAdapter(venue))
    reg = registry(hold_bound)
    policy = PolicySet(
        {
            "submit_order": LimitPolicy(Decimal("100000"), approve_above=Decimal("5000")),
            "cancel_order": LimitPolicy(Decimal("1")),
        }
    )
    gate = Gate(store=store, registry=reg, adapters={"paper": adapter}, policy=policy, clock=clock)
    return World(
        store, venue, adapter, gate, Operator(store=store, registry=reg, clock=clock), clock
    )


@pytest.fixture
def world(store: Store) -> World:
    return make_world(store)


def race(dispatchers: list[Dispatcher]) -> list[object]:
    """Run one pass of each dispatcher at the same moment, each in its own thread."""
    start = threading.Barrier(len(dispatchers))
    reports: list[object] = [None] * len(dispatchers)

    def run(i: int) -> None:
        start.wait()
        reports[i] = dispatchers[i].run_once()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(dispatchers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return reports


class TestLiftedSwitch:
    def test_two_dispatchers_send_each_released_row_exactly_once(self, store_factory) -> None:
        """Invariant 1: after the kill switch is lifted, two standing dispatchers on two store
        handles (two service processes on one ledger) race over the held rows; each row is
        sent exactly once and every one of them is sent."""
        w = make_world(store_factory())
        w.operator.kill("submit_order", operator="alice", reason="incident 7")
        ids = [f"op-{i}" for i in range(12)]
        for op in ids:
            assert w.gate.submit("submit_order", op, INTENT).state is State.VALIDATED
        assert w.adapter.execute_calls == 0
        first, second = (Dispatcher(w.gate_on(store_factory()), owner=o) for o in ("a", "b"))
        # Still held: the dispatchers lease nothing while the switch is on.
        assert first.run_once().leased == 0
        w.operator.release("submit_order", operator="alice")
        reports = race([first, second])
        assert w.adapter.execute_calls == len(ids)
        assert sorted(r.operation_key for r in w.adapter.requests) == sorted(
            f"default:{op}" for op in ids
        )
        assert sum(r.sent for r in reports) == len(ids)  # type: ignore[attr-defined]
        assert all(w.gate.get(op).state is State.ACKNOWLEDGED for op in ids)
        # Nothing is left to send: a further pass leases nothing.
        assert first.run_once().leased == 0 and w.adapter.execute_calls == len(ids)

    def test_a_row_still_held_stays_held_with_its_reason_updated(self, world: World) -> None:
        """Invariant 7: a released row meets every control again; the breaker still open holds
        it (detail updated, not failed), and its reset sends it."""
        world.operator.kill("submit_order", operator="alice")
        world.gate.submit("submit_order", "op-1", INTENT)
        world.store.trip_breaker("submit_order", [("repeats", "drill")], now=world.clock())
        world.operator.release("submit_order", operator="alice")
        report = Dispatcher(world.gate).run_once()
        row = world.gate.get("op-1")
        assert report.held == 1 and row.state is State.VALIDATED
        assert (row.detail or "").startswith("held: breaker open")
        assert world.adapter.execute_calls == 0
        # Held again, it waits for the next release: no pass retries it meanwhile.
        assert Dispatcher(world.gate).run_once().leased == 0
        world.operator.reset_breaker("submit_order", operator="alice")
        assert Dispatcher(world.gate).run_once().sent == 1
        assert world.gate.get("op-1").state is State.ACKNOWLEDGED

    def test_a_window_hold_is_retried_once_time_frees_it(self, world: World) -> None:
        """Invariant 11: a hold a rate window imposes is retried when the window may have room,
        with no operator action and no agent retry."""
        world.operator.step(
            "submit_order",
            "rate",
            {"limit": 1, "interval": 60},
            evidence={"drill": True},
            operator="alice",
        )
        assert world.gate.submit("submit_order", "op-1", INTENT).state is State.ACKNOWLEDGED
        assert world.gate.submit("submit_order", "op-2", INTENT).state is State.VALIDATED
        dispatcher = Dispatcher(world.gate)
        assert dispatcher.run_once().leased == 0  # the window is still full
        world.clock.advance(61)
        assert dispatcher.run_once().sent == 1
        assert world.gate.get("op-2").state is State.ACKNOWLEDGED

    def test_a_lease_expires_so_a_dead_dispatcher_holds_nothing_back(self, world: World) -> None:
        """A dispatcher that leased rows and died leaves them to the others once its lease
        expires; until then nobody else takes them."""
        world.operator.kill("submit_order", operator="alice")
        world.gate.submit("submit_order", "op-1", INTENT)
        world.operator.release("submit_order", operator="alice")
        leased = world.store.lease_released("dead", now=world.clock(), lease_seconds=30, limit=10)
        assert leased == [("default", "op-1")]
        survivor = Dispatcher(world.gate, owner="alive")
        assert survivor.run_once().leased == 0
        world.clock.advance(31)
        assert survivor.run_once().sent == 1
        assert world.adapter.execute_calls == 1


class TestApprovals:
    def test_completed_approval_is_sent_by_the_dispatcher(self, world: World) -> None:
        """An approval completed by an operator (any process) is sent without the agent's
        retry; approved while the switch is on, it is held, and sent once it is lifted."""
        row = world.gate.submit("submit_order", "op-big", BIG)
        assert row.state is State.AWAITING_APPROVAL
        world.operator.kill("submit_order", operator="alice")
        out = world.operator.approve("op-big", fingerprint=row.fingerprint, approver="bob")
        assert out.released and out.operation.state is State.VALIDATED
        dispatcher = Dispatcher(world.gate)
        assert dispatcher.run_once().held == 1
        world.operator.release("submit_order", operator="alice")
        assert dispatcher.run_once().sent == 1
        assert world.gate.get("op-big").state is State.ACKNOWLEDGED
        assert world.adapter.execute_calls == 1

    def test_proposed_rows_are_never_sent_by_the_dispatcher(self, world: World) -> None:
        """A row journalled with Gate.propose (dispatch=False) is its caller's to send: neither
        approvals nor a lifted switch release it to the standing dispatcher."""
        plain = world.gate.propose("submit_order", "op-plain", INTENT)
        big = world.gate.propose("submit_order", "op-big", BIG)
        assert (plain.state, big.state) == (State.VALIDATED, State.AWAITING_APPROVAL)
        out = world.operator.approve("op-big", fingerprint=big.fingerprint, approver="bob")
        assert out.complete and not out.released
        world.operator.kill("submit_order", operator="alice")
        world.operator.release("submit_order", operator="alice")
        world.operator.step(
            "submit_order", "max_value", "9000", evidence={"drill": True}, operator="alice"
        )
        world.clock.advance(86400)
        assert Dispatcher(world.gate).run_once().leased == 0
        assert world.adapter.execute_calls == 0
        assert world.gate.get("op-plain").state is State.VALIDATED
        assert world.gate.get("op-big").state is State.VALIDATED
        # Its caller still dispatches it.
        assert world.gate.dispatch("op-plain").state is State.ACKNOWLEDGED


DISPATCHER_CHILD = r"""
import json, sys, time
from decimal import Decimal
from effectgate import Dispatcher, Gate, LimitPolicy, PolicySet
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import default_registry
from effectgate.store import open_store

args = json.loads(sys.argv[1])
store = open_store(args["url"])
venue = PaperVenue()
gate = Gate(store=store, registry=default_registry(), adapters={"paper": PaperAdapter(venue)},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}))
while time.time() < args["start_at"]:
    time.sleep(0.002)
report = Dispatcher(gate, batch=3).run_once()
print(json.dumps({"report": report.to_dict(), "venue_calls": venue.calls}))
"""


@pytest.mark.slow
def test_two_dispatcher_processes_send_each_released_row_once(store_factory) -> None:
    """Invariant 1 across processes: two `effectgate serve` dispatchers (separate
    interpreters, separate connections, each with its own venue client) race over the rows a
    lifted switch released; together they send each exactly once."""
    import json
    import subprocess
    import sys
    import time

    from effectgate.examples import default_registry

    store = store_factory()
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
    )
    operator = Operator(store=store, registry=default_registry())
    operator.kill("submit_order", operator="alice")
    ids = [f"op-{i}" for i in range(30)]
    for op in ids:
        assert gate.submit("submit_order", op, INTENT).state is State.VALIDATED
    operator.release("submit_order", operator="alice")
    start_at = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                DISPATCHER_CHILD,
                json.dumps({"url": store_factory.url, "start_at": start_at}),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["venue_calls"] for r in results) == len(ids)
    assert sum(r["report"]["sent"] for r in results) == len(ids)
    assert all(gate.get(op).state is State.ACKNOWLEDGED for op in ids)


class TestFromTheCli:
    """The CLI releases rows in one process; the service (or `effectgate dispatch`) sends them."""

    @staticmethod
    def cli(config, *args: str):
        import os
        import subprocess
        import sys

        return subprocess.run(
            [sys.executable, "-m", "effectgate", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "EFFECTGATE_OPERATOR": "alice", "COLUMNS": "300"},
        )

    @staticmethod
    def service(tmp_path, venue: PaperVenue, extra: str = ""):
        from effectgate._service import Service, parse_config
        from servicekit import config_text

        config = tmp_path / "effectgate.toml"
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db", service=extra))
        svc = Service(
            parse_config(config.read_text(), str(config)), adapters={"venue": PaperAdapter(venue)}
        )
        return config, svc

    def test_an_approval_from_the_cli_is_sent_by_the_service(self, tmp_path) -> None:
        """Invariant 1 and 11: an operator approves in the CLI (another process); the
        service's standing dispatcher sends the row once, without the agent's retry."""
        import time

        from servicekit import ORDER

        venue = PaperVenue()
        config, svc = self.service(tmp_path, venue, "dispatch_interval = 0.05")
        try:
            big = {**ORDER, "quantity": "10", "limit_price": "95.00"}  # 950 > approve_above 900
            row = svc.gate.submit("submit_order", "op-big", big, scope="alpha")
            assert row.state is State.AWAITING_APPROVAL
            svc.start_dispatcher()
            out = self.cli(
                config,
                "approvals",
                "approve",
                "op-big",
                "--scope",
                "alpha",
                "--fingerprint",
                row.fingerprint,
            )
            assert out.returncode == 0, out.stderr
            assert "released for dispatch" in out.stdout and "effectgate serve" in out.stdout
            deadline = time.monotonic() + 20
            while svc.store.get("alpha", "op-big").state is not State.ACKNOWLEDGED:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the service never sent the approved row"
                time.sleep(0.05)
            assert venue.effect_count == 1
        finally:
            svc.close()

    def test_kill_off_says_who_sends_and_dispatch_sends_once(self, tmp_path) -> None:
        """Invariant 1: with no service running, `effectgate dispatch` sends what `kill off`
        released, once; a second pass sends nothing."""
        import json

        from servicekit import ORDER

        config, svc = self.service(tmp_path, PaperVenue())
        try:
            assert self.cli(config, "kill", "on", "submit_order").returncode == 0
            held = svc.gate.submit("submit_order", "op-1", ORDER, scope="alpha")
            assert held.state is State.VALIDATED
        finally:
            svc.close()
        off = self.cli(config, "kill", "off", "submit_order")
        assert off.returncode == 0, off.stderr
        assert "1 held operation(s) released" in off.stdout
        assert f"effectgate dispatch --config {config}" in off.stdout
        first = self.cli(config, "dispatch", "--json")
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["sent"] == 1
        again = json.loads(self.cli(config, "dispatch", "--json").stdout)
        assert again["leased"] == 0 and again["sent"] == 0


class TestHoldBound:
    def test_a_row_held_past_its_bound_alerts_once(self, store: Store) -> None:
        """Invariant 11: every hold has a bound. A row held longer than its class's
        hold_bound raises `hold-aged` through the maintenance rules, once; being retried and
        held again does not restart its clock."""
        from effectgate._execute.maintenance import check_maintenance

        w = make_world(store, hold_bound=120.0)
        sink: list[object] = []
        w.operator.kill("submit_order", operator="alice")
        w.gate.submit("submit_order", "op-1", INTENT)
        w.store.trip_breaker("submit_order", [("repeats", "drill")], now=w.clock())
        w.clock.advance(100)
        w.operator.release("submit_order", operator="alice")
        assert Dispatcher(w.gate).run_once().held == 1  # held again, by the breaker

        def aged() -> list[object]:
            raised = check_maintenance(w.store, w.gate.registry, sink.append, now=w.clock())
            return [a for a in raised if a.kind == "hold-aged"]

        assert aged() == []
        w.clock.advance(21)  # 121 s since the first hold
        (alert,) = aged()
        assert alert.subject == "default:op-1" and alert.action == "submit_order"  # type: ignore[attr-defined]
        assert "held for 121s" in alert.message and "breaker open" in alert.message  # type: ignore[attr-defined]
        w.clock.advance(1000)
        assert aged() == []  # once per row
        assert [a.kind for a in w.store.list_alerts()].count("hold-aged") == 1

    def test_the_default_bound_is_finite(self, store: Store) -> None:
        """Invariant 11: with no hold_bound the settlement window, else the visibility
        horizon, bounds a hold; a hold_bound that is not a finite positive number is refused."""
        from effectgate.errors import RegistryError

        reg = registry()
        assert reg.get("submit_order").hold_limit == 60.0  # the horizon
        for bad in (0, -1, float("inf"), float("nan")):
            with pytest.raises(RegistryError, match="hold_bound"):
                registry(hold_bound=bad)

    def test_hold_bound_in_the_config(self, tmp_path) -> None:
        from effectgate._service import parse_config
        from effectgate.errors import ConfigError
        from servicekit import config_text

        text = config_text(store_url=f"sqlite:///{tmp_path}/l.db")
        with_bound = text.replace(
            "key_retention = 86400", "key_retention = 86400\nhold_bound = 900", 1
        )
        assert parse_config(with_bound).registry.get("submit_order").hold_limit == 900
        bad = text.replace("key_retention = 86400", "key_retention = 86400\nhold_bound = 0", 1)
        with pytest.raises(ConfigError, match=r"classes\.submit_order\.hold_bound"):
            parse_config(bad)


class TestHeldNoteCleared:
    """Issue 39 item 3: a ``held:`` note says why a row waits in ``validated``; once the row
    moves on it is false of it, so the move clears it (invariant 10: a terminal row carries
    only what is true of it). The same on every store and every move path."""

    def test_released_row_sent_by_its_retry_drops_the_note(self, world: World) -> None:
        world.operator.kill("submit_order", operator="alice", reason="incident 7")
        held = world.gate.submit("submit_order", "op-1", INTENT)
        assert held.state is State.VALIDATED and (held.detail or "").startswith("held: kill")
        world.operator.release("submit_order", operator="alice")
        sent = world.gate.submit("submit_order", "op-1", INTENT)
        assert sent.state is State.ACKNOWLEDGED and sent.detail is None
        stored = world.gate.get("op-1")
        assert stored.state is State.ACKNOWLEDGED and stored.detail is None

    def test_released_row_sent_by_the_dispatcher_drops_the_note(self, world: World) -> None:
        world.operator.kill("submit_order", operator="alice")
        world.gate.submit("submit_order", "op-1", INTENT)
        world.operator.release("submit_order", operator="alice")
        assert Dispatcher(world.gate).run_once().sent == 1
        row = world.gate.get("op-1")
        assert row.state is State.ACKNOWLEDGED and row.detail is None

    def test_a_move_with_its_own_detail_keeps_that_detail(self, world: World) -> None:
        """A move that says something new writes it; only the stale ``held:`` note goes."""
        from effectgate.store.base import Move

        world.operator.kill("submit_order", operator="alice")
        world.gate.submit("submit_order", "op-1", INTENT)
        world.gate.submit("submit_order", "op-2", INTENT)
        now = world.clock()
        moves = [
            Move("default", "op-1", State.VALIDATED, State.REJECTED, detail="withdrawn by desk"),
            Move("default", "op-2", State.VALIDATED, State.REJECTED),
        ]
        assert world.store.transition_many(moves, now=now) == [True, True]
        assert world.gate.get("op-1").detail == "withdrawn by desk"
        assert world.gate.get("op-2").detail is None
