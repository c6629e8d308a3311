"""Opening a ledger never creates one by accident (issue: a mistyped path made a duplicate).

Invariant 1 depends on it: a retry answered from a new, empty ledger is dispatched again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import require_pg
from effectgate import LedgerNotFound, open_store


class TestSQLite:
    def test_a_missing_file_is_refused_with_its_absolute_path(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        with pytest.raises(LedgerNotFound) as info:
            open_store("sqlite:///data/ledger.db")
        message = str(info.value)
        assert str(tmp_path / "data" / "ledger.db") in message
        # The relative/absolute spelling is the usual mistake: the error says which was meant.
        assert "sqlite:////data/ledger.db" in message and "relative" in message
        assert not (tmp_path / "data").exists() and list(tmp_path.iterdir()) == []

    def test_an_absolute_missing_path_is_refused_without_the_hint(self, tmp_path: Path) -> None:
        with pytest.raises(LedgerNotFound) as info:
            open_store(f"sqlite:///{tmp_path}/nope.db")
        assert str(tmp_path / "nope.db") in str(info.value)
        assert "relative" not in str(info.value)
        assert not (tmp_path / "nope.db").exists()

    def test_create_makes_it_and_then_it_opens(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path}/ledger.db"
        open_store(url, create=True).close()
        store = open_store(url)
        assert store.schema_version() > 0
        store.close()

    def test_a_file_that_is_not_a_ledger_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "other.db").write_bytes(b"")
        with pytest.raises(LedgerNotFound, match="not an effectgate ledger"):
            open_store(f"sqlite:///{tmp_path}/other.db")


@pytest.mark.postgres
class TestPostgres:
    def test_an_unmigrated_schema_is_refused_and_left_absent(self) -> None:
        import psycopg

        url = require_pg()
        schema = f"t_open_{uuid.uuid4().hex[:10]}"
        with pytest.raises(LedgerNotFound, match=schema):
            open_store(f"{url}?schema={schema}")
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
            ).fetchone()
        assert row is None
        from effectgate.store.postgres import drop_schema

        try:
            open_store(f"{url}?schema={schema}", create=True).close()
            open_store(f"{url}?schema={schema}").close()
        finally:
            drop_schema(url, schema)


def test_the_working_directory_does_not_matter_once_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    open_store(url, create=True).close()
    monkeypatch.chdir(os.path.dirname(tmp_path))
    open_store(url).close()


class TestCommandsNeverCreate:
    """Invariant 1 from the command line: a command run from another folder reads the
    config's own ledger, and a command given a ledger that is not there creates none."""

    def _run(self, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "effectgate", *args],
            cwd=str(cwd),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "COLUMNS": "200"},
        )

    def test_a_relative_ledger_path_is_the_config_folders(self, tmp_path: Path) -> None:
        from effectgate._service import Service, load_config, write_starter

        run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
        run.mkdir()
        elsewhere.mkdir()
        starter = write_starter(run)
        assert (run / "effectgate.db").exists()  # init creates the configured ledger
        svc = Service(load_config(starter.config), create=False)
        svc.propose(
            svc.tokens.from_token(starter.agent_token),
            "submit_order",
            "op-1",
            b'{"intent_version": "1", "action": "submit_order", "instrument": '
            b'"XYZ-PERP", "side": "buy", "quantity": "4", "limit_price": "100.00"}',
        )
        svc.close()
        out = self._run(elsewhere, "ops", "list", "--config", "../run/effectgate.toml", "--json")
        assert out.returncode == 0, out.stderr
        assert [r["operation_id"] for r in json.loads(out.stdout)] == ["op-1"]
        assert list(elsewhere.iterdir()) == []

    def test_a_missing_ledger_is_exit_2_and_nothing_is_created(self, tmp_path: Path) -> None:
        out = self._run(tmp_path, "ops", "list", "--store", "sqlite:///data/ledger.db")
        assert out.returncode == 2
        assert "ledger_not_found" in out.stderr and "sqlite:////data/ledger.db" in out.stderr
        assert list(tmp_path.iterdir()) == []
