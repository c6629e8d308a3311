"""The CLI as a principal (issue 11, item 5): ``effectgate token create|list|revoke``, and
control commands that record the token's principal, or ``os:<user>`` without one, on every
store."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._doors.cli.main import app
from effectgate._service import os_actor
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from servicekit import OPERATOR, config_text

ENV = "EFFECTGATE_OPERATOR_TOKEN"


def cli(*args: str, token: str | None = None) -> Any:
    # env None unsets the variable: a token from the caller's environment never leaks in.
    return CliRunner().invoke(app, list(args), env={ENV: token, "COLUMNS": "200"})


def said(out: Any) -> str:
    """What a command said, or the error it ended with (main() prints it as '[code] text';
    CliRunner calls the app, so the error is the result's exception)."""
    error = out.exception
    return out.output + (f"[{error.code}] {error.message}" if hasattr(error, "code") else "")


@pytest.fixture
def ledger(store_factory) -> tuple[str, Store]:
    return store_factory.url, store_factory()


def audit(store: Store, kind: str) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in store.iter_audit() if e.kind == kind]


class TestTokenCommands:
    def test_create_list_revoke_without_a_token_act_as_the_os_user(self, ledger) -> None:
        url, store = ledger
        made = cli("token", "create", "bot", "--role", "agent", "--scope", "alpha", "--store", url)
        assert made.exit_code == 0, made.output
        token = made.stdout.strip()  # the token alone on stdout, for $(...)
        assert token.startswith("eg_agent_") and "shown once" in made.stderr
        found = store.principal_for_token(token)
        assert found is not None and (found.name, found.scope) == ("bot", "alpha")
        listed = cli("token", "list", "--store", url, "--json")
        [row] = json.loads(listed.stdout)
        assert (row["name"], row["created_by"]) == (
            "bot",
            os_actor(),
        ) and token not in listed.stdout
        # Holding the store's credentials, not a token: said in the audit entry.
        [created] = audit(store, "principal_created")
        assert created["by"] == os_actor() and created["credential"] == "store"
        gone = cli("token", "revoke", "bot", "--store", url, "--json")
        assert gone.exit_code == 0 and json.loads(gone.stdout)["revoked_by"] == os_actor()
        assert store.principal_for_token(token) is None
        assert json.loads(cli("token", "list", "--store", url, "--json").stdout) == []
        kept = json.loads(cli("token", "list", "--all", "--store", url, "--json").stdout)
        assert [(r["name"], r["live"]) for r in kept] == [("bot", False)]
        assert cli("token", "revoke", "bot", "--store", url).exit_code == 1

    def test_with_an_operator_token_the_principal_acts(self, ledger) -> None:
        url, store = ledger
        root = store.create_principal("root", "operator", "*", created_by="os:x", now=1.0).token
        made = cli(
            "token", "create", "carol", "--role", "approver", "--scope", "alpha", "--store", url,
            "--json", token=root,
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        assert json.loads(made.stdout)["created_by"] == "root"
        created = audit(store, "principal_created")[-1]
        assert created["by"] == "root" and "credential" not in created
        revoked = cli("token", "revoke", "carol", "--store", url, "--json", token=root)
        assert json.loads(revoked.stdout)["revoked_by"] == "root"

    def test_a_token_that_may_not_manage_tokens_changes_nothing(self, ledger) -> None:
        url, store = ledger
        scoped = store.create_principal("ops-a", "operator", "alpha", created_by="x", now=1.0)
        agent = store.create_principal("bot", "agent", "alpha", created_by="x", now=1.0)
        gone = store.create_principal("old", "operator", "*", created_by="x", now=1.0)
        store.revoke_principal("old", revoked_by="x", now=2.0)
        before = store.list_principals(include_revoked=True)
        for token, needle in (
            (scoped.token, "every tenant"),
            (agent.token, "may not use the operator API"),
            (gone.token, "unknown token"),
            ("eg_operator_made-up", "unknown token"),
        ):
            out = cli(
                "token", "create", "x", "--role", "agent", "--scope", "alpha", "--store", url,
                token=token,
            )  # fmt: skip
            assert out.exit_code == 1, out.output
            assert f"{ENV}: " in said(out) and needle in said(out), said(out)
        assert store.list_principals(include_revoked=True) == before

    def test_bad_principals_are_refused(self, ledger) -> None:
        url, store = ledger
        for args in (
            ["x", "--role", "agent", "--scope", "*"],
            ["system:x", "--role", "agent", "--scope", "alpha"],
            ["x", "--role", "root", "--scope", "alpha"],
        ):
            out = cli("token", "create", *args, "--store", url)
            assert out.exit_code in (1, 2), out.output
        assert store.list_principals(include_revoked=True) == []

    def test_with_config_a_config_token_authenticates_and_keeps_its_name(
        self, tmp_path: Path
    ) -> None:
        """--config: the config's (deprecated) operator token still acts, and a ledger
        principal may not take a config token's name."""
        from effectgate.store import open_store

        open_store(f"sqlite:///{tmp_path}/l.db", create=True).close()
        config = tmp_path / "svc.toml"
        config.write_text(config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        taken = cli(
            "token", "create", "alpha", "--role", "agent", "--scope", "alpha", "--config",
            str(config), token=OPERATOR,
        )  # fmt: skip
        assert taken.exit_code == 1 and "principal_exists" in said(taken), said(taken)
        made = cli(
            "token", "create", "gamma", "--role", "agent", "--scope", "gamma", "--config",
            str(config), "--json", token=OPERATOR,
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        assert json.loads(made.stdout)["created_by"] == "ops"
        listed = cli("token", "list", "--config", str(config))
        assert "gamma" in listed.stdout and "deprecated" in listed.stderr


class TestControlsActAsAPrincipal:
    @pytest.fixture
    def world(self, ledger) -> tuple[str, Store, Gate]:
        url, store = ledger
        gate = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet(
                {"submit_order": LimitPolicy(Decimal("10000"), approve_above=Decimal("1000"))}
            ),
        )
        return url, store, gate

    def test_without_a_token_the_os_user_is_recorded_and_marked(self, world) -> None:
        url, store, _ = world
        assert cli("kill", "on", "submit_order", "--store", url).exit_code == 0
        assert store.controls("submit_order").updated_by == os_actor()
        [entry] = audit(store, "kill_switch_on")
        assert entry["operator"] == os_actor() and entry["credential"] == "store"

    def test_with_a_token_its_principal_is_recorded(self, world) -> None:
        url, store, _ = world
        root = store.create_principal("root", "operator", "*", created_by="x", now=1.0).token
        out = cli("kill", "on", "submit_order", "--store", url, token=root)
        assert out.exit_code == 0, out.output
        assert store.controls("submit_order").updated_by == "root"
        [entry] = audit(store, "kill_switch_on")
        assert entry["operator"] == "root" and "credential" not in entry
        # --token-env names another variable.
        other = CliRunner().invoke(
            app,
            ["shadow", "on", "submit_order", "--store", url, "--token-env", "MY_TOKEN"],
            env={"MY_TOKEN": root, ENV: None},
        )
        assert other.exit_code == 0, other.output
        assert audit(store, "shadow_on")[0]["operator"] == "root"

    def test_an_approver_token_approves_and_cannot_kill(self, world) -> None:
        url, store, gate = world
        big = gate.submit("submit_order", "op-big", {**EXAMPLE_ORDER, "quantity": "20"})
        carol = store.create_principal("carol", "approver", "default", created_by="x", now=1.0)
        kill = cli("kill", "on", "submit_order", "--store", url, token=carol.token)
        assert kill.exit_code == 1 and "may not use the operator API" in said(kill)
        assert not store.controls("submit_order").killed
        ok = cli(
            "approvals", "approve", "op-big", "--fingerprint", big.fingerprint, "--store", url,
            token=carol.token,
        )  # fmt: skip
        assert ok.exit_code == 0, ok.output
        assert gate.get("op-big").state is State.VALIDATED
        [entry] = audit(store, "approval")
        assert entry["approver"] == "carol" and "credential" not in entry

    def test_an_approver_of_another_scope_or_a_revoked_one_is_refused(self, world) -> None:
        url, store, gate = world
        big = gate.submit("submit_order", "op-big", {**EXAMPLE_ORDER, "quantity": "20"})
        other = store.create_principal("dave", "approver", "beta", created_by="x", now=1.0)
        gone = store.create_principal("erin", "approver", "default", created_by="x", now=1.0)
        store.revoke_principal("erin", revoked_by="x", now=2.0)
        for token in (other.token, gone.token):
            out = cli(
                "approvals", "approve", "op-big", "--fingerprint", big.fingerprint, "--store",
                url, token=token,
            )  # fmt: skip
            assert out.exit_code == 1, out.output
        assert gate.get("op-big").state is State.AWAITING_APPROVAL
        assert audit(store, "approval") == []

    @pytest.mark.parametrize(
        "command",
        [
            ["kill", "on"],
            ["breaker", "reset"],
            ["approvals", "approve"],
            ["shadow", "off"],
            ["authority", "step"],
            ["token", "create"],
            ["token", "revoke"],
        ],
    )
    def test_help_says_the_store_credential_is_full_power(self, command: list[str]) -> None:
        out = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
        text = " ".join(out.stdout.split())
        assert "os:<user>" in text and "full administrative power" in text, text
