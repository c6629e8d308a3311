"""The config file: validated fully at start-up, errors naming key and line; the CLI around it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._service import Service, load_config, parse_config
from effectgate.errors import ConfigError
from servicekit import AGENT_A, ORDER, config_text, sha

GOOD = config_text(store_url="sqlite:///:memory:")


def fails(text: str, *needles: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "svc.toml")
    for needle in needles:
        assert needle in info.value.message, info.value.message
    return info.value.message


class TestValidation:
    def test_the_test_config_is_valid(self) -> None:
        cfg = parse_config(GOOD, "svc.toml")
        assert cfg.registry.names() == ["cancel_order", "submit_order"]
        assert {t.name: t.scope for t in cfg.tokens}["alpha"] == "alpha"

    def test_unknown_key_names_key_and_line(self) -> None:
        """A typo is an error naming the key and its line, never a silently ignored setting."""
        text = GOOD.replace("timeout = 5.0", "timeout = 5.0").replace(
            'kind = "paper"', 'kind = "paper"\nendpiont = "x"'
        )
        line = text.splitlines().index('endpiont = "x"') + 1
        fails(text, f"svc.toml:{line}: adapters.venue.endpiont", "unknown key")

    def test_wrong_type_names_key(self) -> None:
        fails(
            GOOD.replace("visibility_horizon = 60.0", 'visibility_horizon = "60"', 1),
            "classes.submit_order.visibility_horizon",
            "must be a number",
        )

    def test_value_limit_on_a_class_without_a_value_measure(self) -> None:
        """A ceiling that could never be checked is a configuration error, not a no-op."""
        fails(
            GOOD.replace(
                "[policies.cancel_order]\n", '[policies.cancel_order]\nmax_value = "10"\n', 1
            ),
            "policies.cancel_order.max_value",
            "no value measure",
        )

    def test_a_paper_venue_can_answer_slowly(self) -> None:
        """``latency`` rehearses a real venue's round trip; it is bounded like a call timeout."""
        from effectgate._service._runtime import build_adapter
        from effectgate.adapters.paper import PaperAdapter

        cfg = parse_config(GOOD.replace('kind = "paper"', 'kind = "paper"\nlatency = 0.1'), "s")
        adapter = build_adapter(cfg.adapters["venue"])
        assert isinstance(adapter, PaperAdapter) and adapter.latency == 0.1
        plain = build_adapter(parse_config(GOOD, "s").adapters["venue"])
        assert isinstance(plain, PaperAdapter) and plain.latency == 0.0
        fails(
            GOOD.replace('kind = "paper"', 'kind = "paper"\nlatency = 45'),
            "adapters.venue.latency",
            "ceiling on one adapter call",
        )
        fails(
            GOOD.replace('kind = "paper"', 'kind = "paper"\nlatency = -1'),
            "adapters.venue.latency",
            "finite number >= 0",
        )

    def test_toml_syntax_error_gives_line(self) -> None:
        fails(GOOD + "\n[broken\n", "not valid TOML", "line")

    @pytest.mark.parametrize("key", ["api_key", "credential", "password", "venue_secret"])
    def test_secrets_in_the_file_are_refused(self, key: str) -> None:
        """Secrets never go in the config: only the NAME of an env var or a file path."""
        fails(
            GOOD.replace('kind = "paper"', f'kind = "paper"\n{key} = "hunter2"'),
            f"adapters.venue.{key}",
            "secrets never go in the config file",
        )

    def test_plaintext_token_is_refused(self) -> None:
        fails(
            GOOD.replace(f'sha256 = "{sha(AGENT_A)}"', 'token = "abc"'),
            "tokens.alpha.token",
            "plaintext tokens",
        )

    def test_token_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        text = GOOD.replace(f'sha256 = "{sha(AGENT_A)}"', 'env = "EG_T_ALPHA"')
        fails(text, "tokens.alpha.env", "EG_T_ALPHA is not set")
        monkeypatch.setenv("EG_T_ALPHA", "from-env")
        cfg = parse_config(text)
        assert {t.name: t.sha256 for t in cfg.tokens}["alpha"] == sha("from-env")

    def test_http_adapter_needs_a_credential_source(self) -> None:
        fails(
            GOOD.replace('kind = "paper"', 'kind = "http"\nendpoint = "http://127.0.0.1:1"'),
            "adapters.venue.credential_env",
            "exactly one of",
        )

    def test_class_with_unknown_adapter(self) -> None:
        fails(
            GOOD.replace('adapter = "venue"', 'adapter = "nowhere"', 1),
            "classes.submit_order.adapter",
            "no adapter named 'nowhere'",
        )

    def test_schema_reference_must_be_an_intent_model(self) -> None:
        fails(
            GOOD.replace("effectgate.examples:SubmitOrder", "effectgate.examples:notional"),
            "classes.submit_order.schema",
            "not a subclass",
        )
        fails(
            GOOD.replace("effectgate.examples:SubmitOrder", "no_such_mod:X"),
            "classes.submit_order.schema",
            "cannot import",
        )

    def test_declared_decimal_fields_must_match_the_schema(self) -> None:
        fails(
            GOOD.replace(
                'decimal_fields = ["quantity", "limit_price"]', 'decimal_fields = ["quantity"]'
            ),
            "classes.submit_order.decimal_fields",
            "says ['quantity']",
        )

    def test_require_provenance_is_read_per_class_and_off_by_default(self) -> None:
        assert (
            parse_config(GOOD, "svc.toml").registry.get("submit_order").require_provenance is False
        )
        text = GOOD.replace(
            "key_retention = 86400", "key_retention = 86400\nrequire_provenance = true", 1
        )
        cfg = parse_config(text, "svc.toml")
        assert cfg.registry.get("submit_order").require_provenance is True
        fails(
            GOOD.replace(
                "key_retention = 86400", 'key_retention = 86400\nrequire_provenance = "yes"', 1
            ),
            "require_provenance",
        )

    def test_horizon_must_sit_inside_key_retention(self) -> None:
        fails(
            GOOD.replace("key_retention = 86400", "key_retention = 100", 1),
            "classes.submit_order",
            "not well inside",
        )

    def test_venue_contract_block_is_parsed_and_defaults_to_the_weakest_promise(self) -> None:
        cfg = parse_config(GOOD, "svc.toml")
        plain = cfg.registry.get("submit_order").venue
        assert (plain.honours_key.value, plain.read_view.value) == ("unknown", "lagging")
        assert not plain.sandbox_uses_given_key and plain.sandbox_key_persistence is None
        text = (
            GOOD + '\n[classes.submit_order.venue]\nhonours_key = "true"\n'
            'read_view = "authoritative"\nsandbox_uses_given_key = true\n'
            "sandbox_key_persistence = 600\n"
        )
        venue = parse_config(text, "svc.toml").registry.get("submit_order").venue
        assert (venue.honours_key.value, venue.read_view.value) == ("true", "authoritative")
        assert venue.sandbox_uses_given_key and venue.sandbox_key_persistence == 600

    @pytest.mark.parametrize(
        ("line", "needle"),
        [
            ('honours_key = "yes"', "honours_key"),
            ('read_view = "eventual"', "read_view"),
            ("sandbox_key_persistence = -1", "sandbox_key_persistence"),
            ("honors_key = true", "unknown key"),
        ],
    )
    def test_venue_contract_block_refuses_bad_promises(self, line: str, needle: str) -> None:
        text = GOOD.replace(
            "key_retention = 86400",
            f"key_retention = 86400\n[classes.submit_order.venue]\n{line}",
            1,
        )
        fails(text, "classes.submit_order.venue", needle)

    def test_non_loopback_host_needs_public(self) -> None:
        fails(
            GOOD.replace('host = "127.0.0.1"', 'host = "0.0.0.0"'),
            "service.host",
            "not a loopback address",
        )
        parse_config(GOOD.replace('host = "127.0.0.1"', 'host = "0.0.0.0"\npublic = true'))

    def test_duplicate_token_values_are_refused(self) -> None:
        fails(
            GOOD.replace(
                f'sha256 = "{sha("test-agent-beta-token")}"', f'sha256 = "{sha(AGENT_A)}"'
            ),
            "same value",
        )


JSON_CLASS = """
[classes.send_note]
adapter = "venue"
effect_class = "non_idempotent_mutation"
visibility_horizon = 30
key_retention = 86400
decimal_fields = ["amount"]
[classes.send_note.json_schema]
type = "object"
required = ["to", "amount"]
[classes.send_note.json_schema.properties.to]
type = "string"
pattern = "^[a-z]{1,10}$"
[classes.send_note.json_schema.properties.amount]
type = "string"
format = "positive-decimal"
[classes.send_note.json_schema.properties.copies]
type = "integer"
minimum = 1
maximum = 3
[classes.send_note.json_schema.properties.urgent]
type = "boolean"
"""


class TestJsonSchemaClasses:
    def registry(self, extra: str = ""):  # type: ignore[no-untyped-def]
        return parse_config(GOOD + JSON_CLASS + extra).registry

    def note(self, **kw: object) -> dict[str, object]:
        return {"intent_version": "1", "action": "send_note", "to": "bob", "amount": "2.50", **kw}

    def test_strict_like_a_python_model(self) -> None:
        """Bad input rules hold for config-declared classes: no coercion, closed objects."""
        from effectgate.errors import IntentError

        reg = self.registry()
        assert reg.parse("send_note", self.note(copies=2)).effect["amount"] == "2.5"
        for bad, field in (
            (self.note(copies="2"), "copies"),
            (self.note(copies=9), "copies"),
            (self.note(amount=2.5), "amount"),
            (self.note(to="Боб"), "to"),
            (self.note(extra=1), "extra"),
            (self.note(urgent="yes"), "urgent"),
        ):
            with pytest.raises(IntentError) as info:
                reg.parse("send_note", bad)
            assert info.value.field == field

    @pytest.mark.parametrize(
        "prop,needle",
        [
            ('type = "array"', "is not one of"),
            ('type = "string"', "free-text strings need a maxLength"),
            ('type = "string"\npattern = "[a-z]+"', "anchored"),
            ('type = "string"\nformat = "email"', "is not one of"),
            ('type = "string"\nenum = ["a"]\npattern = "^a$"', "at most one of"),
            ('type = "integer"\n"$ref" = "#/x"', "unknown key"),
        ],
    )
    def test_unsupported_schema_is_refused_naming_the_key(self, prop: str, needle: str) -> None:
        extra = f"[classes.send_note.json_schema.properties.bad]\n{prop}\n"
        with pytest.raises(ConfigError) as info:
            self.registry(extra)
        assert "classes.send_note.json_schema.properties.bad" in info.value.message
        assert needle in info.value.message

    def test_audit_fields_cannot_be_redeclared(self) -> None:
        extra = '[classes.send_note.json_schema.properties.rationale]\ntype = "boolean"\n'
        with pytest.raises(ConfigError, match="cannot be redeclared"):
            self.registry(extra)


class TestCli:
    def test_init_check_and_first_action(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The newcomer's path: init writes a valid config whose tokens work."""
        monkeypatch.chdir(tmp_path)
        runner = CliRunner()
        out = runner.invoke(app, ["init"])
        assert out.exit_code == 0, out.output
        token = next(line.split()[-1] for line in out.output.splitlines() if "agent:" in line)
        assert token not in (tmp_path / "effectgate.toml").read_text()
        again = runner.invoke(app, ["init"])
        assert again.exit_code == 1  # refuses to overwrite
        checked = runner.invoke(app, ["check", "--config", "effectgate.toml", "--json"])
        assert checked.exit_code == 0
        assert json.loads(checked.output)["classes"]["submit_order"]["policy"] is True
        svc = Service(load_config(tmp_path / "effectgate.toml"))
        try:
            who = svc.tokens.from_token(token)
            body = {k: v for k, v in ORDER.items() if k != "order_type"}
            assert svc.propose(who, "submit_order", "first", body).venue_id
        finally:
            svc.close()

    def test_invalid_config_exits_2_naming_the_key(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text(GOOD.replace('kind = "paper"', 'kind = "carrier-pigeon"'))
        out = CliRunner().invoke(app, ["check", "--config", str(bad)])
        assert out.exit_code == 2 and "adapters.venue.kind" in out.output

    def test_read_commands_accept_config_and_json(self, tmp_path: Path) -> None:
        config = tmp_path / "svc.toml"
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/l.db", horizon=0.001))
        svc = Service(load_config(config))
        svc.propose(svc.tokens.from_token(AGENT_A), "submit_order", "op-1", ORDER)
        svc.close()
        time.sleep(0.01)
        runner = CliRunner()
        listed = runner.invoke(app, ["ops", "list", "--config", str(config), "--json"])
        assert listed.exit_code == 0
        assert [r["operation_id"] for r in json.loads(listed.output)] == ["op-1"]
        shown = runner.invoke(
            app, ["ops", "show", "op-1", "--scope", "alpha", "--config", str(config)]
        )
        assert shown.exit_code == 0 and json.loads(shown.output)["state"] == "acknowledged"
        assert runner.invoke(app, ["ops", "show", "nope", "--config", str(config)]).exit_code == 1
        divs = runner.invoke(app, ["divergences", "--config", str(config), "--json"])
        assert divs.exit_code == 0 and json.loads(divs.output) == []
        rec = runner.invoke(app, ["reconcile", "--config", str(config), "--json"])
        # The in-process paper venue of a new process has forgotten op-1: a real alarm (3).
        assert rec.exit_code == 3
        assert json.loads(rec.stdout)["new_divergences"][0][0] == "missing-at-venue"
        both = runner.invoke(app, ["divergences", "--config", str(config), "--store", "x"])
        assert both.exit_code == 2


class TestControlsConfig:
    BREAKER = (
        "\n[controls.submit_order]\nwindow = 120\nmax_rejection_rate = 0.5\n"
        'min_samples = 4\nmax_window_value = "5000"\nmax_repeats = 3\n'
        "max_new_targets = 2\n"
    )

    def test_breakers_approvals_and_alerts_reach_the_config(self) -> None:
        """Invariant 7: breaker thresholds are operator configuration, read at start-up."""
        cfg = parse_config(
            GOOD + self.BREAKER + "\n[approvals]\nmulti_approvers = 3\nttl = 600\n"
            '\n[alerts]\nwebhook = "http://127.0.0.1:9/hook"\ntimeout = 2\n',
            "svc.toml",
        )
        b = cfg.breakers["submit_order"]
        assert (
            b.window,
            b.max_rejection_rate,
            b.min_samples,
            str(b.max_value),
            b.max_repeats,
            b.max_new_targets,
        ) == (120.0, 0.5, 4, "5000", 3, 2)
        assert cfg.approvals.multi_approvers == 3 and cfg.approvals.ttl == 600.0
        assert cfg.alerts.webhook == "http://127.0.0.1:9/hook" and cfg.alerts.timeout == 2.0

    def test_service_gate_gets_the_breakers(self) -> None:
        cfg = parse_config(GOOD + self.BREAKER, "svc.toml")
        svc = Service(cfg)
        try:
            assert svc.gate.breakers == cfg.breakers and svc.gate.approvals == cfg.approvals
            assert svc.reconciler.alerts is svc.alerts is svc.gate.alerts
        finally:
            svc.close()

    @pytest.mark.parametrize(
        ("extra", "needles"),
        [
            (
                "\n[controls.launch_rocket]\nmax_repeats = 1\n",
                ("controls.launch_rocket", "no action class named 'launch_rocket'"),
            ),
            (
                '\n[controls.cancel_order]\nmax_window_value = "10"\n',
                ("controls.cancel_order.max_window_value", "no value measure"),
            ),
            (
                "\n[controls.submit_order]\nmax_rejection_rate = 1.5\n",
                ("controls.submit_order.max_rejection_rate", "[0, 1)"),
            ),
            (
                "\n[controls.submit_order]\nmax_repeats = -1\n",
                ("controls.submit_order.max_repeats", ">= 0"),
            ),
            (
                '\n[controls.submit_order]\nmax_window_value = "lots"\n',
                ("controls.submit_order.max_window_value", "not a decimal"),
            ),
            ("\n[controls.submit_order]\nwindow = 60\n", ("at least one of",)),
            (
                "\n[controls.submit_order]\nmax_repeats = 1\nmax_repeat = 2\n",
                ("controls.submit_order.max_repeat", "unknown key"),
            ),
            ("\n[approvals]\nmulti_approvers = 1\n", ("approvals.multi_approvers",)),
            ('\n[alerts]\nwebhook = "ftp://x"\n', ("alerts.webhook", "not an http(s) URL")),
            (
                '\n[alerts]\nwebhook = "http://u:pw@127.0.0.1/h"\n',
                ("alerts.webhook", "credentials"),
            ),
        ],
    )
    def test_bad_controls_config_names_key_and_line(
        self, extra: str, needles: tuple[str, ...]
    ) -> None:
        """Bad operator input at start-up: the error names the key and its line."""
        text = GOOD + extra
        message = fails(text, *needles)
        assert message.startswith("svc.toml:") and message.split(":")[1].strip().isdigit()

    def test_token_names_are_identities(self) -> None:
        """Token names are recorded as proposer/approver identities: ASCII only."""
        fails(GOOD.replace("[tokens.ops]", '[tokens."ops chief"]'), "token name must match")
