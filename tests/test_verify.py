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

from effectgate._checks.verify import Check, config_checks
from effectgate._checks.verify_own import CASES, own_class_checks
from effectgate._doors.cli.main import app
from effectgate._service._config import load_config
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


CUSTOM_CLASSES = """
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Literal

from effectgate import IntentBase, PositiveDecimal, identifier


class Refund(IntentBase):
    action: Literal["refund_payment"]
    customer: identifier(r"^cus_[a-z0-9]{4,12}$", 16)
    currency: Literal["EUR", "USD"]
    amount: PositiveDecimal
    notify: bool


def amount(effect: Mapping[str, str | int | bool]) -> Decimal:
    return Decimal(str(effect["amount"]))
"""

CUSTOM_CONFIG = """
[store]
url = "sqlite:///ledger.db"

[adapters.payments]
kind = "paper"

[adapters.infra]
kind = "paper"

[classes.refund_payment]
schema = "verify_custom_classes:Refund"
value = "verify_custom_classes:amount"
adapter = "payments"
effect_class = "non_idempotent_mutation"
visibility_horizon = 30
key_retention = 3600
target_field = "customer"

[classes.scale_service]
adapter = "infra"
effect_class = "idempotent_mutation"
visibility_horizon = 20
key_retention = 3600
target_field = "service"

[classes.scale_service.json_schema]
type = "object"
required = ["service", "replicas", "region"]

[classes.scale_service.json_schema.properties.service]
type = "string"
pattern = "^[a-z][a-z0-9-]{2,20}$"
maxLength = 21

[classes.scale_service.json_schema.properties.replicas]
type = "integer"
minimum = 1
maximum = 50

[classes.scale_service.json_schema.properties.region]
type = "string"
enum = ["eu-west-1", "us-east-1"]

[policies.refund_payment]
kind = "limit"
max_value = "500"
approve_above = "100"

[policies.scale_service]
kind = "limit"

[controls.scale_service]
max_repeats = 2

[controls.refund_payment]
max_rejection_rate = 0.5
min_samples = 3
"""


@pytest.fixture
def custom(tmp_path: Path) -> Path:
    (tmp_path / "verify_custom_classes.py").write_text(CUSTOM_CLASSES)
    cfg = tmp_path / "custom.toml"
    cfg.write_text(CUSTOM_CONFIG)
    return cfg


def own(cfg_path: Path, url: str | None = None) -> dict[tuple[str, str], Check]:
    cfg = load_config(cfg_path)
    return {(c.guarantee, c.subject): c for c in own_class_checks(cfg, url)}


CASE_TITLES = [title for title, _, _ in CASES]
APPROVAL = "approval where the floor or the policy asks (tiers)"
BREAKER = "a breaker tripped by its thresholds holds, a reset releases"
WRITE_OFF = "written off past the horizon, then it appears: reported"
HOSTILE = "hostile intents are refused and write no row"


class TestLedgerCasesOnYourOwnClasses:
    """The ledger cases (invariants 1, 2, 3, 4, the controls, approval tiers) run through a gate
    built from the user's own classes and policies, with generated intents the policy accepts,
    and judged by the shared invariant checkers."""

    def test_the_starter_classes_pass_every_case(self, starter: Path) -> None:
        starter.write_text(
            starter.read_text()
            + "\n[controls.submit_order]\nmax_repeats = 3\n"
            + "\n[controls.cancel_order]\nmax_new_targets = 2\n"
        )
        found = own(starter)
        for name in ("submit_order", "cancel_order"):
            for title in CASE_TITLES:
                assert found[(title, name)].status == "pass", found[(title, name)]
        assert found[(APPROVAL, "submit_order")].status == "pass"
        assert "self_approval" in found[(APPROVAL, "submit_order")].why
        # cancel_order's policy never asks for approval: not applicable, and said why.
        assert found[(APPROVAL, "cancel_order")].status == "n/a"
        # Each breaker was tripped by its own configured threshold, fed its signal.
        assert "max_repeats=3: tripped after 4" in found[(BREAKER, "submit_order")].why
        assert "max_new_targets=2: tripped after 3" in found[(BREAKER, "cancel_order")].why

    def test_a_class_with_minted_ids_passes_every_case(self, starter: Path) -> None:
        """The cases choose their own ids, so a minted class runs them with caller ids (issue
        39 item 7): they pass instead of failing on ids effectgate would have minted."""
        edit(
            starter,
            "[classes.submit_order]\n",
            '[classes.submit_order]\noperation_ids = "minted"\n',
        )
        assert load_config(starter).registry.get("submit_order").operation_ids == "minted"
        found = own(starter)
        for title in CASE_TITLES:
            # The starter sets no breaker thresholds: that case is n/a for every class.
            want = "n/a" if title == BREAKER else "pass"
            assert found[(title, "submit_order")].status == want, found[(title, "submit_order")]
        assert found[(APPROVAL, "submit_order")].status == "pass"

    def test_a_breaker_without_thresholds_is_not_applicable(self, starter: Path) -> None:
        # The case never trips a breaker by hand: with no [controls.X] threshold nothing
        # trips it automatically, and the case says so instead of passing.
        found = own(starter)
        assert found[(BREAKER, "submit_order")].status == "n/a"
        assert "no thresholds in [controls.submit_order]" in found[(BREAKER, "submit_order")].why

    def test_two_custom_classes_one_from_json_schema(self, custom: Path) -> None:
        found = own(custom)
        for name in ("refund_payment", "scale_service"):
            for title in CASE_TITLES:
                assert found[(title, name)].status == "pass", found[(title, name)]
        ask = found[(APPROVAL, "refund_payment")]
        assert ask.status == "pass", ask
        # refund_payment's breaker watches the rejection rate: fed refused refunds, it trips.
        assert "max_rejection_rate=0.5: tripped" in found[(BREAKER, "refund_payment")].why
        assert "rejection rate" in found[(BREAKER, "refund_payment")].why
        assert "repeats" in found[(BREAKER, "scale_service")].why

    def test_generated_intents_are_what_the_policy_accepts(self, custom: Path) -> None:
        from effectgate._checks.verify_intents import IntentSource
        from effectgate._core.intent import Tier

        cfg = load_config(custom)
        ac = cfg.registry.get("refund_payment")
        source = IntentSource(cfg.registry, ac, cfg.policy)
        auto, ask = source.auto(), source.needs_approval()
        assert auto is not None and ask is not None
        assert source.tier(auto) is Tier.VALIDATE and source.tier(ask) is Tier.APPROVE
        assert str(auto["customer"]).startswith("cus_") and auto["currency"] in ("EUR", "USD")

    def test_a_class_whose_floor_needs_a_human_goes_through_approval(self, custom: Path) -> None:
        # Every case runs with the scratch approvers giving the approval a human would.
        edit(
            custom, 'target_field = "customer"', 'target_field = "customer"\ntier_floor = "approve"'
        )
        found = own(custom)
        for title in CASE_TITLES:
            assert found[(title, "refund_payment")].status == "pass", found[
                (title, "refund_payment")
            ]
        ask = found[(APPROVAL, "refund_payment")]
        assert ask.status == "pass" and "tier approve, 1 approver(s)" in ask.why

    def test_multi_approve_needs_distinct_approvers_from_the_class_roles(
        self, custom: Path
    ) -> None:
        edit(
            custom,
            'target_field = "customer"',
            'target_field = "customer"\ntier_floor = "multi_approve"',
        )
        custom.write_text(
            custom.read_text()
            + '\n[authority.approver_roles]\ntreasury = ["alice", "bob"]\n'
            + '\n[authority.approvers]\nrefund_payment = ["treasury"]\n'
        )
        found = own(custom)
        for title in CASE_TITLES:
            assert found[(title, "refund_payment")].status == "pass", found[
                (title, "refund_payment")
            ]
        ask = found[(APPROVAL, "refund_payment")]
        assert ask.status == "pass", ask
        assert "tier multi_approve, 2 approver(s)" in ask.why
        assert "after 1 of 2: awaiting_approval" in ask.why
        assert "the same approver again: duplicate_approver" in ask.why
        assert "venue calls before the quorum=0" in ask.why

    def test_a_role_with_one_approver_where_two_are_needed_fails(self, custom: Path) -> None:
        edit(
            custom,
            'target_field = "customer"',
            'target_field = "customer"\ntier_floor = "multi_approve"',
        )
        custom.write_text(
            custom.read_text()
            + '\n[authority.approver_roles]\ntreasury = ["alice"]\n'
            + '\n[authority.approvers]\nrefund_payment = ["treasury"]\n'
        )
        found = own(custom)
        ask = found[(APPROVAL, "refund_payment")]
        assert ask.status == "fail" and "needs 2 distinct approvers" in ask.why
        quorum = {c.subject: c for c in config_checks(load_config(custom)) if c.status == "fail"}[
            "refund_payment"
        ]
        assert quorum.guarantee == "approval-quorum-reachable"
        assert "1 hold its approver roles (treasury)" in quorum.why

    def test_a_class_without_a_read_view_is_never_written_off(self, custom: Path) -> None:
        edit(
            custom,
            "[classes.scale_service.json_schema]\n",
            '[classes.scale_service.venue]\nread_view = "none"\n\n'
            "[classes.scale_service.json_schema]\n",
        )
        found = own(custom)
        late = found[(WRITE_OFF, "scale_service")]
        assert late.status == "n/a" and "read_view = none" in late.why
        assert found[(WRITE_OFF, "refund_payment")].status == "pass"
        assert "['ledger-says-failed']" in found[(WRITE_OFF, "refund_payment")].why

    def test_hostile_intents_cover_arrays_nested_objects_and_numbers(self, custom: Path) -> None:
        from effectgate._checks.verify_intents import IntentSource

        cfg = load_config(custom)
        source = IntentSource(cfg.registry, cfg.registry.get("scale_service"), cfg.policy)
        good = source.auto()
        assert good is not None
        labels = {why for why, _ in source.hostile(good)}
        for expected in (
            "replicas: a float for a number",
            "replicas: above the maximum",
            "replicas: a bool for a number",
            "tool_output_digests: a float in an array",
            "tool_output_digests: more than maxItems",
            "proposed_by: an object with an unknown key",
            "proposed_by: model an integer for a string",
            "region: not one of the enum",
            "service: a non-ASCII look-alike",
            "service: missing",
        ):
            assert expected in labels, sorted(labels)
        # Each is refused by the class's own parser, and the valid audit fields are accepted.
        assert all(source.parse(raw) is None for _, raw in source.hostile(good))
        audit = source.audit_fields()
        assert isinstance(audit["proposed_by"], dict) and isinstance(
            audit["tool_output_digests"], list
        )
        assert source.parse({**good, **audit}) is not None

    def test_a_permissive_parser_fails_the_hostile_case(
        self, custom: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # If hostile values got through (here: the generator's valid intent substituted for
        # each), the case must fail and name them.
        from effectgate._checks.verify_intents import IntentSource

        monkeypatch.setattr(
            IntentSource, "hostile", lambda self, raw: [("replicas: let through", dict(raw))]
        )
        found = own(custom)
        bad = found[(HOSTILE, "scale_service")]
        assert bad.status == "fail" and "ACCEPTED: replicas: let through" in bad.why

    def test_a_reintroduced_bug_fails_the_crash_case(self, custom: Path) -> None:
        # Invariants 1 and 3: with the catalogue's mutation applied, a retry of an uncertain
        # row is dispatched again; verify must say so for the user's own classes.
        from effectgate._sim.mutations import applied, by_name

        with applied(by_name("redispatch_uncertain")):
            found = own(custom)
        crash = "a crash after the journal stays uncertain, then settles"
        for name in ("refund_payment", "scale_service"):
            assert found[(crash, name)].status == "fail", found[(crash, name)]
            assert "venue calls=1" in found[(crash, name)].why
        assert found[(CASE_TITLES[0], "refund_payment")].status == "pass"

    def test_a_policy_that_allows_nothing_is_not_applicable(self, custom: Path) -> None:
        # "nobody" is no valid customer: no intent of the class is ever allowed, so the cases
        # cannot run; they say so instead of passing.
        edit(custom, 'approve_above = "100"', 'allowed_targets = ["nobody"]')
        found = own(custom)
        replay = found[(CASE_TITLES[0], "refund_payment")]
        assert replay.status == "n/a"
        assert "allows no generated intent" in replay.why
        assert found[(CASE_TITLES[0], "scale_service")].status == "pass"

    @pytest.mark.postgres
    def test_on_postgresql_scratch_schemas(self, custom: Path) -> None:
        from conftest import require_pg

        found = own(custom, require_pg())
        assert all(c.status != "fail" for c in found.values()), found
        assert found[(CASE_TITLES[3], "scale_service")].status == "pass"


class TestConformanceKitOnConfiguredAdapters:
    """``verify --adapters``: the kit (docs/adapters.md) against each configured adapter where
    effectgate can drive a sandbox (paper, http against a loopback paper server); n/a with
    why for every other kind."""

    def test_paper_and_http_adapters_pass_and_others_are_not_applicable(
        self, starter: Path
    ) -> None:
        import dataclasses

        from effectgate._checks.verify_adapters import adapter_checks
        from effectgate._service._config import AdapterConfig

        cfg = load_config(starter)
        adapters = {
            **cfg.adapters,
            "remote": AdapterConfig("remote", "http", endpoint="http://127.0.0.1:8700"),
            "cards": AdapterConfig("cards", "stripe"),
        }
        found = {
            (c.guarantee, c.subject): c
            for c in adapter_checks(dataclasses.replace(cfg, adapters=adapters))
        }
        for name in ("paper", "remote"):
            assert found[("conformance same-key-twice", name)].status == "pass"
            assert found[("conformance kit", name)].status == "pass", found
        # The HTTP adapter's transport classification is measured against loopback faults.
        tc = found[("conformance transport-classification", "remote")]
        assert tc.status == "pass" and "reset-after-request: unknown" in tc.why
        # stripe: against localstripe (a separate test covers every stand-in).
        assert found[("conformance kit", "cards")].status == "pass", found
        assert "localstripe" in found[("conformance refusal-is-not-applied", "cards")].why

    def test_stripe_aws_and_email_run_against_local_stand_ins(self, starter: Path) -> None:
        import dataclasses

        from effectgate._checks.verify_adapters import adapter_checks
        from effectgate._service._config import AdapterConfig

        cfg = load_config(starter)
        adapters = {
            "cards": AdapterConfig("cards", "stripe", credential_env="USERS_STRIPE_KEY"),
            "cloud": AdapterConfig(
                "cloud", "aws", options={"region": "eu-west-1", "access_key_id": "AKIAUSER"}
            ),
            "mail": AdapterConfig(
                "mail",
                "email",
                options={"host": "smtp.example.test", "port": 587, "sender": "eg@example.test"},
            ),
            "own": AdapterConfig("own", "custom", factory="mymodule:make"),
        }
        found = {
            (c.guarantee, c.subject): c
            for c in adapter_checks(dataclasses.replace(cfg, adapters=adapters))
        }
        for name, venue in (("cards", "localstripe"), ("cloud", "moto"), ("mail", "aiosmtpd")):
            kit = found[("conformance kit", name)]
            assert kit.status == "pass", found
            # Measured, not assumed: the stand-ins ignore idempotency keys, and a provable
            # refusal is classified not_applied.
            assert "honours_key measured 'false'" in kit.why
            refusal = found[("conformance refusal-is-not-applied", name)]
            assert refusal.status == "pass" and venue in refusal.why
            assert found[("conformance credentials-never-leak", name)].status == "pass"
        # The email venue has no read view: the kit counted deliveries at the relay.
        assert "deliveries counted" in found[("conformance same-key-twice", "mail")].why
        own = found[("conformance kit", "own")]
        assert own.status == "n/a" and "no sandbox" in own.why

    def test_a_stand_in_that_is_not_installed_is_not_applicable(
        self, starter: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import dataclasses
        import importlib.util

        from effectgate._checks.verify_adapters import adapter_checks
        from effectgate._service._config import AdapterConfig

        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == "localstripe" else real(name, *a),
        )
        cfg = load_config(starter)
        adapters = {"cards": AdapterConfig("cards", "stripe", credential_env="K")}
        found = adapter_checks(dataclasses.replace(cfg, adapters=adapters))
        assert [(c.status, c.guarantee) for c in found] == [("n/a", "conformance kit")]
        assert "localstripe is not installed" in found[0].why

    def test_a_class_claiming_keys_over_a_venue_that_forgets_them_fails(
        self, starter: Path
    ) -> None:
        import dataclasses

        from effectgate._checks.verify_adapters import adapter_checks
        from effectgate._service._config import AdapterConfig

        edit(
            starter,
            "[classes.cancel_order.json_schema]\n",
            '[classes.cancel_order.venue]\nhonours_key = "true"\n\n'
            "[classes.cancel_order.json_schema]\n",
        )
        cfg = load_config(starter)
        forgets = AdapterConfig("paper", "paper", options={"honour_key": False})
        found = {
            (c.guarantee, c.subject): c
            for c in adapter_checks(dataclasses.replace(cfg, adapters={"paper": forgets}))
        }
        claim = found[("declared honours_key measured by the kit", "cancel_order")]
        assert claim.status == "fail" and "measured 'false'" in claim.why
        assert ("declared honours_key measured by the kit", "submit_order") not in found

    def test_the_command_runs_the_kit_with_adapters(self, starter: Path) -> None:
        done = TestVerifyCommand().run(starter, "--adapters", "--json")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        rows = json.loads(done.stdout)
        assert any(r["guarantee"] == "conformance same-key-twice" for r in rows)


class TestFromTheAgentsSide:
    """``verify --from-agent`` (seed 001: the venue is unreachable from the agent's environment):
    a venue that accepts a connection from where it runs is a failure, exit 1."""

    @staticmethod
    def config(tmp_path: Path, url: str) -> Path:
        from servicekit import config_text

        path = tmp_path / "svc.toml"
        path.write_text(config_text(venue_url=url, store_url=f"sqlite:///{tmp_path / 'l.db'}"))
        return path

    def test_a_reachable_venue_fails(self, tmp_path: Path) -> None:
        import socket

        with socket.create_server(("127.0.0.1", 0)) as listening:
            port = listening.getsockname()[1]
            cfg = self.config(tmp_path, f"http://127.0.0.1:{port}")
            out = runner.invoke(app, ["verify", "--config", str(cfg), "--from-agent", "--json"])
        assert out.exit_code == 1, out.output
        rows = json.loads(out.stdout)
        assert [(r["guarantee"], r["status"]) for r in rows] == [
            ("venue-unreachable-from-agent", "fail")
        ]
        assert f"127.0.0.1:{port}" in rows[0]["why"] and "without effectgate" in rows[0]["why"]

    def test_a_venue_refusing_connections_passes_and_no_ledger_is_opened(
        self, tmp_path: Path
    ) -> None:
        import socket

        with socket.create_server(("127.0.0.1", 0)) as closed:
            port = closed.getsockname()[1]  # closed when the block ends: nothing listens
        cfg = self.config(tmp_path, f"http://127.0.0.1:{port}")
        out = runner.invoke(app, ["verify", "--config", str(cfg), "--from-agent", "--json"])
        assert out.exit_code == 0, out.output
        (row,) = json.loads(out.stdout)
        assert row["status"] == "pass" and "connection refused" in row["why"]
        assert not (tmp_path / "l.db").exists()

    def test_where_each_venue_kind_is_looked_for(self) -> None:
        from effectgate._checks.reach import VenueAddress, venue_address
        from effectgate._service._config import AdapterConfig

        assert venue_address(AdapterConfig("p", "paper")) is None
        assert venue_address(AdapterConfig("s", "stripe")) == VenueAddress(
            "api.stripe.com", 443, "Stripe's default endpoint"
        )
        assert venue_address(
            AdapterConfig("a", "aws", options={"region": "eu-west-1"})
        ) == VenueAddress("ec2.eu-west-1.amazonaws.com", 443, "EC2's regional endpoint")
        assert venue_address(
            AdapterConfig("e", "email", options={"host": "smtp.example.org", "port": 587})
        ) == VenueAddress("smtp.example.org", 587, "options.host/port")
        assert venue_address(AdapterConfig("h", "http", endpoint="http://10.0.0.5:8080/v1")) == (
            VenueAddress("10.0.0.5", 8080, "endpoint")
        )
