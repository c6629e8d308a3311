"""``effectgate grants`` and ``/v1/admin/grants`` (issue 18): the same store role through the
CLI (a subprocess over a real ledger file) and the operator HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.store import SQLiteStore
from effectgate.store.roles import Store
from servicekit import AGENT_A, OPERATOR, SCOPED_OPERATOR, bearer, config_text


def cli(url: str, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EFFECTGATE_STORE": url, "COLUMNS": "200",
             "EFFECTGATE_OPERATOR_TOKEN": token},
    )  # fmt: skip


class TestGrantsCli:
    def test_create_delegate_list_show_revoke(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path}/ledger.db"
        store = SQLiteStore(str(tmp_path / "ledger.db"))
        store.migrate()
        alice = store.create_principal("alice", "agent", "alpha", created_by="ops", now=1.0)
        store.close()
        out = cli(url, "grants", "create", "alice", "--action", "submit_order", "--scope",
                  "alpha", "--expires-in", "600", "--max-value", "500", "--hops", "1",
                  "--json")  # fmt: skip
        assert out.returncode == 0, out.stderr
        [root] = json.loads(out.stdout)
        assert root["holder"] == "alice" and root["created_by"].startswith("os:")
        # Wider than the parent: refused, naming the axis; nothing written.
        out = cli(url, "grants", "delegate", root["grant_id"], "bob", "--action", "submit_order",
                  "--scope", "alpha", "--expires-in", "60", "--max-value", "501",
                  token=alice.token)  # fmt: skip
        assert out.returncode != 0 and "grant_wider" in out.stderr and "max_value" in out.stderr
        out = cli(url, "grants", "delegate", root["grant_id"], "bob", "--action", "submit_order",
                  "--scope", "alpha", "--expires-in", "60", "--max-value", "100", "--json",
                  token=alice.token)  # fmt: skip
        assert out.returncode == 0, out.stderr
        [child] = json.loads(out.stdout)
        assert child["parent_id"] == root["grant_id"] and child["created_by"] == "alice"
        out = cli(url, "grants", "show", child["grant_id"], "--json")
        assert json.loads(out.stdout)[0]["max_value"] == "100"
        out = cli(url, "grants", "revoke", "--grant", root["grant_id"], "--json")
        assert out.returncode == 0, out.stderr
        assert {g["grant_id"] for g in json.loads(out.stdout)} == {
            root["grant_id"],
            child["grant_id"],
        }
        assert json.loads(cli(url, "grants", "list", "--json").stdout) == []
        listed = cli(url, "grants", "list", "--all")
        assert root["grant_id"] in listed.stdout and "revoked" in listed.stdout


@pytest.fixture
def service(tmp_path: Path, store: Store) -> Iterator[Service]:
    svc = Service(
        parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db"), "t.toml"), store=store
    )
    yield svc
    svc.close()


class TestGrantsHttp:
    def test_operator_creates_holder_delegates_operator_revokes(self, service: Service) -> None:
        with TestClient(create_app(service, mcp_http=False)) as client:
            body = {"holder": "alpha", "actions": ["submit_order"], "scope": "alpha",
                    "expires_in": 600, "hops": 1, "budget": "1000"}  # fmt: skip
            r = client.post("/v1/admin/grants", json=body, headers=bearer(OPERATOR))
            assert r.status_code == 201, r.text
            root = r.json()
            # An agent may not create a grant; a scoped operator may not either.
            assert (
                client.post("/v1/admin/grants", json=body, headers=bearer(AGENT_A)).status_code
                == 403
            )
            assert (
                client.post(
                    "/v1/admin/grants", json=body, headers=bearer(SCOPED_OPERATOR)
                ).status_code
                == 403
            )
            # The holder (the agent "alpha") delegates beneath it; wider is refused by axis.
            wide = {**body, "holder": "helper", "hops": 0, "budget": "2000"}
            r = client.post(f"/v1/admin/grants/{root['grant_id']}/delegate", json=wide,
                            headers=bearer(AGENT_A))  # fmt: skip
            assert r.status_code == 403 and r.json()["code"] == "grant_wider"
            assert r.json()["field"] == "budget"
            narrow = {**wide, "budget": "10", "expires_in": 300}
            r = client.post(f"/v1/admin/grants/{root['grant_id']}/delegate", json=narrow,
                            headers=bearer(AGENT_A))  # fmt: skip
            assert r.status_code == 201, r.text
            child = r.json()
            r = client.get(f"/v1/admin/grants/{child['grant_id']}", headers=bearer(OPERATOR))
            assert r.json()["parent_id"] == root["grant_id"]
            r = client.post("/v1/admin/grants/revoke", json={"holder": "alpha"},
                            headers=bearer(OPERATOR))  # fmt: skip
            assert sorted(g["grant_id"] for g in r.json()) == sorted(
                [root["grant_id"], child["grant_id"]]
            )
            r = client.get("/v1/admin/grants/nope", headers=bearer(OPERATOR))
            assert r.status_code == 404 and r.json()["code"] == "grant_not_found"
            bad = {**body, "max_value": "-5"}
            r = client.post("/v1/admin/grants", json=bad, headers=bearer(OPERATOR))
            assert r.status_code == 400 and r.json()["field"] == "max_value"
