"""A newcomer's first hour (issue 11, an outside trial), one class per behaviour.

`check` says what `serve` will say; config errors name every key involved once; logs are
readable; a busy port is a usage error; the CLI behaves like other CLIs; venue facts are never
defaulted; the README and the quick start work when pasted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate.errors import ConfigError
from effectgate.frontends.cli import app
from effectgate.service import parse_config
from servicekit import VENUE_KEY_ENV, config_text

GOOD = config_text(store_url="sqlite:///:memory:")


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "svc.toml")
    return info.value.message


def write(tmp_path: Path, text: str, name: str = "svc.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


class TestConfigMessages:
    def test_a_misspelt_required_key_names_the_missing_key_and_the_unknown_one(self) -> None:
        text = GOOD.replace('url = "sqlite:///:memory:"', 'ulr = "sqlite:///:memory:"')
        message = config_error(text)
        assert "store.url: is required" in message, message
        assert f"store.ulr (line {line_of(text, 'ulr =')}) is an unknown key" in message, message

        text = GOOD.replace('adapter = "venue"', 'adpter = "venue"', 1)
        message = config_error(text)
        assert "classes.submit_order.adapter: is required" in message, message
        assert "classes.submit_order.adpter" in message, message

    def test_an_unknown_optional_key_suggests_the_known_one(self) -> None:
        message = config_error(GOOD.replace("[service]\n", "[service]\nprot = 8788\n"))
        assert "service.prot" in message and "did you mean port?" in message, message

    def test_no_location_is_said_twice(self) -> None:
        text = GOOD.replace("key_retention = 86400", "key_retention = 100", 1)
        message = config_error(text)
        line = line_of(text, "visibility_horizon")
        assert message.startswith(f"svc.toml:{line}: classes.submit_order.visibility_horizon: "
                                  "60.0s is not well inside key_retention 100.0s"), message
        assert message.count("submit_order") == 1, message

    @pytest.mark.parametrize(("url", "shown"), [
        ("mysql://db.example/ledger", "'mysql://db.example/ledger'"),
        ("mysql://eg:hunter2@db.example/ledger", "'mysql://eg:***@db.example/ledger'"),
    ])
    def test_a_store_url_is_quoted_whole(self, url: str, shown: str) -> None:
        message = config_error(GOOD.replace("sqlite:///:memory:", url))
        assert f"unsupported store URL {shown}" in message, message
        assert "hunter2" not in message


class TestCheckIsWhatServeChecks:
    """`check` passing means `serve` gets past its start-up checks; both say the same thing."""

    def http_config(self, tmp_path: Path, **replace: str) -> str:
        text = config_text(store_url=f"sqlite:///{tmp_path}/l.db", venue_url="http://127.0.0.1:9")
        for old, new in replace.items():
            text = text.replace(old, new)
        return write(tmp_path, text)

    def test_unset_credential_variable(self, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(VENUE_KEY_ENV, raising=False)
        config = self.http_config(tmp_path)
        for command in (["check"], ["serve"]):
            out = CliRunner().invoke(app, [*command, "--config", config])
            assert out.exit_code == 2, out.output
            assert "adapters.venue.credential_env" in out.output, out.output
            assert f"environment variable {VENUE_KEY_ENV} is not set" in out.output
        monkeypatch.setenv(VENUE_KEY_ENV, "k")
        assert CliRunner().invoke(app, ["check", "--config", config]).exit_code == 0

    def test_missing_credential_file(self, tmp_path: Path) -> None:
        config = self.http_config(tmp_path, **{
            f'credential_env = "{VENUE_KEY_ENV}"': f'credential_file = "{tmp_path}/nope.key"'})
        out = CliRunner().invoke(app, ["check", "--config", config])
        assert out.exit_code == 2 and "adapters.venue.credential_file" in out.output, out.output

    def test_sqlite_folder_must_exist(self, tmp_path: Path) -> None:
        text = config_text(store_url=f"sqlite:///{tmp_path}/missing/l.db")
        config = write(tmp_path, text)
        for command in (["check"], ["serve"]):
            out = CliRunner().invoke(app, [*command, "--config", config])
            assert out.exit_code == 2, out.output
            assert f"svc.toml:{line_of(text, 'url =')}: store.url" in out.output, out.output
            assert "does not exist" in out.output and f"{tmp_path}/missing" in out.output
        (tmp_path / "missing").mkdir()
        assert CliRunner().invoke(app, ["check", "--config", config]).exit_code == 0

    def test_unreachable_postgresql_with_connect(self, tmp_path: Path) -> None:
        url = "postgresql://eg:hunter2@127.0.0.1:1/nowhere"
        config = write(tmp_path, config_text(store_url=url))
        unchecked = CliRunner().invoke(app, ["check", "--config", config, "--json"])
        assert unchecked.exit_code == 0, unchecked.output
        assert any("not contacted" in n for n in json.loads(unchecked.stdout)["checked"])
        out = CliRunner().invoke(app, ["check", "--config", config, "--connect"])
        assert out.exit_code == 2, out.output
        assert "store.url: cannot connect to 'postgresql://eg:***@127.0.0.1:1/nowhere'" \
            in out.output, out.output
        assert "hunter2" not in out.output

    @pytest.mark.postgres
    def test_reachable_postgresql_with_connect(self, tmp_path: Path) -> None:
        from conftest import require_pg

        config = write(tmp_path, config_text(store_url=require_pg()))
        out = CliRunner().invoke(app, ["check", "--config", config, "--connect", "--json"])
        assert out.exit_code == 0, out.output
        assert any("answers" in n for n in json.loads(out.stdout)["checked"])
