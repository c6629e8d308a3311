"""`pip install effectgate` is the library, the CLI and the demo on SQLite; the HTTP/MCP doors
and PostgreSQL are extras, and a missing one is a clear error naming it.

Each test runs a child Python in which the extras' libraries cannot be imported (their
``sys.modules`` entries are None), as on a machine that installed no extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
