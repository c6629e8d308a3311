"""``effectgate check`` shows each class's speculation settings and its venue contract with the
delivery claim in one place (follow-up of issues 12 and 16)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate.testing import AT_MOST_ONCE
from servicekit import config_text

SPECULATING = """
[classes.submit_order.venue]
honours_key = "true"
read_view = "lagging"
sandbox_uses_given_key = true
sandbox_key_persistence = 3600
idempotency_revision = "paper-keys-2026-01"

[classes.submit_order.speculation]
mode = "required"
verdict_lifetime = 60
strategy = "ledger_authoritative"
max_tries = 4
max_wait = 20
"""


def write_config(tmp_path: Path) -> Path:
    text = config_text(store_url=f"sqlite:///{tmp_path}/l.db", service="dispatch_timeout = 7")
    text = text.replace(
        '[adapters.venue]\nkind = "paper"',
        '[adapters.venue]\nkind = "paper"\nsandbox = "honest"\nsandbox_lifetime = 120',
    )
    path = tmp_path / "effectgate.toml"
    path.write_text(text + SPECULATING)
    return path


def run_check(path: Path, *extra: str) -> Any:
    got = CliRunner().invoke(app, ["check", "--config", str(path), *extra])
    assert got.exit_code == 0, got.output
    return got


class TestSpeculationSettingsInCheck:
    def test_json_carries_mode_lifetime_strategy_horizon_and_margin(self, tmp_path: Path) -> None:
        """Condition 3 of seed 000 (the verdict outlives the retry horizon), shown with its
        margin: dispatch_timeout 7 s + in_flight_grace 2 s = 9 s; 60 s lifetime, 51 s margin."""
        doc = json.loads(run_check(write_config(tmp_path), "--json").stdout)
        spec = doc["classes"]["submit_order"]["speculation"]
        assert spec == {
            "mode": "required",
            "verdict_lifetime": 60.0,
            "strategy": "ledger_authoritative",
            "retry_horizon": 9.0,
            "margin": 51.0,
            "max_tries": 4,
            "max_wait": 20.0,
        }
        assert doc["classes"]["cancel_order"]["speculation"] is None

    def test_the_text_puts_speculation_beside_the_venue_contract(self, tmp_path: Path) -> None:
        out = run_check(write_config(tmp_path)).output
        block = out[out.index("submit_order: ") :]
        lines = block.splitlines()
        assert lines[0].startswith(f"submit_order: {AT_MOST_ONCE}: honours_key is declared")
        assert "venue: honours_key true, read view lagging, visibility horizon 60s" in lines[1]
        assert "sandbox uses the given key yes, keeps its keys 3600s" in lines[1]
        assert lines[2].strip() == (
            "speculation: required, verdict lifetime 60s, strategy ledger_authoritative, "
            "retry horizon 9s (dispatch_timeout + in_flight_grace), margin 51s, at most 4 "
            "tries in 20s"
        )
        cancel = out[out.index("cancel_order: ") :].splitlines()
        assert cancel[2].strip() == "speculation: off"


class TestVenueContractInCheck:
    def test_json_carries_the_whole_contract_with_the_claim(self, tmp_path: Path) -> None:
        doc = json.loads(run_check(write_config(tmp_path), "--json").stdout)
        submit = doc["classes"]["submit_order"]
        assert submit["delivery"] == AT_MOST_ONCE
        assert submit["venue"] == {
            "honours_key": "true",
            "read_view": "lagging",
            "visibility_horizon": 60.0,
            "key_retention": 86400.0,
            "sandbox_uses_given_key": True,
            "sandbox_key_persistence": 3600.0,
            "conformance_report": None,
            "revisions": {"idempotency": "paper-keys-2026-01"},
        }
        assert doc["classes"]["cancel_order"]["venue"]["honours_key"] == "unknown"
