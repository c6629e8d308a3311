"""Kill switch rehearsals on a schedule (issue 39 item 12), on every store.

Invariant 7 (a kill switch stops every new dispatch of its class at once) is only as good as
the last time someone saw it work: each rehearsal, the blast-radius dry run or a real drill, is
recorded with its audit entry, and a class whose ``rehearsal_period`` passes without one alerts
(invariant 11: nothing waits silently, an unrehearsed switch included).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from effectgate import ControlError, SQLiteStore, State
from effectgate._core.intent import Registry
from effectgate._execute.maintenance import check_maintenance
from effectgate.errors import RegistryError
from effectgate.store.roles import Store
from test_controls import INTENT, World, make_world


def scheduled(w: World, period: float = 3600.0) -> Registry:
    """The world's registry with ``submit_order`` due a rehearsal every ``period`` seconds."""
    classes = [
        dataclasses.replace(ac, rehearsal_period=period) if ac.name == "submit_order" else ac
        for ac in w.gate.registry
    ]
    return Registry(classes)


class TestRecorded:
    def test_a_dry_run_is_recorded_and_flips_nothing(self, store: Store) -> None:
        w = make_world(store)
        w.gate.propose("submit_order", "op-a", INTENT)
        out = w.operator.rehearse("submit_order", operator="alice", reason="monthly")
        assert out.kind == "blast_radius" and out.operator == "alice"
        assert out.detail["would_hold"] == 1 and out.detail["reason"] == "monthly"
        assert not store.controls("submit_order").killed
        assert [r.id for r in w.operator.rehearsals("submit_order")] == [out.id]
        (entry,) = [e for e in store.iter_audit() if e.kind == "kill_rehearsal"]
        assert entry.detail["kind"] == "blast_radius" and entry.detail["rehearsal"] == out.id

    def test_a_drill_flips_the_switch_on_sees_it_and_flips_it_off(self, store: Store) -> None:
        w = make_world(store)
        out = w.operator.rehearse("submit_order", operator="alice", drill=True)
        assert out.kind == "drill" and out.detail["held_seen"] is True
        assert not store.controls("submit_order").killed
        kinds = [e.kind for e in store.iter_audit()]
        assert kinds == ["kill_switch_on", "kill_switch_off", "kill_rehearsal"]
        assert w.gate.submit("submit_order", "after", INTENT).state is State.ACKNOWLEDGED

    def test_a_drill_never_lifts_a_real_halt(self, store: Store) -> None:
        w = make_world(store)
        w.operator.kill("submit_order", operator="alice", reason="incident")
        with pytest.raises(ControlError, match="real halt"):
            w.operator.rehearse("submit_order", operator="bob", drill=True)
        assert store.controls("submit_order").killed and w.operator.rehearsals() == []

    def test_newest_first_and_per_class(self, store: Store) -> None:
        w = make_world(store)
        first = w.operator.rehearse("submit_order", operator="alice")
        w.clock.advance(5)
        other = w.operator.rehearse("cancel_order", operator="alice")
        w.clock.advance(5)
        last = w.operator.rehearse("submit_order", operator="alice", drill=True)
        assert [r.id for r in w.operator.rehearsals()] == [last.id, other.id, first.id]
        assert [r.id for r in w.operator.rehearsals("submit_order")] == [last.id, first.id]
        assert store.last_rehearsals() == {"submit_order": last.at, "cancel_order": other.at}


class TestSchedule:
    def test_an_unrehearsed_class_alerts_once_per_lapse(self, store: Store) -> None:
        w = make_world(store)
        reg = scheduled(w)
        raised = check_maintenance(store, reg, None, now=w.clock())
        assert [(a.kind, a.action) for a in raised] == [("rehearsal-overdue", "submit_order")]
        assert check_maintenance(store, reg, None, now=w.clock()) == []  # pages once
        w.operator.rehearse("submit_order", operator="alice")
        w.clock.advance(3000)
        assert check_maintenance(store, reg, None, now=w.clock()) == []  # within the period
        w.clock.advance(601)
        again = check_maintenance(store, reg, None, now=w.clock())
        assert [a.kind for a in again] == ["rehearsal-overdue"]
        assert again[0].detail["period"] == 3600.0

    def test_a_class_without_a_period_never_alerts(self, store: Store) -> None:
        w = make_world(store)
        assert check_maintenance(store, w.gate.registry, None, now=w.clock()) == []

    @pytest.mark.parametrize("period", [0, -1.0, float("inf"), True])
    def test_a_bad_period_is_refused_when_the_class_is_declared(self, period: object) -> None:
        (submit, *_) = list(make_world.__globals__["registry"]())
        with pytest.raises(RegistryError, match="rehearsal_period"):
            dataclasses.replace(submit, rehearsal_period=period)


def test_the_cli_rehearses_and_lists(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "effectgate", *args],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "EFFECTGATE_STORE": url, "COLUMNS": "200"},
        )  # fmt: skip

    SQLiteStore(str(tmp_path / "ledger.db")).close()  # creates the ledger
    dry = cli("kill", "rehearse", "submit_order", "--json")
    assert dry.returncode == 0, dry.stderr
    real = cli("kill", "rehearse", "submit_order", "--drill", "--reason", "q4")
    assert real.returncode == 0 and "held seen: True" in real.stdout, real.stderr
    listed = json.loads(cli("kill", "rehearsals", "submit_order", "--json").stdout)
    assert [r["kind"] for r in listed] == ["drill", "blast_radius"]
    assert listed[0]["detail"]["reason"] == "q4"


@pytest.mark.parametrize(("value", "ok"), [("2592000", True), ("0", False), ('"monthly"', False)])
def test_the_period_is_read_from_the_class_config(value: str, ok: bool) -> None:
    from effectgate._service import parse_config
    from effectgate.errors import ConfigError
    from servicekit import config_text

    text = config_text(store_url="sqlite:///x.db").replace(
        "[classes.submit_order]\n", f"[classes.submit_order]\nrehearsal_period = {value}\n", 1
    )
    if ok:
        reg = parse_config(text, "x.toml").registry
        assert reg.get("submit_order").rehearsal_period == 2592000.0
    else:
        with pytest.raises(ConfigError, match="rehearsal_period"):
            parse_config(text, "x.toml")
