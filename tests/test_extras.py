"""`pip install effectgate` is the library, the CLI and the demo on SQLite; the HTTP/MCP doors
and PostgreSQL are extras, and a missing one is a clear error naming it.

Each test runs a child Python in which the extras' libraries cannot be imported (their
``sys.modules`` entries are None), as on a machine that installed no extra. SQLite only: the
PostgreSQL store is itself an extra, absent from the bare install by definition.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

import effectgate

#: The child runs this checkout's effectgate, whatever its working directory.
ENV = {**os.environ, "PYTHONPATH": str(Path(effectgate.__file__).parents[1])}

BLOCK = (
    "import sys\n"
    "for name in ('fastapi', 'uvicorn', 'mcp', 'psycopg', 'psycopg_pool', 'starlette'):\n"
    "    sys.modules[name] = None\n"
)


def child(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=str(cwd),
        env=ENV,
    )


def test_embedding_the_gate_needs_no_extra(tmp_path: Path) -> None:
    out = child(
        "from decimal import Decimal\n"
        "from effectgate import Gate, LimitPolicy, PolicySet, State, open_store\n"
        "from effectgate.examples import EXAMPLE_ORDER, default_registry\n"
        "from effectgate.testing import PaperAdapter, PaperVenue\n"
        "store = open_store('sqlite:///l.db', create=True)\n"
        "gate = Gate(store=store, registry=default_registry(),\n"
        "            adapters={'paper': PaperAdapter(PaperVenue())},\n"
        "            policy=PolicySet({'submit_order': LimitPolicy(Decimal('1000'))}))\n"
        "row = gate.submit('submit_order', 'op-1', EXAMPLE_ORDER)\n"
        "assert row.state is State.ACKNOWLEDGED, row\n"
        "print('ok')\n",
        tmp_path,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_serve_without_the_server_extra_names_it(tmp_path: Path) -> None:
    out = child(
        "from effectgate._service import write_starter\n"
        "from pathlib import Path\n"
        "write_starter(Path('.'))\n"
        "sys.argv = ['effectgate', 'serve', '--config', 'effectgate.toml']\n"
        "from effectgate._doors.cli.main import main\n"
        "main()\n",
        tmp_path,
    )
    assert out.returncode == 2, out.stderr
    assert "pip install 'effectgate[server]'" in out.stderr


def test_postgres_without_the_postgres_extra_names_it(tmp_path: Path) -> None:
    out = child(
        "from effectgate import open_store\nopen_store('postgresql://127.0.0.1/none')\n", tmp_path
    )
    assert out.returncode != 0
    assert "pip install 'effectgate[postgres]'" in out.stderr


#: What the bare install runs without a door (docs/quickstart.md's commands and their kin).
COMMANDS = [
    ["init"],
    ["reconcile", "--config", "effectgate.toml"],
    ["divergences", "--config", "effectgate.toml"],
    ["ops", "list", "--config", "effectgate.toml"],
    ["check", "--config", "effectgate.toml"],
    ["alerts", "list", "--config", "effectgate.toml"],
    ["dispatch", "--config", "effectgate.toml"],
    ["audit", "verify", "--config", "effectgate.toml"],
    ["token", "list", "--config", "effectgate.toml"],
]

_CHILD = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None  # what the bare install lacks: importing it raises
from typer.testing import CliRunner
from effectgate._doors.cli.main import app
runner, out = CliRunner(), []
for argv in json.loads(sys.argv[2]):
    r = runner.invoke(app, argv)
    out.append({"argv": argv, "rc": r.exit_code, "output": r.output, "exc": repr(r.exception)})
print(json.dumps(out))
"""


def _base_closure() -> set[str]:
    """Distribution names the bare install has: effectgate's base requirements, transitively
    (a requirement only under an extra is left out)."""
    seen: set[str] = set()
    todo = ["effectgate"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _hidden() -> list[str]:
    """Top-level modules that only distributions outside the bare install provide."""
    base = _base_closure()
    hidden = []
    for module, dists in md.packages_distributions().items():
        if all(re.sub(r"[-_.]+", "-", d).lower() not in base for d in dists):
            hidden.append(module)
    return sorted(hidden)


def test_operator_commands_run_without_the_extras(tmp_path: Path) -> None:
    """Issue 39 item 1: reconcile, divergences, ops list, check, alerts list... with --config
    on the bare install (they imported the MCP SDK through the gateway's config)."""
    hidden = _hidden()
    # The test can fail: the doors' libraries are installed here and hidden from the child.
    assert {"mcp", "mcp_types", "fastapi", "uvicorn", "psycopg", "jinja2"} <= set(hidden)
    assert not {"typer", "rich", "pydantic", "httpx"} & set(hidden)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(hidden), json.dumps(COMMANDS)],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ran = {" ".join(r["argv"][:2]): r for r in json.loads(done.stdout)}
    for r in ran.values():
        assert (r["rc"], r["exc"]) == (0, "None"), r
    checked = ran["check --config"]["output"]
    # check says which commands the missing extra stops, and stays valid.
    assert "serve and mcp need the server extra" in checked
    assert "pip install 'effectgate[server]'" in checked
