"""``effectgate serve --workers N``: several server processes on one port and one ledger.

Invariant 2 (one operation per key) must hold across processes as it does across threads: the
ledger, not the process, decides. Worker 0 alone runs the standing reconciler.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from effectgate._doors.cli.main import app
from effectgate._doors.cli.workers import supervise
from effectgate.adapters._paper_server import serve_paper_venue
from effectgate.adapters.paper import PaperVenue
from servicekit import AGENT_A, CANARY, ORDER, VENUE_KEY_ENV, bearer, config_text, live_service

ENV = {VENUE_KEY_ENV: CANARY}


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _propose(url: str, key: str) -> httpx.Response:
    headers = bearer(AGENT_A, **{"Content-Type": "application/json", "Idempotency-Key": key})
    return httpx.post(
        f"{url}/v1/actions/submit_order", content=json.dumps(ORDER), headers=headers, timeout=20
    )


@pytest.fixture
def venue() -> Iterator[tuple[PaperVenue, str]]:
    """One venue for every worker: a real HTTP server, as a real venue would be."""
    v = PaperVenue()
    server = serve_paper_venue(v, api_key=CANARY).start()
    yield v, server.url
    server.stop()


@pytest.fixture
def config(tmp_path: Path, store_factory, venue) -> Path:
    path = tmp_path / "effectgate.toml"
    path.write_text(config_text(store_url=store_factory.url, venue_url=venue[1]))
    return path


class TestAFleetOfWorkers:
    def test_two_workers_serve_one_ledger_and_stop_together(self, config: Path, venue) -> None:
        """Invariant 2 across processes: concurrent repeats of a key give one operation."""
        with live_service(config, env=ENV, args=("--workers", "2")) as live:
            workers = _children(live.proc.pid)
            assert len(workers) == 2
            keys = [f"w-{i % 10}" for i in range(40)]  # each key sent 4 times, concurrently
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda k: _propose(live.url, k), keys))
            assert {a.status_code for a in answers} <= {200, 201, 409}
            firsts = [a for a in answers if a.status_code == 201]
            assert sorted(a.json()["operation_id"] for a in firsts) == sorted(set(keys))
            venue_ids = {}
            for key in sorted(set(keys)):
                op = httpx.get(f"{live.url}/v1/operations/{key}", headers=bearer(AGENT_A)).json()
                assert op["state"] == "acknowledged"
                venue_ids[key] = op["venue_id"]
            assert len(set(venue_ids.values())) == 10 and venue[0].effect_count == 10
            live.proc.send_signal(signal.SIGTERM)
            assert live.proc.wait(timeout=20) == 0
        for pid in workers:
            assert not Path(f"/proc/{pid}").exists() or _zombie(pid)

    def test_a_worker_that_dies_stops_the_fleet(self, config: Path) -> None:
        with live_service(config, env=ENV, args=("--workers", "2")) as live:
            first, second = _children(live.proc.pid)
            os.kill(second, signal.SIGKILL)
            assert live.proc.wait(timeout=20) == 1  # fails loudly, for the process manager
            assert not Path(f"/proc/{first}").exists() or _zombie(first)
            assert "a serve worker stopped on its own" in live.output()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class TestSupervise:
    def test_exit_codes(self, tmp_path: Path) -> None:
        import socket

        def clean(_: int) -> None:
            return None

        def broken(index: int) -> None:
            if index == 1:
                raise SystemExit(3)
            time.sleep(30)  # stopped by the supervisor once its sibling fails

        for fn, want in ((clean, 1), (broken, 1)):
            sock = socket.socket()
            t0 = time.monotonic()
            # a worker that returns without being asked to stop has left the fleet short
            assert supervise(2, sock, fn) == want
            assert time.monotonic() - t0 < 20

    def test_the_worker_count_is_bounded(self, config: Path) -> None:
        result = CliRunner().invoke(app, ["serve", "--config", str(config), "--workers", "0"])
        assert result.exit_code == 2 and "--workers" in result.output

    def test_the_in_process_paper_venue_is_refused(self, tmp_path: Path) -> None:
        """Each worker would hold its own venue, and reconcile against the wrong one."""
        path = tmp_path / "effectgate.toml"
        path.write_text(config_text(store_url=f"sqlite:///{tmp_path}/l.db"))
        result = CliRunner().invoke(app, ["serve", "--config", str(path), "--workers", "2"])
        assert result.exit_code == 2
        assert "in-process paper venue" in " ".join(result.output.split())
