"""The operators' CLI against a real paper-venue server and a SQLite ledger file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, SQLiteStore
from effectgate.adapters._paper_server import serve_paper_venue
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry

KEY = "cli-test-key"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EFFECTGATE_VENUE_KEY": KEY, **(env or {})},
    )


@pytest.fixture
def ledger_and_venue(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFECTGATE_VENUE_KEY", KEY)
    venue = PaperVenue()
    with serve_paper_venue(venue, api_key=KEY) as server:
        path = tmp_path / "ledger.db"
        store = SQLiteStore(str(path))
        adapter = HttpVenueAdapter(server.url, credential_env="EFFECTGATE_VENUE_KEY")
        gate = Gate(
            store=store,
            registry=default_registry(adapter="http"),
            adapters={"http": adapter},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        )
        gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        yield f"sqlite:///{path}", server, venue
        adapter.close()
        store.close()


class TestReconcileCommand:
    def test_clean_ledger_exits_zero_with_json(self, ledger_and_venue) -> None:
        url, server, _ = ledger_and_venue
        proc = cli("reconcile", "--store", url, "--venue", server.url, "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["swept"] and report["ledger_rows"] == 1 and report["new_divergences"] == []

    def test_orphan_exits_with_alarm_code(self, ledger_and_venue) -> None:
        """Invariant 5: an orphan is an alarm; scripts see exit code 3."""
        url, server, venue = ledger_and_venue
        venue.inject_record("default:op-outside")
        proc = cli("reconcile", "--store", url, "--venue", server.url, "--json")
        assert proc.returncode == 3
        assert json.loads(proc.stdout)["new_divergences"][0][0] == "orphan"
        listed = json.loads(cli("divergences", "--store", url, "--json").stdout)
        assert [d["kind"] for d in listed] == ["orphan"]

    def test_the_venue_key_never_appears_in_output(self, ledger_and_venue) -> None:
        """Invariant 6: the credential stays inside the adapter."""
        url, server, _ = ledger_and_venue
        proc = cli("reconcile", "--store", url, "--venue", server.url)
        assert KEY not in proc.stdout + proc.stderr


class TestOpsCommands:
    def test_list_and_show(self, ledger_and_venue) -> None:
        url, _, _ = ledger_and_venue
        rows = json.loads(cli("ops", "list", "--store", url, "--json").stdout)
        assert [(r["operation_id"], r["state"]) for r in rows] == [("op-1", "acknowledged")]
        shown = json.loads(cli("ops", "show", "--store", url, "op-1").stdout)
        assert [
            s for e in shown["audit"] for s in e["detail"].get("path", [e["detail"]["state"]])
        ] == ["proposed", "validated", "submitted", "acknowledged"]

    def test_show_says_why_an_operation_is_uncertain(self, tmp_path, monkeypatch) -> None:
        """Issue 11 item 4: the venue was down at dispatch; `ops show` gives the cause from the
        audit trail, the outcome and what happens next, not only `submitted`."""
        from effectgate.adapters.conformance.transport_faults import FaultServer

        monkeypatch.setenv("EFFECTGATE_VENUE_KEY", KEY)
        # The venue resets the connection once it has the request: the outcome is unknown
        # (a refused connection would be proven not applied, issue 20).
        resetting = FaultServer("reset-after").__enter__()
        path = tmp_path / "ledger.db"
        store = SQLiteStore(str(path))
        adapter = HttpVenueAdapter(resetting.url(), credential_env="EFFECTGATE_VENUE_KEY")
        gate = Gate(
            store=store,
            registry=default_registry(adapter="http"),
            adapters={"http": adapter},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("1000"))}),
        )
        assert gate.submit("submit_order", "op-down", EXAMPLE_ORDER).state.value == "submitted"
        resetting.close()
        adapter.close()
        store.close()
        shown = json.loads(cli("ops", "show", "--store", f"sqlite:///{path}", "op-down").stdout)
        assert shown["state"] == "submitted" and shown["outcome"] == "uncertain"
        assert "connection to the venue failed" in shown["cause"]
        assert shown["cause"] in shown["message"] and "reconciler" in shown["message"]

    def test_unknown_state_is_a_usage_error(self, ledger_and_venue) -> None:
        url, _, _ = ledger_and_venue
        proc = cli("ops", "list", "--store", url, "--state", "done")
        assert proc.returncode == 2 and "unknown state" in proc.stderr

    def test_missing_operation_exits_one(self, ledger_and_venue) -> None:
        url, _, _ = ledger_and_venue
        assert cli("ops", "show", "--store", url, "op-nope").returncode == 1
