"""The venue contract, declared and verified: exactly-once is claimed only where the key is
declared honoured AND a conformance report verifies it; starters for each real venue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._execute.adapter import Listing, Outcome, VenueRecord
from effectgate._execute.windowing import SpillStats, sorted_window
from effectgate._service import load_config
from effectgate.errors import ConfigError
from effectgate.testing import (
    AT_MOST_ONCE,
    EXACTLY_ONCE,
    ConformanceReport,
    PaperAdapter,
    PaperVenue,
    delivery_claim,
    read_report,
    run_conformance,
)

runner = CliRunner()


def report(tmp_path: Path, honoured: bool, adapter: str = "paper") -> Path:
    rep = ConformanceReport(adapter=adapter, venue="paper", listing="key_order")
    rep.honours_key = "true" if honoured else "false"
    rep.add("same-key-twice", "pass" if honoured else "not-kept", "measured")
    path = tmp_path / "kit.json"
    rep.write(path)
    return path


class TestDeliveryClaim:
    def test_exactly_once_needs_declaration_and_verified_report(self, tmp_path: Path) -> None:
        path = str(report(tmp_path, honoured=True))
        assert delivery_claim("true", path, "paper")[0] == EXACTLY_ONCE
        assert delivery_claim("unknown", path, "paper")[0] == AT_MOST_ONCE
        assert delivery_claim("true", None, "paper")[0] == AT_MOST_ONCE
        assert delivery_claim("true", path, "stripe")[0] == AT_MOST_ONCE

    def test_declared_but_measured_ignored_is_not_exactly_once(self, tmp_path: Path) -> None:
        claim, why = delivery_claim("true", str(report(tmp_path, honoured=False)), "paper")
        assert claim == AT_MOST_ONCE and "not honoured" in why

    def test_edited_report_does_not_verify(self, tmp_path: Path) -> None:
        path = report(tmp_path, honoured=False)
        raw = json.loads(path.read_text())
        raw["honours_key"] = "true"
        raw["results"]["same-key-twice"]["status"] = "pass"
        path.write_text(json.dumps(raw))
        with pytest.raises(ConfigError, match="digest"):
            read_report(path)
        assert delivery_claim("true", str(path), "paper")[0] == AT_MOST_ONCE


class TestStartersAndCheck:
    @pytest.mark.parametrize("venue", ["paper", "stripe", "aws", "email"])
    def test_init_venue_writes_a_valid_config(self, tmp_path: Path, venue: str) -> None:
        result = runner.invoke(app, ["init", "--dir", str(tmp_path), "--venue", venue])
        assert result.exit_code == 0, result.output
        cfg = load_config(str(tmp_path / "effectgate.toml"))
        kinds = {a.kind for a in cfg.adapters.values()}
        assert venue in kinds or venue == "paper"

    def test_email_starter_declares_no_read_view(self, tmp_path: Path) -> None:
        runner.invoke(app, ["init", "--dir", str(tmp_path), "--venue", "email"])
        cfg = load_config(str(tmp_path / "effectgate.toml"))
        ac = cfg.registry.get("send_email")
        assert ac.venue.read_view.value == "none" and ac.venue.honours_key.value == "false"

    def test_check_claims_exactly_once_only_with_a_verified_report(self, tmp_path: Path) -> None:
        runner.invoke(app, ["init", "--dir", str(tmp_path)])
        cfg_path = tmp_path / "effectgate.toml"
        report(tmp_path, honoured=True)
        text = cfg_path.read_text().replace(
            "[classes.cancel_order.json_schema]",
            '[classes.cancel_order.venue]\nhonours_key = "true"\n'
            'conformance_report = "kit.json"\n\n[classes.cancel_order.json_schema]',
        )
        cfg_path.write_text(text)
        out = runner.invoke(app, ["check", "--config", str(cfg_path), "--json"])
        assert out.exit_code == 0, out.output
        classes = json.loads(out.stdout)["classes"]
        assert classes["cancel_order"]["delivery"] == EXACTLY_ONCE
        assert classes["submit_order"]["delivery"] == AT_MOST_ONCE

    def test_secret_in_venue_options_refused(self, tmp_path: Path) -> None:
        runner.invoke(app, ["init", "--dir", str(tmp_path), "--venue", "stripe"])
        cfg_path = tmp_path / "effectgate.toml"
        cfg_path.write_text(
            cfg_path.read_text().replace(
                'probe_via = "search"', 'probe_via = "search"\napi_key = "sk_live_x"'
            )
        )
        with pytest.raises(ConfigError, match="secrets never go in the config file"):
            load_config(str(cfg_path))


class TestWindowSort:
    def test_spilled_sort_yields_every_record_once_in_key_order(self) -> None:
        """Invariant 5 with bounded memory: duplicates survive the spill and the merge."""
        recs = [VenueRecord(f"k{(i * 7) % 13}", f"v{i}") for i in range(100)]
        stats = SpillStats()
        out = list(sorted_window(reversed(recs), chunk=8, stats=stats))
        assert out == sorted(recs) and stats.spilled_runs == 12

    def test_paper_adapter_keeps_key_order_listing(self) -> None:
        assert PaperAdapter(PaperVenue()).listing is Listing.KEY_ORDER


class TestPytestPlugin:
    def test_plugin_fixture_runs_the_kit_and_writes_the_report(
        self, effectgate_kit: object, tmp_path: Path
    ) -> None:
        """The entry point is installed: adapter authors get the kit as a fixture."""
        from venuekit import PaperDriver

        venue = PaperVenue(max_quantity=1000)
        rep = effectgate_kit(PaperAdapter(venue), PaperDriver(venue))  # type: ignore[operator]
        assert rep.honours_key == "true" and rep.failed == []


class TestClaimSurfaces:
    def test_ops_show_and_metrics_carry_the_claim(self, tmp_path: Path) -> None:
        """ops show --config and effectgate_exactly_once say the same as check."""
        from prometheus_client import CollectorRegistry, generate_latest

        from effectgate._service._venues import DeliveryCollector, config_claims

        runner.invoke(app, ["init", "--dir", str(tmp_path)])
        cfg_path = str(tmp_path / "effectgate.toml")
        cfg = load_config(cfg_path)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(DeliveryCollector(config_claims(cfg)))  # type: ignore[arg-type]
        text = generate_latest(registry).decode()
        assert 'effectgate_exactly_once{action="submit_order"} 0.0' in text
        from effectgate._service import Service

        svc = Service(cfg)
        try:
            order = {
                "action": "submit_order",
                "intent_version": "1",
                "instrument": "XYZ-PERP",
                "side": "buy",
                "quantity": "1",
                "limit_price": "10",
            }
            svc.gate.submit("submit_order", "op-1", order)
        finally:
            svc.close()
        out = runner.invoke(app, ["ops", "show", "op-1", "--config", cfg_path])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["delivery"]["claim"] == AT_MOST_ONCE


class TestKitOnShippedKeyOrderAdapters:
    def test_http_adapter_against_the_paper_venue_server_passes(self) -> None:
        """The HTTP adapter, over a real HTTP server, keeps every promise the kit checks."""
        from effectgate.adapters._paper_server import serve_paper_venue
        from effectgate.adapters.http import HttpVenueAdapter
        from venuekit import PaperDriver

        venue = PaperVenue(max_quantity=1000)
        secret = "CANARY-http-venue-key-0123456789"
        with serve_paper_venue(venue, api_key=secret) as running:

            def make(url: str) -> HttpVenueAdapter:
                return HttpVenueAdapter(url, credential=secret, timeout=2.0)

            driver = PaperDriver(
                venue,
                secret=secret,
                unreachable=lambda: make("http://127.0.0.1:9"),
                pointed_at=make,
            )
            rep = run_conformance(make(running.url), driver, horizon=1.0)
        assert rep.failed == [], rep.render()
        assert rep.honours_key == "true"
        # Issue 20: refused and TLS-reset are proven not applied; the rest stay unknown.
        detail = rep.results["transport-classification"]["detail"]
        assert rep.results["transport-classification"]["status"] == "pass"
        assert "refused: not_applied" in detail and "tls-handshake-reset: not_applied" in detail
        assert "reset-after-request: unknown" in detail
        assert "timeout-after-request: unknown" in detail
        assert rep.results["credentials-never-leak"]["status"] == "pass"
        assert rep.results["refusal-is-not-applied"]["status"] == "pass"

    def test_an_adapter_claiming_non_execution_after_writing_fails(self) -> None:
        """Issue 20: an adapter that turns every transport error into not_applied (proof or
        not) fails transport-classification: a reset after the request is not proof."""
        from effectgate._execute.adapter import Receipt, refusal
        from effectgate.adapters._paper_server import serve_paper_venue
        from effectgate.adapters.http import HttpVenueAdapter
        from effectgate.errors import AdapterError
        from venuekit import PaperDriver

        class Overclaiming(HttpVenueAdapter):
            def execute(self, request, *, timeout):  # type: ignore[no-untyped-def]
                try:
                    return super().execute(request, timeout=timeout)
                except AdapterError:
                    return Receipt(Outcome.NOT_APPLIED, proof=refusal("the call failed"))

        venue = PaperVenue(max_quantity=1000)
        with serve_paper_venue(venue, api_key="k-0123456789") as running:

            def make(url: str) -> HttpVenueAdapter:
                return Overclaiming(url, credential="k-0123456789", timeout=1.0)

            driver = PaperDriver(venue, secret="k-0123456789", pointed_at=make)
            rep = run_conformance(make(running.url), driver, horizon=1.0)
        result = rep.results["transport-classification"]
        assert (
            result["status"] == "fail"
            and "reset-after-request gave not_applied" in (result["detail"])
        )

    def test_a_dry_run_is_checked_to_leave_no_effect(self) -> None:
        """Seed 000: speculation never reaches the venue. The kit lists the venue before and
        after a dry run: the paper adapter passes, and one whose dry run applies the request
        fails, naming the record that appeared."""
        from effectgate._execute.adapter import DryRun
        from effectgate.adapters._paper_sandbox import PaperSandbox
        from venuekit import PaperDriver

        plain = PaperVenue(max_quantity=1000)
        rep = run_conformance(PaperAdapter(plain), PaperDriver(plain), horizon=1.0)
        assert rep.results["speculation-leaves-no-effect"]["status"] == "n/a"

        venue = PaperVenue(max_quantity=1000)
        adapter = PaperAdapter(venue, sandbox=PaperSandbox(venue))
        rep = run_conformance(adapter, PaperDriver(venue), horizon=1.0)
        result = rep.results["speculation-leaves-no-effect"]
        assert result["status"] == "pass", result
        assert "0 under the dry run's key" in result["detail"]

        class Leaky(PaperAdapter):
            def speculate(self, request, *, attempt, timeout):  # type: ignore[no-untyped-def]
                self.execute(request, timeout=timeout)  # the bug: the "dry" run has an effect
                return DryRun("ALLOW", "looks fine", request.operation_key, 60.0)

        leaky_venue = PaperVenue(max_quantity=1000)
        leaky = Leaky(leaky_venue, sandbox=PaperSandbox(leaky_venue))
        rep = run_conformance(leaky, PaperDriver(leaky_venue), horizon=1.0)
        result = rep.results["speculation-leaves-no-effect"]
        assert result["status"] == "fail" and "1 under the dry run's key" in result["detail"]
        assert "speculation-leaves-no-effect" in rep.failed

    def test_a_dry_run_that_leaks_under_another_key_is_caught_by_the_listing(self) -> None:
        """Seed 000 (invariant: no speculation with a real effect): an effect made under a key
        other than the dry run's is invisible to a probe of that key; the kit's before/after
        listing of the venue still finds it and names the new record."""
        import dataclasses

        from effectgate._execute.adapter import DryRun
        from effectgate.adapters._paper_sandbox import PaperSandbox
        from venuekit import PaperDriver

        class LeakyElsewhere(PaperAdapter):
            def speculate(self, request, *, attempt, timeout):  # type: ignore[no-untyped-def]
                other = dataclasses.replace(request, operation_key=request.operation_key + "~x")
                self.execute(other, timeout=timeout)  # the bug: an effect under another key
                return DryRun("ALLOW", "looks fine", request.operation_key, 60.0)

        venue = PaperVenue(max_quantity=1000)
        leaky = LeakyElsewhere(venue, sandbox=PaperSandbox(venue))
        rep = run_conformance(leaky, PaperDriver(venue), horizon=1.0)
        result = rep.results["speculation-leaves-no-effect"]
        assert result["status"] == "fail", result
        assert "0 under the dry run's key" in result["detail"]
        assert "; new: " in result["detail"]
        assert "speculation-leaves-no-effect" in rep.failed

    def test_paper_venue_ignoring_keys_is_reported_not_kept(self) -> None:
        from venuekit import PaperDriver

        venue = PaperVenue(honour_key=False, max_quantity=1000)
        rep = run_conformance(PaperAdapter(venue), PaperDriver(venue), horizon=1.0)
        assert rep.honours_key == "false"
        assert rep.results["same-key-twice"]["status"] == "not-kept"
        assert rep.failed == []


class TestVenueExtras:
    def test_missing_extra_is_named_and_testing_needs_none(self, tmp_path: Path) -> None:
        """Without stripe and boto3 installed: effectgate.testing (the kit) still imports,
        and a kind = "stripe" adapter is refused naming the extra to install."""
        import subprocess
        import sys

        code = (
            "import sys\n"
            "for name in ('stripe', 'boto3', 'botocore'):\n"
            "    sys.modules[name] = None\n"
            "import effectgate.testing\n"
            "from effectgate._service._venues import build_venue_adapter\n"
            "from effectgate.errors import ConfigError\n"
            "try:\n"
            "    build_venue_adapter('pay', 'stripe', endpoint=None, credential={},"
            " timeout=5.0, options={})\n"
            "except ConfigError as exc:\n"
            "    print(exc.message)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
        assert "pip install 'effectgate[stripe]'" in out.stdout, out.stderr


class TestDeclaredListing:
    def test_declared_listing_must_match_the_adapter(self, tmp_path: Path) -> None:
        """A class that says its venue lists by time window, on the key-ordered paper venue,
        is a located check error; a matching declaration passes and is shown."""
        runner.invoke(app, ["init", "--dir", str(tmp_path)])
        cfg_path = tmp_path / "effectgate.toml"
        base = cfg_path.read_text()
        block = '[classes.cancel_order.venue]\nlisting = "{}"\n\n[classes.cancel_order.json_schema]'
        cfg_path.write_text(
            base.replace("[classes.cancel_order.json_schema]", block.format("time_window"))
        )
        out = runner.invoke(app, ["check", "--config", str(cfg_path)])
        assert out.exit_code == 2
        assert "classes.cancel_order.venue.listing" in out.output
        assert "lists by 'key_order'" in out.output
        cfg_path.write_text(
            base.replace("[classes.cancel_order.json_schema]", block.format("key_order"))
        )
        out = runner.invoke(app, ["check", "--config", str(cfg_path), "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["classes"]["cancel_order"]["listing"] == "key_order"

    def test_unknown_listing_refused_at_parse(self, tmp_path: Path) -> None:
        runner.invoke(app, ["init", "--dir", str(tmp_path)])
        cfg_path = tmp_path / "effectgate.toml"
        cfg_path.write_text(
            cfg_path.read_text().replace(
                "[classes.cancel_order.json_schema]",
                '[classes.cancel_order.venue]\nlisting = "by_magic"\n\n'
                "[classes.cancel_order.json_schema]",
            )
        )
        with pytest.raises(ConfigError, match="listing"):
            load_config(str(cfg_path))
