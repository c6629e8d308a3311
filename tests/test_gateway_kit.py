"""The conformance kit against the MCP gateway's upstream adapter (issues 16 and 19): real
upstream MCP servers written with the official SDK, one that honours the key and one that does
not, through ``UpstreamAdapter`` as ``effectgate gateway`` builds it; and ``check`` reading the
delivery claim from the report like any venue's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate.testing import AT_MOST_ONCE, EXACTLY_ONCE
from gatewaykit import SECRET, run_kit, upstream_under_kit
from test_gateway import gateway_toml


def report_for(mode: str, tmp_path: Path) -> Any:
    rep = run_kit(mode, tmp_path, gateway_toml(tmp_path, mode))
    print(rep.render())
    return rep


def check_json(config: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("GW_SHOP_KEY", SECRET)
    monkeypatch.setenv("GW_SHOP_STATE", str(config.parent / "shop.json"))
    monkeypatch.setenv("GW_SHOP_DELAY", "4")
    got = CliRunner().invoke(app, ["check", "--config", str(config), "--json"])
    assert got.exit_code == 0, got.output
    return dict(json.loads(got.stdout))


class TestKitOnTheKeyedUpstream:
    def test_every_promise_is_kept_and_the_key_is_honoured(self, tmp_path: Path) -> None:
        """Invariant 1 (one effect per operation): measured at the upstream, not assumed."""
        rep = report_for("keyed", tmp_path)
        assert rep.adapter == "mcp-upstream" and rep.listing == "key_order"
        assert rep.failed == [] and rep.honours_key == "true", rep.render()
        for check in (
            "same-key-twice",
            "read-lag-within-horizon",
            "listing",
            "probe-agrees-with-listing",
            "orphan-visible",
            "unreachable-is-unknown",
            "credentials-never-leak",
        ):
            assert rep.results[check]["status"] == "pass", (check, rep.render())
        assert rep.results["refusal-is-not-applied"]["status"] == "n/a"

    def test_an_order_made_at_the_upstream_is_listed_as_an_orphan(self, tmp_path: Path) -> None:
        """Invariant 5 (the sweep enumerates venue records: an orphan is always visible)."""
        with upstream_under_kit("keyed", tmp_path, gateway_toml(tmp_path)) as (_, adapter, drv):
            made = drv.direct_effect()
            listed = adapter.records(None, 100)
        (hit,) = [r for r in listed if r.venue_id == made]
        assert hit.operation_key == f"!unkeyed/{made}"


class TestKitOnTheUnkeyedUpstream:
    def test_the_missing_key_is_measured_and_nothing_fails(self, tmp_path: Path) -> None:
        rep = report_for("unkeyed", tmp_path)
        assert rep.listing == "probe" and rep.failed == [], rep.render()
        assert rep.honours_key == "false"
        assert rep.results["same-key-twice"]["status"] == "not-kept"
        assert rep.results["orphan-visible"]["status"] == "not-kept"

    def test_probe_refuses_to_answer_rather_than_report_absence(self, tmp_path: Path) -> None:
        """Invariant 3 (an uncertain row is never written off): an upstream with no read view
        cannot say an effect is absent, so probe raises instead of returning nothing."""
        from effectgate.errors import AdapterError

        toml = gateway_toml(tmp_path, "unkeyed")
        with upstream_under_kit("unkeyed", tmp_path, toml) as (_, adapter, _drv):
            with pytest.raises(AdapterError, match="no read view"):
                adapter.probe("default:anything")


class TestCheckReadsTheReport:
    def test_exactly_once_only_with_a_verifying_report(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rep = report_for("keyed", tmp_path)
        rep.write(tmp_path / "kit.json")
        config = tmp_path / "gw.toml"
        toml = gateway_toml(tmp_path)
        config.write_text(toml)
        before = check_json(config, monkeypatch)["classes"]["place_order"]
        assert before["delivery"] == AT_MOST_ONCE
        assert "no conformance_report" in before["delivery_why"]
        config.write_text(
            toml.replace(
                'read_view = "lagging"\n',
                'read_view = "lagging"\nconformance_report = "kit.json"\n',
            )
        )
        after = check_json(config, monkeypatch)
        place = after["classes"]["place_order"]
        assert place["delivery"] == EXACTLY_ONCE and "kit.json" in place["delivery_why"]
        assert place["venue"]["conformance_report"] == "kit.json"
        assert place["listing"] == "key_order" and place["schema"] == "pinned"
        # An edited report no longer verifies: the claim falls back.
        data = json.loads((tmp_path / "kit.json").read_text())
        data["honours_key"] = "true"
        data["results"]["listing"]["detail"] = "edited"
        (tmp_path / "kit.json").write_text(json.dumps(data))
        edited = check_json(config, monkeypatch)["classes"]["place_order"]
        assert edited["delivery"] == AT_MOST_ONCE and "digest" in edited["delivery_why"]

    def test_the_running_gateways_gauge_says_the_same(self, tmp_path: Path) -> None:
        rep = report_for("keyed", tmp_path)
        rep.write(tmp_path / "kit.json")
        toml = gateway_toml(tmp_path).replace(
            'read_view = "lagging"\n', 'read_view = "lagging"\nconformance_report = "kit.json"\n'
        )
        with upstream_under_kit("keyed", tmp_path, toml) as (gw, _, _drv):
            scraped = gw.service.metrics.render().decode()
        assert 'effectgate_exactly_once{action="place_order"} 1.0' in scraped

    def test_the_unkeyed_tool_is_at_most_once_with_its_report(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rep = report_for("unkeyed", tmp_path)
        rep.write(tmp_path / "kit.json")
        config = tmp_path / "gw.toml"
        config.write_text(
            gateway_toml(tmp_path, "unkeyed").replace(
                'read_view = "none"\n', 'read_view = "none"\nconformance_report = "kit.json"\n'
            )
        )
        note = check_json(config, monkeypatch)["classes"]["send_note"]
        assert note["delivery"] == AT_MOST_ONCE and note["listing"] == "probe"
        assert "honours_key = 'false'" in note["delivery_why"]
