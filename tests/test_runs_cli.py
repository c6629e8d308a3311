"""``effectgate runs list|show|seal|snapshot|verify`` on every store (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._service import os_actor
from effectgate.store.roles import Store
from runkit import RUN, SCOPE, model_call, tool_call

ENV = "EFFECTGATE_OPERATOR_TOKEN"


def cli(*args: str, token: str | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={ENV: token, "COLUMNS": "200"})


@pytest.fixture
def ledger(store_factory) -> tuple[str, Store]:
    url, store = store_factory.url, store_factory()
    store.record_run_call(SCOPE, model_call("m-1"), now=1.0, actor="h")
    store.record_run_call(SCOPE, tool_call("t-1"), now=2.0, actor="h")
    return url, store


class TestRunsCommands:
    def test_list_show_seal_snapshot_verify(
        self, ledger: tuple[str, Store], tmp_path: Path
    ) -> None:
        url, _ = ledger
        listed = cli("runs", "list", "--store", url, "--json")
        assert listed.exit_code == 0, listed.output
        assert [r["run_id"] for r in json.loads(listed.output)] == [RUN]
        shown = cli("runs", "show", RUN, "--store", url)
        assert shown.exit_code == 0 and "uncertain" in shown.output and "t-1" in shown.output
        early = cli("runs", "snapshot", RUN, "--store", url)
        assert early.exit_code != 0 and early.exception.code == "run_not_sealed"
        sealed = cli("runs", "seal", RUN, "--reason", "harness crashed", "--store", url, "--json")
        assert sealed.exit_code == 0, sealed.output
        assert json.loads(sealed.output)["actor"] == os_actor()
        assert cli("runs", "list", "--open", "--store", url, "--json").output.strip() == "[]"
        out = tmp_path / "run-1.json"
        taken = cli("runs", "snapshot", RUN, "--store", url, "-o", str(out))
        assert taken.exit_code == 0, taken.output
        ok = cli("runs", "verify", str(out), "--json")
        assert ok.exit_code == 0 and json.loads(ok.output)["calls"] == 2
        # Any edit: the file no longer verifies, offline.
        edited = out.read_bytes().replace(b'"request_bytes":42', b'"request_bytes":43')
        assert edited != out.read_bytes()
        bad = tmp_path / "edited.json"
        bad.write_bytes(edited)
        refused = cli("runs", "verify", str(bad))
        assert refused.exit_code != 0 and refused.exception.code == "run_snapshot_invalid"

    def test_a_seal_needs_a_reason_and_an_operator(self, ledger: tuple[str, Store]) -> None:
        url, store = ledger
        assert cli("runs", "seal", RUN, "--store", url).exit_code == 2
        agent = store.create_principal("bot", "agent", SCOPE, created_by="ops", now=1.0).token
        refused = cli("runs", "seal", RUN, "--reason", "x", "--store", url, token=agent)
        assert refused.exit_code != 0 and refused.exception.code == "forbidden"
        run = store.get_run(SCOPE, RUN)
        assert run is not None and run.seal is None
        op = store.create_principal("ops-1", "operator", SCOPE, created_by="ops", now=1.0).token
        done = cli("runs", "seal", RUN, "--reason", "x", "--store", url, "--json", token=op)
        assert done.exit_code == 0 and json.loads(done.output)["actor"] == "ops-1"
