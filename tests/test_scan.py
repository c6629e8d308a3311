"""`effectgate scan` on a small fixture code base (tests/scan_fixture)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effectgate._checks.scan import load_rules, scan_paths
from effectgate.errors import ConfigError

FIXTURE = Path(__file__).with_name("scan_fixture")
APP = FIXTURE / "app"


def _calls(report_list: list) -> list[tuple[str, int, str]]:  # type: ignore[type-arg]
    return [(Path(f.file).name, f.line, f.call) for f in report_list]


class TestFindings:
    def test_direct_consequential_calls_are_reported_with_file_and_line(self) -> None:
        report = scan_paths([APP])
        assert _calls(report.findings) == [
            ("billing.py", 12, "stripe.PaymentIntent.create"),
            ("billing.py", 16, "requests.post"),
            ("billing.py", 22, "boto3.client.terminate_instances"),
            ("billing.py", 24, "boto3.client.delete_bucket"),
            ("billing.py", 29, "smtplib.SMTP.sendmail"),
            ("billing.py", 34, "httpx.AsyncClient.put"),
            ("billing.py", 35, "httpx.AsyncClient.request:?"),
        ]

    def test_reads_are_not_reported(self) -> None:
        calls = {f.call for f in scan_paths([APP]).findings}
        assert not {c for c in calls if c.endswith(("get", "describe_instances", ":GET"))}

    def test_calls_inside_adapters_and_through_the_gate_are_counted(self) -> None:
        report = scan_paths([APP])
        assert _calls(report.in_adapters) == [("payments.py", 10, "stripe.PaymentIntent.create")]
        assert _calls(report.gated) == [("agent.py", 10, "effectgate.Gate.submit")]

    def test_a_file_that_does_not_parse_is_named_not_fatal(self) -> None:
        report = scan_paths([APP])
        assert [(Path(f).name, why) for f, why in report.skipped] == [("broken.py", "SyntaxError")]


class TestRules:
    def test_a_config_list_extends_the_rules(self) -> None:
        extra, gated = load_rules(FIXTURE / "rules.toml")
        report = scan_paths([APP], consequential=extra, gated=gated)
        assert ("agent.py", 11, "mycorp.ledger.Client.charge") in _calls(report.findings)

    def test_bad_rules_file_names_the_key(self, tmp_path: Path) -> None:
        bad = tmp_path / "rules.toml"
        bad.write_text('[scan]\nconsequential = "x"\n')
        with pytest.raises(ConfigError, match=r"scan\.consequential"):
            load_rules(bad)
        bad.write_text('[scan]\nconsequentail = ["x"]\n')
        with pytest.raises(ConfigError, match="consequentail: unknown key"):
            load_rules(bad)


class TestCommand:
    def test_json_and_exit_code_for_ci(self, tmp_path: Path) -> None:
        cli = [sys.executable, "-m", "effectgate", "scan"]
        dirty = subprocess.run([*cli, str(APP), "--json"], capture_output=True, text=True)
        assert dirty.returncode == 1
        data = json.loads(dirty.stdout)
        assert data["summary"] == {"ungated": 7, "in_adapters": 1, "gated": 1}
        assert data["ungated"][0]["line"] == 12
        clean = tmp_path / "clean.py"
        clean.write_text("import requests\nrequests.get('http://127.0.0.1')\n")
        ok = subprocess.run([*cli, str(clean)], capture_output=True, text=True)
        assert ok.returncode == 0 and "0 ungated" in ok.stdout
        missing = subprocess.run([*cli, str(tmp_path / "nope")], capture_output=True, text=True)
        assert missing.returncode == 2
