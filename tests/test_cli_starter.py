"""``effectgate init`` and the CLI's help (issue 39 items 2, 5 and 6).

The starter's ledger is SQLite by construction (init writes ``sqlite:///effectgate.db``);
PostgreSQL plays no part here.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import effectgate
from effectgate._doors.cli.main import app
from effectgate.store import open_store

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_init_creates_a_missing_folder(tmp_path: Path) -> None:
    """Item 2: --dir NEWDIR/deeper is created, like mkdir -p, and the starter works there."""
    target = tmp_path / "new" / "deeper"
    done = runner.invoke(app, ["init", "--dir", str(target)])
    assert done.exit_code == 0, done.output
    assert (target / "effectgate.toml").is_file() and (target / "effectgate.db").is_file()
    listed = runner.invoke(app, ["ops", "list", "--config", str(target / "effectgate.toml")])
    assert listed.exit_code == 0, listed.output


def test_init_refuses_a_folder_it_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("", encoding="utf-8")
    done = runner.invoke(app, ["init", "--dir", str(tmp_path / "file" / "sub")])
    assert done.exit_code == 1
    assert "cannot create" in done.output and "unable to open database" not in done.output


def test_init_shell_exports_where_serve_listens(tmp_path: Path) -> None:
    """Item 5: the quickstart's curl reads $EFFECTGATE_URL instead of a hard-coded port."""
    done = runner.invoke(app, ["init", "--shell", "--dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert "export EFFECTGATE_URL=http://127.0.0.1:8787\n" in done.stdout


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("checkout", [True, False], ids=["this-checkout", "a-new-project"])
def test_init_and_serve_leave_no_ledger_file_untracked(tmp_path: Path, checkout: bool) -> None:
    """Item 5: with the ledger open in WAL mode (as serve holds it), git sees no -wal, -shm
    or ledger. In this repository's checkout (its .gitignore) nothing at all is left
    untracked and .gitignore is not modified; in a new project init writes a .gitignore."""
    _git(tmp_path, "init", "-q")
    if checkout:
        shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
        _git(tmp_path, "add", ".gitignore")
        _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    assert runner.invoke(app, ["init", "--dir", str(tmp_path)]).exit_code == 0
    store = open_store(f"sqlite:///{tmp_path / 'effectgate.db'}")
    try:
        store.create_principal("x", "agent", "default", created_by="t", now=time.time())
        assert (tmp_path / "effectgate.db-wal").exists()  # the files serve leaves behind
        status = _git(tmp_path, "status", "--porcelain", "--untracked-files=all").split("\n")
    finally:
        store.close()
    untracked = sorted(line[3:] for line in status if line)
    if checkout:
        assert untracked == []
    else:
        assert untracked == [".gitignore", "effectgate.toml", "effectgate_classes.py"]


def test_serve_help_shows_the_section_names() -> None:
    """Item 5: "[service]" was read as Rich markup and vanished ("Override  host.")."""
    done = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert "Override [service] host." in done.output
    assert "Override  host" not in done.output


def test_every_command_is_in_a_help_panel() -> None:
    """Item 6: --help groups the commands in panels; none is left in a catch-all box."""
    import typer

    from effectgate._doors.cli.main import PANELS

    group = typer.main.get_group(app)
    named = [n for names in PANELS.values() for n in names]
    assert named == group.list_commands(None)  # each in exactly one panel, in panel order
    panels = {n: getattr(group.get_command(None, n), "rich_help_panel", None) for n in named}
    assert {p for p in panels.values()} == set(PANELS)
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "─ Commands ─" not in shown
    assert [p for p in PANELS if f"─ {p} ─" in shown] == list(PANELS)


def test_dash_capital_v_prints_the_version() -> None:
    from effectgate import __version__

    for flag in ("-V", "--version"):
        done = runner.invoke(app, [flag])
        assert (done.exit_code, done.output) == (0, f"effectgate {__version__}\n")


_HELP_IMPORTS = """
import sys
from typer.testing import CliRunner
from effectgate._doors.cli._lazy import LAZY
from effectgate._doors.cli.main import app
CliRunner().invoke(app, ["--help"])
print(sorted({m for m, _ in LAZY.values()} & set(sys.modules)))
"""


def test_help_imports_no_lazy_command_module() -> None:
    """Item 6: --help (and a Tab, which lists the same way) imports no command's module."""
    done = subprocess.run(
        [sys.executable, "-c", _HELP_IMPORTS],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(effectgate.__file__).parents[1])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


_TAB_IMPORTS = """
import sys
from effectgate._doors.cli._lazy import LAZY
from effectgate._doors.cli.main import app
try:
    app(prog_name="effectgate")
except SystemExit:
    pass
print("LOADED", sorted({m for m, _ in LAZY.values()} & set(sys.modules)))
"""


def test_a_tab_lists_commands_without_importing_them() -> None:
    """Item 6: a Tab runs the completion path, which must list every command and import no
    command's module (that import was what cost about 2 s a Tab)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(effectgate.__file__).parents[1]),
        "_EFFECTGATE_COMPLETE": "complete_bash",
        "COMP_WORDS": "effectgate ",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _TAB_IMPORTS], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    offered, _, loaded = done.stdout.rpartition("LOADED ")
    assert loaded.strip() == "[]"
    names = set(offered.split())
    assert {"init", "serve", "simulate", "reconcile", "receipt"} <= names, offered


def test_the_lazy_list_is_the_loaded_list(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-ins --help shows (name, help, panel) are what the loaded commands say."""
    import typer
    from typer.core import TyperGroup

    from effectgate._doors.cli._lazy import LAZY, LazyGroup

    monkeypatch.setenv("COLUMNS", "120")
    group = typer.main.get_group(app)
    assert isinstance(group, LazyGroup)

    def shown() -> str:
        with group.make_context("effectgate", [], resilient_parsing=True) as ctx:
            group.format_help(ctx, None)
        return capsys.readouterr().out

    listed = shown()
    for name, (module, help_text) in LAZY.items():
        command = group.get_command(None, name)
        assert command.callback is not None or isinstance(command, TyperGroup), name
        assert module in sys.modules
        first = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
        assert first == help_text, name
    assert set(LAZY) <= set(group.commands)  # now loaded: the list is drawn from them
    assert shown() == listed and "Getting started" in listed
