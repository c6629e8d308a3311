"""A newcomer's first hour (issue 11, an outside trial), one class per behaviour.

`check` says what `serve` will say; config errors name every key involved once; logs are
readable; a busy port is a usage error; the CLI behaves like other CLIs; venue facts are never
defaulted; the README and the quick start work when pasted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._service import Service, load_config, parse_config
from effectgate.adapters._paper_sandbox import PaperSandbox
from effectgate.adapters._paper_server import serve_paper_venue
from effectgate.adapters.paper import PaperVenue
from effectgate.errors import ConfigError
from servicekit import AGENT_A, ORDER, VENUE_KEY_ENV, bearer, config_text, effectgate_cmd, free_port

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
        assert message.startswith(
            f"svc.toml:{line}: classes.submit_order.visibility_horizon: "
            "60.0s is not well inside key_retention 100.0s"
        ), message
        assert message.count("submit_order") == 1, message

    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("mysql://db.example/ledger", "'mysql://db.example/ledger'"),
            ("mysql://eg:hunter2@db.example/ledger", "'mysql://eg:***@db.example/ledger'"),
        ],
    )
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

    def test_unset_credential_variable(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
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
        config = self.http_config(
            tmp_path,
            **{f'credential_env = "{VENUE_KEY_ENV}"': f'credential_file = "{tmp_path}/nope.key"'},
        )
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
        assert (
            "store.url: cannot connect to 'postgresql://eg:***@127.0.0.1:1/nowhere'" in out.output
        ), out.output
        assert "hunter2" not in out.output

    @pytest.mark.postgres
    def test_reachable_postgresql_with_connect(self, tmp_path: Path) -> None:
        from conftest import require_pg

        config = write(tmp_path, config_text(store_url=require_pg()))
        out = CliRunner().invoke(app, ["check", "--config", config, "--connect", "--json"])
        assert out.exit_code == 0, out.output
        assert any("answers" in n for n in json.loads(out.stdout)["checked"])


TIMESTAMPED = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: "
)


def serve_briefly(config: Path, *extra: str, seconds: float = 1.5) -> list[str]:
    """``effectgate serve`` for a moment (the reconciler polling every 0.1 s); its log lines."""
    port = free_port()
    log = config.with_suffix(".log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*effectgate_cmd(), "serve", "--config", str(config), "--port", str(port), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, VENUE_KEY_ENV: "k"},
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/actions/submit_order",
            headers=bearer(AGENT_A, **{"Idempotency-Key": "op-log"}),
            json=ORDER,
        )
        assert reply.status_code in (200, 201), reply.text  # 200: a replay, second run
        time.sleep(seconds)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return [line for line in log.read_text().splitlines() if line.strip()]


class TestLogs:
    @pytest.fixture
    def config(self, tmp_path: Path) -> Iterator[Path]:
        with serve_paper_venue(PaperVenue(), api_key="k") as venue:
            path = tmp_path / "svc.toml"
            path.write_text(
                config_text(
                    store_url=f"sqlite:///{tmp_path}/l.db",
                    venue_url=venue.url,
                    service="reconcile_interval = 0.1",
                )
            )
            yield path

    def test_lines_are_timestamped_and_polls_are_quiet(self, config: Path) -> None:
        lines = serve_briefly(config)
        assert lines, "serve logged nothing"
        for line in lines:
            assert TIMESTAMPED.match(line), line
        # ~15 reconciler passes, each an HTTP poll of the venue: none of them is a log line.
        assert not [line for line in lines if "HTTP Request" in line or "httpx" in line], lines
        assert len(lines) < 15, lines

    def test_json_lines_from_the_config_or_the_flag(self, config: Path) -> None:
        config.write_text(
            config.read_text().replace("[service]\n", '[service]\nlog_format = "json"\n')
        )
        for extra in ((), ("--log-format", "json")):
            lines = serve_briefly(config, *extra, seconds=0.3)
            entries = [json.loads(line) for line in lines]
            assert entries and all(
                {"ts", "level", "logger", "message"} <= set(e) for e in entries
            ), lines
            assert any(e["logger"].startswith("uvicorn") for e in entries), lines
        text = serve_briefly(config, "--log-format", "text", seconds=0.3)
        assert all(TIMESTAMPED.match(line) for line in text), text


class TestBusyPort:
    """A port in use is a usage error (2), not 3: 3 means a new alarm from reconcile."""

    @pytest.fixture
    def busy(self) -> Iterator[int]:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            yield int(holder.getsockname()[1])

    def test_serve(self, busy: int, tmp_path: Path) -> None:
        config = write(tmp_path, config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        proc = subprocess.run(
            [*effectgate_cmd(), "serve", "--config", config, "--port", str(busy)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert f"port {busy} on 127.0.0.1 is already in use" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr

    def test_venue_serve(self, busy: int) -> None:
        proc = subprocess.run(
            [*effectgate_cmd(), "venue", "serve", "--port", str(busy)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "EFFECTGATE_VENUE_KEY": "k"},
        )
        assert proc.returncode == 2, proc.stderr
        assert f"port {busy} on 127.0.0.1 is already in use" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def every_command(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    # list_commands/get_command, not .commands: the CLI loads most commands lazily.
    for name in command.list_commands(None) if hasattr(command, "list_commands") else []:
        yield from every_command(command.get_command(None, name), (*path, name))


ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_ID = "op-" + "0123456789abcdef" * 6  # longer than any 80-column table cell


class TestCliConventions:
    def test_version(self) -> None:
        out = CliRunner().invoke(app, ["--version"])
        assert out.exit_code == 0 and out.stdout.strip() == "effectgate 0.1.0", out.output

    def test_short_help_everywhere(self) -> None:
        paths = list(every_command(typer.main.get_command(app)))
        assert len(paths) > 30
        for path in paths:
            out = CliRunner().invoke(app, [*path, "-h"], prog_name="effectgate")
            assert out.exit_code == 0 and "Usage: effectgate" in out.output, (path, out.output)

    def test_shell_completion_is_offered(self) -> None:
        helped = CliRunner().invoke(app, ["--help"], prog_name="effectgate")
        assert "--install-completion" in helped.output and "--show-completion" in helped.output
        shown = subprocess.run(
            [str(Path(sys.executable).with_name("effectgate")), "--show-completion", "bash"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SHELL": "/bin/bash"},
        )
        assert shown.returncode == 0, shown.stderr
        assert "_EFFECTGATE_COMPLETE=complete_bash" in shown.stdout, shown.stdout


class TestWholeValuesInPipes:
    """Piped output is for grep and scripts: no id or fingerprint is cut to fit 80 columns."""

    @pytest.fixture
    def config(self, tmp_path: Path) -> str:
        config = write(tmp_path, config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        svc = Service(load_config(config))
        try:
            agent = svc.tokens.from_token(AGENT_A)
            svc.propose(agent, "submit_order", LONG_ID, ORDER)
            # 10 x 100.00 = 1000 > approve_above 900: waits for an approval.
            svc.propose(agent, "submit_order", LONG_ID + "-big", {**ORDER, "quantity": "10"})
        finally:
            svc.close()
        return config

    def test_ops_list(self, config: str) -> None:
        out = CliRunner().invoke(app, ["ops", "list", "--config", config])
        assert out.exit_code == 0, out.output
        assert LONG_ID in out.stdout and "…" not in out.stdout, out.stdout

    def test_approvals_list_shows_the_fingerprint_to_approve(self, config: str) -> None:
        rows = json.loads(
            CliRunner().invoke(app, ["approvals", "list", "--config", config, "--json"]).stdout
        )
        out = CliRunner().invoke(app, ["approvals", "list", "--config", config])
        assert out.exit_code == 0, out.output
        assert rows[0]["fingerprint"] in out.stdout and f"alpha:{LONG_ID}-big" in out.stdout

    def test_reconcile_report_and_alarm_lines(self, tmp_path: Path) -> None:
        from effectgate import SQLiteStore

        SQLiteStore(f"{tmp_path}/l.db").close()
        venue = PaperVenue()
        venue.inject_record(f"default:{LONG_ID}")
        with serve_paper_venue(venue, api_key="k") as server:
            out = CliRunner().invoke(
                app,
                ["reconcile", "--store", f"sqlite:///{tmp_path}/l.db", "--venue", server.url],
                env={"EFFECTGATE_VENUE_KEY": "k"},
            )
        assert out.exit_code == 3, out.output
        assert out.stdout.count("\n") == 1 and "probe_errors=0" in out.stdout, out.stdout
        assert f"ALARM orphan key=default:{LONG_ID} venue_ids=" in out.stderr, out.stderr

    def test_demo_fits_the_terminal_it_is_given(self) -> None:
        out = subprocess.run(
            [*effectgate_cmd(), "demo"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "100"},
        )
        assert out.returncode == 0, out.stderr
        widths = [len(ANSI.sub("", line)) for line in out.stdout.splitlines()]
        assert max(widths) <= 100, max(widths)


class TestJsonEverywhere:
    def test_verify_bundle(self, tmp_path: Path) -> None:
        config = write(tmp_path, config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        svc = Service(load_config(config))
        svc.propose(svc.tokens.from_token(AGENT_A), "submit_order", "op-1", ORDER)
        svc.close()
        bundle = tmp_path / "op-1.json"
        exported = CliRunner().invoke(
            app,
            [
                "audit",
                "export",
                "op-1",
                "--scope",
                "alpha",
                "--config",
                config,
                "--out",
                str(bundle),
            ],
        )
        assert exported.exit_code == 0, exported.output
        out = CliRunner().invoke(app, ["audit", "verify-bundle", str(bundle), "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["ok"] is True
        data = json.loads(bundle.read_text())
        data["entries"][0]["detail_text"] = data["entries"][0]["detail_text"].replace(
            '"quantity":"4"', '"quantity":"40"'
        )
        bundle.write_text(json.dumps(data))
        out = CliRunner().invoke(app, ["audit", "verify-bundle", str(bundle), "--json"])
        assert out.exit_code == 3 and json.loads(out.stdout)["ok"] is False

    def test_alerts_check(self, tmp_path: Path) -> None:
        from effectgate import open_store

        open_store(f"sqlite:///{tmp_path}/l.db", create=True).close()  # commands never create
        config = write(tmp_path, config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        out = CliRunner().invoke(app, ["alerts", "check", "--config", config, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout) == []


class TestVenueFactsAreDeclared:
    """A class's visibility horizon and its venue's key retention come from the venue's
    documentation: the config never fills them in with round numbers."""

    @pytest.mark.parametrize("key", ["visibility_horizon", "key_retention"])
    def test_a_class_without_them_is_refused_naming_the_key(self, key: str) -> None:
        text = "\n".join(line for line in GOOD.splitlines() if not line.startswith(f"{key} ="))
        message = config_error(text)
        header = line_of(text, "[classes.submit_order]")
        assert message.startswith(f"svc.toml:{header}: classes.submit_order.{key}: is required"), (
            message
        )
        assert "venue's documentation" in message, message

    def test_init_writes_them_saying_where_they_come_from(self, tmp_path: Path) -> None:
        out = CliRunner().invoke(app, ["init", "--dir", str(tmp_path)])
        assert out.exit_code == 0, out.output
        text = (tmp_path / "effectgate.toml").read_text()
        classes = text.count("\n[classes.") - text.count("\n[classes.cancel_order.")
        for key in ("visibility_horizon", "key_retention"):
            lines = [line for line in text.splitlines() if line.startswith(f"{key} =")]
            assert len(lines) == classes, (key, lines)
        assert "from the venue's documentation" in text

    def test_a_settlement_window_beyond_the_retention_is_refused(self) -> None:
        from effectgate._core.intent import ActionClass, EffectClass
        from effectgate.errors import RegistryError
        from effectgate.examples import SubmitOrder

        text = GOOD.replace(
            "key_retention = 86400", "key_retention = 86400\nsettlement_window = 90000", 1
        )
        message = config_error(text)
        assert message.startswith(
            f"svc.toml:{line_of(text, 'settlement_window')}: "
            "classes.submit_order.settlement_window: "
        ), message
        assert "key_retention" in message
        with pytest.raises(RegistryError, match="settlement_window"):
            ActionClass(
                name="submit_order",
                model=SubmitOrder,
                adapter="paper",
                effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
                visibility_horizon=60.0,
                key_retention=1000.0,
                settlement_window=1000.0,
            )
        # Inside the retention but not well inside: accepted, and alerted (test_controls).
        parse_config(
            GOOD.replace(
                "key_retention = 86400", "key_retention = 86400\nsettlement_window = 80000", 1
            )
        )


class TestAgeingAlarmWithoutAConfiguredSink:
    """Invariant 11: an uncertain row past its settlement window pages, with or without a
    sink configured (the default sink is the ERROR log)."""

    def test_library_reconciler(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        from effectgate import Gate, LimitPolicy, PolicySet, Reconciler, SQLiteStore
        from effectgate._core.intent import ActionClass, EffectClass, Registry
        from effectgate._core.states import State
        from effectgate.examples import SubmitOrder
        from effectgate.testing import ManualClock, PaperAdapter

        class Silent(PaperAdapter):
            def execute(self, request, *, timeout):  # type: ignore[no-untyped-def]
                raise TimeoutError  # the venue never answers: the row stays uncertain

        clock = ManualClock()
        registry = Registry(
            [
                ActionClass(
                    name="submit_order",
                    model=SubmitOrder,
                    adapter="paper",
                    effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
                    visibility_horizon=600.0,
                    key_retention=86400.0,
                    settlement_window=30.0,
                )
            ]
        )
        store = SQLiteStore(str(tmp_path / "l.db"))
        adapter = Silent(PaperVenue())
        gate = Gate(
            store=store,
            registry=registry,
            adapters={"paper": adapter},
            policy=PolicySet({"submit_order": LimitPolicy(None)}),
            clock=clock,
        )
        assert gate.submit("submit_order", "op-u", ORDER).state is State.SUBMITTED
        clock.advance(31)
        rec = Reconciler(
            store=store, registry=registry, adapters={"paper": adapter}, clock=clock
        )  # no alerts= : a library user's reconciler
        with caplog.at_level(logging.ERROR, logger="effectgate.alerts"):
            rec.run_once()
        store.close()
        assert any("uncertain-aged" in r.getMessage() for r in caplog.records), caplog.text

    def test_reconcile_with_store_and_venue_runs_the_maintenance_rules(
        self, tmp_path: Path
    ) -> None:
        from effectgate import SQLiteStore

        url = f"sqlite:///{tmp_path}/l.db"
        SQLiteStore(f"{tmp_path}/l.db").close()
        venue = PaperVenue()
        venue.inject_record("default:op-outside")
        with serve_paper_venue(venue, api_key="k") as server:
            out = CliRunner().invoke(
                app,
                ["reconcile", "--store", url, "--venue", server.url, "--json"],
                env={"EFFECTGATE_VENUE_KEY": "k"},
            )
        assert out.exit_code == 3, out.output
        assert "ERROR effectgate.alerts: alert orphan" in out.stderr, out.stderr
        listed = CliRunner().invoke(app, ["alerts", "list", "--store", url, "--json"])
        assert [a["kind"] for a in json.loads(listed.stdout)] == ["orphan"]


def shell_blocks(markdown: str, heading: str) -> list[str]:
    """The ```sh blocks of the section under ``heading`` (up to the next heading)."""
    section = markdown.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def bash(script: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # The venv's bin first, so `effectgate` is this checkout's, as after `pip install -e .`.
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PATH": path},
    )


README = (Path(__file__).parent.parent / "README.md").read_text()


class TestReadmeServiceSection:
    def test_init_shell_sets_the_tokens(self, tmp_path: Path) -> None:
        out = bash(
            'eval "$(effectgate init --shell)" && echo "$AGENT_TOKEN $OPERATOR_TOKEN '
            '$EFFECTGATE_URL"',
            tmp_path,
        )
        assert out.returncode == 0, out.stderr
        agent, operator, url = out.stdout.split()
        assert url == "http://127.0.0.1:8787"  # the starter's [service] host and port
        config = load_config(tmp_path / "effectgate.toml")
        # The tokens are in the ledger (issue 11, item 5), not in the config file.
        assert config.tokens == ()
        assert "sha256" not in (tmp_path / "effectgate.toml").read_text()
        from effectgate.store import open_store

        store = open_store(config.store.url)
        try:
            found = {t: store.principal_for_token(t) for t in (agent, operator)}
            assert {(p.name, p.role.value, p.scope) for p in found.values() if p} == {
                ("agent", "agent", "default"),
                ("operator", "operator", "*"),
            }
            assert {p.token_prefix for p in store.list_principals()} == {agent[:17], operator[:20]}
        finally:
            store.close()

    def test_the_commands_work_when_pasted(self, tmp_path: Path) -> None:
        setup, propose = shell_blocks(README, "## Run it as a service")
        lines = setup.strip().splitlines()
        # The service needs the server extra (the test venv has it).
        assert lines[0] == (
            "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[server]'"
        )
        # Another free port than 8787 (other test runs may hold it); nothing else is changed.
        port = str(free_port())
        serve = lines[2].replace("effectgate.toml &", f"effectgate.toml --port {port} &")
        script = "\n".join(
            [
                # If a step fails, the background service is stopped all the same.
                "set -e",
                "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
                lines[1],
                # As the README says for serve --port N: EFFECTGATE_URL follows the port.
                f"export EFFECTGATE_URL=http://127.0.0.1:{port}",
                serve,
                f"for _ in $(seq 100); do curl -sf http://127.0.0.1:{port}/healthz >/dev/null "
                "&& break; sleep 0.1; done",
                propose,
                "kill %1",
            ]
        )
        out = bash(script, tmp_path)
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        assert (reply["operation_id"], reply["state"]) == ("op-0001", "acknowledged"), reply


DOCS = Path(__file__).parent.parent / "docs"


class TestPaperVenueProtocolDocument:
    """docs/paper-venue.openapi.json is the protocol the paper venue actually speaks."""

    def test_the_committed_document_is_the_generated_one(self) -> None:
        from effectgate.adapters._paper_openapi import openapi_json

        committed = (DOCS / "paper-venue.openapi.json").read_text()
        assert committed == openapi_json(), (
            'regenerate: python -c "from effectgate.adapters._paper_openapi import '
            "openapi_json; print(openapi_json(), end='')\" > docs/paper-venue.openapi.json"
        )

    def test_the_server_answers_as_documented(self) -> None:
        """Generated requests to every operation: status codes, content types and bodies
        conform to the document, and nothing is a server error."""
        import schemathesis
        from hypothesis import HealthCheck, given, settings
        from schemathesis.checks import (
            content_type_conformance,
            not_a_server_error,
            response_schema_conformance,
            status_code_conformance,
        )

        venue = PaperVenue()
        with serve_paper_venue(venue, api_key="k", sandbox=PaperSandbox(venue)) as server:
            schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
            operations = [result.ok() for result in schema.get_all_operations()]
            # (schemathesis leaves out the document's own path, /openapi.json)
            assert {(op.method.upper(), op.path) for op in operations} == {
                ("POST", "/v1/dry-runs"),
                ("POST", "/v1/orders"),
                ("GET", "/v1/orders"),
                ("GET", "/v1/records"),
                ("GET", "/v1/health"),
            }
            for operation in operations:

                @settings(
                    max_examples=25,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=operation.as_strategy())
                def check(case: schemathesis.Case) -> None:
                    case.call_and_validate(
                        base_url=server.url,
                        headers={"Authorization": "Bearer k"},
                        checks=[
                            not_a_server_error,
                            status_code_conformance,
                            content_type_conformance,
                            response_schema_conformance,
                        ],
                    )

                check()


class TestQuickstart:
    def test_five_commands_reach_a_reconciled_divergence(self, tmp_path: Path) -> None:
        """docs/quickstart.md as pasted: an effect made behind the gate's back is an orphan
        alarm (exit 3) on the first reconcile."""
        block = re.findall(r"```sh\n(.*?)```", (DOCS / "quickstart.md").read_text(), flags=re.S)[0]
        install, rest = block.split("\n", 1)
        assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."
        # A command's continuation lines are indented.
        commands = [c for c in re.split(r"\n(?=\S)", rest) if c.strip()]
        assert len(commands) == 4, commands  # five with the install
        port = str(free_port())  # not 8700: other test runs may hold it
        script = "\n".join(
            [
                "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
                commands[0].replace("8700", port),
                f"for _ in $(seq 100); do curl -sf http://127.0.0.1:{port}/v1/health >/dev/null "
                "&& break; sleep 0.1; done",
                *(c.replace("8700", port) for c in commands[1:]),
            ]
        )
        out = bash(script, tmp_path)
        assert out.returncode == 3, out.stdout + out.stderr
        assert "ALARM orphan key=default:op-outside venue_ids=['V-000001']" in out.stderr
        assert "ledger_rows=0, venue_records=1" in out.stdout, out.stdout
        # Item 5: what the page says it printed is what these commands print today.
        recorded = (DOCS / "quickstart.md").read_text()
        summary = next(x for x in out.stdout.splitlines() if "swept=" in x)
        summary = summary[summary.index("swept=") :]
        assert summary in recorded
        assert "ALARM orphan key=default:op-outside venue_ids=['V-000001'] ledger=None" in recorded

    def test_the_recorded_outputs_are_current(self, tmp_path: Path) -> None:
        """Item 5: the page's recorded pip line installs no server extra, and its recorded
        reply to the first action has the fields, in the order, the HTTP door gives today."""
        from fastapi.testclient import TestClient

        from effectgate._doors.http.app import create_app
        from effectgate.adapters.paper import PaperAdapter

        recorded = (DOCS / "quickstart.md").read_text()
        pip = next(x for x in recorded.splitlines() if x.startswith("Successfully installed"))
        installed = {p.rsplit("-", 1)[0].lower() for p in pip.split()[2:]}
        assert "effectgate" in installed
        assert not installed & {"fastapi", "uvicorn", "mcp", "starlette"}, installed
        doc_reply = json.loads(
            next(x for x in recorded.splitlines() if x.startswith('{"operation_id"'))
        )
        cfg = parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db"), "t.toml")
        svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                reply = client.post(
                    "/v1/actions/submit_order",
                    content=json.dumps(ORDER).encode(),
                    headers=bearer(
                        AGENT_A,
                        **{"Idempotency-Key": "op-0001", "Content-Type": "application/json"},
                    ),
                ).json()
        finally:
            svc.close()
        assert list(doc_reply) == list(reply)
        for field in ("outcome", "state", "cause", "detail", "replayed"):
            assert doc_reply[field] == reply[field], field
        assert list(doc_reply["decision"]) == list(reply["decision"])


def test_the_licence_file_is_the_one_pyproject_declares() -> None:
    """pyproject says Apache-2.0; LICENSE is that licence's full, unmodified text."""
    import tomllib

    root = Path(__file__).parent.parent
    assert (
        tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
    )
    text = (root / "LICENSE").read_bytes()
    # sha256 of apache.org's LICENSE-2.0.txt
    assert (
        hashlib.sha256(text).hexdigest()
        == "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
    )
