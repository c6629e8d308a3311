"""The operator commands end to end: a real subprocess per command, one SQLite ledger file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, SQLiteStore, State
from effectgate._service import os_actor
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from servicekit import run_cli


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env={"EFFECTGATE_STORE": url})


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.db"
    store = SQLiteStore(str(path))
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet(
            {"submit_order": LimitPolicy(Decimal("10000"), approve_above=Decimal("1000"))}
        ),
    )
    gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
    gate.propose("submit_order", "op-2", EXAMPLE_ORDER)
    big = gate.submit("submit_order", "op-big", {**EXAMPLE_ORDER, "quantity": "20"})
    yield f"sqlite:///{path}", gate, big.fingerprint, path
    store.close()


def test_kill_switch_rehearsal_and_hold(ledger) -> None:
    """Invariant 7 from the operator's seat: rehearse, flip, see what is held, release."""
    url, gate, _, _ = ledger
    radius = cli(url, "kill", "status", "submit_order", "--blast-radius", "--json")
    assert radius.returncode == 0, radius.stderr
    data = json.loads(radius.stdout)
    assert data["would_hold"] == ["default:op-2"] and data["killed"] is False
    assert cli(url, "kill", "on", "submit_order", "--reason", "drill").returncode == 0
    assert gate.dispatch("op-2").state is State.VALIDATED
    held = cli(url, "kill", "held", "--json")
    assert [r["operation_id"] for r in json.loads(held.stdout)] == ["op-2"]
    assert cli(url, "kill", "off", "submit_order").returncode == 0
    assert gate.dispatch("op-2").state is State.ACKNOWLEDGED


def test_approvals_from_the_cli(ledger) -> None:
    url, gate, fingerprint, _ = ledger
    pending = json.loads(cli(url, "approvals", "list", "--json").stdout)
    assert [(p["operation_id"], p["fingerprint"]) for p in pending] == [("op-big", fingerprint)]
    wrong = cli(url, "approvals", "approve", "op-big", "--fingerprint", "0" * 64)
    assert wrong.returncode == 1 and "only the exact payload" in wrong.stderr
    ok = cli(url, "approvals", "approve", "op-big", "--fingerprint", fingerprint)
    assert ok.returncode == 0 and "validated" in ok.stdout
    assert gate.dispatch("op-big").state is State.ACKNOWLEDGED


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["authority", "step", "wire_money", "max_value", '"10"', "--evidence", '{"n":1}'],
            "no action class named 'wire_money'",
        ),
        (
            ["authority", "step", "submit_order", "max_value", "10.5", "--evidence", '{"n":1}'],
            "max_value: must be a decimal string",
        ),
        (
            ["authority", "step", "submit_order", "max_value", "{oops", "--evidence", '{"n":1}'],
            "not JSON",
        ),
        (
            ["authority", "step", "submit_order", "tier", '"validate"', "--evidence", '{"n":1}'],
            "floor never moves",
        ),
        (["kill", "on", "wire_money"], "no action class named 'wire_money'"),
    ],
)
def test_bad_operator_input_is_refused_and_changes_nothing(ledger, args, needle) -> None:
    url, _, _, path = ledger
    before = [r for r in sqlite3.connect(path).execute("SELECT count(*) FROM audit_log")]
    result = cli(url, *args)
    assert result.returncode in (1, 2) and needle in result.stderr + result.stdout
    after = [r for r in sqlite3.connect(path).execute("SELECT count(*) FROM audit_log")]
    assert before == after
    assert json.loads(cli(url, "authority", "history", "--json").stdout) == []


def test_staged_step_and_history(ledger) -> None:
    url, _, _, _ = ledger
    step = cli(
        url,
        "authority",
        "step",
        "submit_order",
        "exposure",
        '{"limit": "5000", "window": 3600}',
        "--evidence",
        '{"clean_actions": 200}',
    )
    assert step.returncode == 0, step.stderr
    shown = json.loads(cli(url, "authority", "show", "submit_order").stdout)
    assert shown["exposure"] == {"limit": "5000", "window": 3600.0} and shown["version"] == 1
    (h,) = json.loads(cli(url, "authority", "history", "--json").stdout)
    # No token in the environment: the OS user with the store's credentials (test_cli_tokens).
    assert h["operator"] == os_actor() and h["evidence"] == {"clean_actions": 200}


def test_shadow_report(ledger) -> None:
    url, gate, _, _ = ledger
    assert cli(url, "shadow", "on", "submit_order").returncode == 0
    gate.submit(
        "submit_order", "op-s", {**EXAMPLE_ORDER, "quantity": "2"}, correlation_id="ticket-9"
    )
    fed = cli(
        url,
        "shadow",
        "feed",
        "ticket-9",
        "--action",
        "submit_order",
        "--source",
        "desk",
        "--intent",
        json.dumps({**EXAMPLE_ORDER, "quantity": "3"}),
    )
    assert fed.returncode == 0, fed.stderr
    report = json.loads(cli(url, "shadow", "report", "--json").stdout)
    assert report["disagreement_rate"] == 1.0 and report["cases"][0]["correlation_id"] == "ticket-9"


def test_audit_verify_export_and_tamper(ledger, tmp_path) -> None:
    """Invariant 8: verify says intact, a bundle verifies offline, an edit is found (exit 3)."""
    url, _, _, path = ledger
    ok = cli(url, "audit", "verify")
    assert ok.returncode == 0 and "intact" in ok.stdout
    head = next(line.split()[1] for line in ok.stdout.splitlines() if "head" in line)
    bundle = tmp_path / "op-1.json"
    assert cli(url, "audit", "export", "op-1", "--out", str(bundle)).returncode == 0
    assert cli(url, "audit", "verify-bundle", str(bundle)).returncode == 0
    conn = sqlite3.connect(path)
    conn.execute("UPDATE audit_log SET detail = replace(detail, '\"4\"', '\"5\"') WHERE seq = 1")
    conn.commit()
    bad = cli(url, "audit", "verify", "--expect-head", head)
    assert bad.returncode == 3 and "seq 1" in bad.stderr


def test_controls_read_the_service_config(tmp_path) -> None:
    """With --config the commands use the service's own store and action classes."""
    from effectgate._service import write_starter

    starter = write_starter(tmp_path)
    config = str(starter.config)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, cwd=tmp_path)

    assert run("kill", "on", "cancel_order", "--config", config).returncode == 0
    status = json.loads(run("kill", "status", "cancel_order", "--config", config, "--json").stdout)
    assert [s["killed"] for s in status if s["action"] == "cancel_order"] == [True]
    unknown = run("kill", "on", "wire_money", "--config", config)
    assert unknown.returncode == 1 and "[unknown_action_class]" in unknown.stderr
    assert (tmp_path / "effectgate.db").exists()  # the config's own store
