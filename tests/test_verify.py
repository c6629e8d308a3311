"""``effectgate verify`` on the user's own configuration (issue 20): it passes on the starter
config and fails, naming why, on each configuration that loads but is unsafe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from effectgate._frontends.cli import app
from effectgate._service._config import load_config
from effectgate._verify import config_checks
from effectgate.store import open_store

runner = CliRunner()


@pytest.fixture
def starter(tmp_path: Path) -> Path:
    out = runner.invoke(app, ["init", "--dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    return tmp_path / "effectgate.toml"


def failures(cfg_path: Path) -> dict[str, str]:
    cfg = load_config(cfg_path)
    store = open_store(cfg.store.url)
    try:
        return {
            f"{c.guarantee}/{c.subject}": c.why
            for c in config_checks(cfg, store)
            if c.status == "fail"
        }
    finally:
        store.close()


def edit(cfg_path: Path, old: str, new: str) -> None:
    text = cfg_path.read_text()
    assert old in text
    cfg_path.write_text(text.replace(old, new, 1))


class TestUnsafeConfigurationsThatLoad:
    """Each loads (``effectgate check`` accepts it) and ``verify`` fails it, saying why."""

    def test_the_starter_is_safe(self, starter: Path) -> None:
        assert failures(starter) == {}

    def test_a_mutation_policy_that_allows_every_value(self, starter: Path) -> None:
        edit(starter, 'max_value = "10000"\napprove_above = "5000"\n', "")
        found = failures(starter)
        assert list(found) == ["policy-does-not-allow-every-value/submit_order"]
        assert (
            "every value runs automatically"
            in found["policy-does-not-allow-every-value/submit_order"]
        )

    def test_honours_key_without_a_passing_report(self, starter: Path) -> None:
        edit(
            starter,
            "[classes.cancel_order.json_schema]\n",
            '[classes.cancel_order.venue]\nhonours_key = "true"\n\n'
            "[classes.cancel_order.json_schema]\n",
        )
        found = failures(starter)
        assert list(found) == ["honoured-key-is-measured/cancel_order"]
        assert "no conformance_report" in found["honoured-key-is-measured/cancel_order"]

    def test_a_kill_switch_an_agent_credential_reaches(self, starter: Path) -> None:
        # The ledger's "agent" principal proposes; a file token of the same name operates.
        starter.write_text(
            starter.read_text()
            + f'\n[tokens.agent]\nrole = "operator"\nscope = "*"\nsha256 = "{"ab" * 32}"\n'
        )
        found = failures(starter)
        assert list(found) == ["kill-switch-unreachable-by-agents/credentials"]
        assert (
            "agent can propose actions and also operate"
            in found["kill-switch-unreachable-by-agents/credentials"]
        )

    def test_one_approver_where_the_floor_needs_two(self, starter: Path) -> None:
        edit(starter, 'tier_floor = "validate"', 'tier_floor = "multi_approve"')
        found = failures(starter)
        assert list(found) == ["approval-quorum-reachable/submit_order"]
        assert (
            "needs 2 distinct approvers; 1 can approve"
            in found["approval-quorum-reachable/submit_order"]
        )


class TestVerifyCommand:
    """The whole command: the configuration's checks, then seed 001's ledger cases and the
    invariants (1, 4, 5, 8, ...) in scratch ledgers of the store's kind; exit 1 for CI."""

    def run(self, cfg: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "effectgate", "verify", "--config", str(cfg), *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=cfg.parent,
            env={**os.environ, "COLUMNS": "200"},
        )

    def test_starter_passes_with_a_junit_report(self, starter: Path, tmp_path: Path) -> None:
        junit = tmp_path / "verify.xml"
        done = self.run(starter, "--junit", str(junit))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 failed" in done.stdout and "scenario 12" in done.stdout
        suite = ET.parse(junit).getroot()
        assert suite.get("failures") == "0" and int(suite.get("tests") or 0) >= 20

    def test_an_unsafe_config_exits_one(self, starter: Path) -> None:
        edit(starter, 'tier_floor = "validate"', 'tier_floor = "multi_approve"')
        done = self.run(starter, "--json")
        assert done.returncode == 1
        rows = json.loads(done.stdout)
        assert [r["subject"] for r in rows if r["status"] == "fail"] == ["submit_order"]

    @pytest.mark.postgres
    def test_scratch_ledgers_on_postgresql(self, starter: Path) -> None:
        from conftest import require_pg

        done = self.run(starter, "--store", require_pg(), "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        rows = json.loads(done.stdout)
        assert any(r["guarantee"].startswith("scenario 13") for r in rows)
        assert all(r["status"] != "fail" for r in rows)

    def test_a_file_that_does_not_load_exits_two(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text("[store]\n")
        assert self.run(bad).returncode == 2
