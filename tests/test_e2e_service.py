"""End to end: `effectgate serve` as a real uvicorn process on a loopback port, the paper venue
as a real HTTP server, crashes as real SIGKILLs."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from effectgate.adapters._paper_server import PaperVenueServer, serve_paper_venue
from effectgate.adapters.paper import PaperVenue
from servicekit import (
    AGENT_A,
    AGENT_B,
    CANARY,
    OPERATOR,
    ORDER,
    VENUE_KEY_ENV,
    bearer,
    config_text,
    effectgate_cmd,
    live_service,
)

ENV = {VENUE_KEY_ENV: CANARY}
HORIZON = 0.5


class GatedVenue(PaperVenue):
    """Holds calls while ``hold`` is set, so a request stays in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def submit(
        self, operation_key: str, action: str, effect: Mapping[str, str | int | bool]
    ) -> tuple[str, bool]:
        if self.hold.is_set():
            self.entered.set()
            self.release.wait(10)
        return super().submit(operation_key, action, effect)


@pytest.fixture
def venue() -> Iterator[tuple[GatedVenue, PaperVenueServer]]:
    v = GatedVenue()
    server = serve_paper_venue(v, api_key=CANARY).start()
    yield v, server
    v.release.set()
    server.stop()


def write_config(tmp_path: Path, venue_url: str) -> Path:
    path = tmp_path / "effectgate.toml"
    path.write_text(
        config_text(
            store_url=f"sqlite:///{tmp_path}/ledger.db",
            venue_url=venue_url,
            horizon=HORIZON,
            service="dispatch_timeout = 1.0\nin_flight_grace = 0.5\nreconcile_interval = 0",
        )
    )
    return path


def propose(
    url: str, key: str | None, body: dict | None = None, token: str = AGENT_A, timeout: float = 10
) -> httpx.Response:
    headers = bearer(token, **{"Content-Type": "application/json"})
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(
        f"{url}/v1/actions/submit_order",
        content=json.dumps(body or ORDER),
        headers=headers,
        timeout=timeout,
    )


class TestIdempotencyKeyMatrix:
    def test_matrix_over_a_live_server(self, tmp_path: Path, venue) -> None:
        """Invariants 1 and 2 and the IETF draft, through uvicorn and a real HTTP venue."""
        gated, server = venue
        config = write_config(tmp_path, server.url)
        with live_service(config, env=ENV) as live:
            first = propose(live.url, "k-1")
            assert first.status_code == 201 and first.json()["state"] == "acknowledged"

            replay = propose(live.url, "k-1")
            assert replay.status_code == 200
            assert replay.headers["idempotent-replayed"] == "true"
            assert replay.json()["venue_id"] == first.json()["venue_id"]

            changed = propose(live.url, "k-1", {**ORDER, "quantity": "5"})
            assert changed.status_code == 422
            assert changed.headers["content-type"] == "application/problem+json"

            missing = propose(live.url, None)
            assert (
                missing.status_code == 400 and missing.json()["code"] == "idempotency_key_missing"
            )

            other = propose(live.url, "k-1", token=AGENT_B)
            assert other.status_code == 201
            assert other.json()["venue_id"] != first.json()["venue_id"]
            cross = httpx.get(f"{live.url}/v1/operations/k-1", headers=bearer(AGENT_B))
            assert cross.json()["venue_id"] == other.json()["venue_id"]

            gated.hold.set()
            results: list[httpx.Response] = []
            slow = threading.Thread(target=lambda: results.append(propose(live.url, "k-2")))
            slow.start()
            assert gated.entered.wait(5)
            during = propose(live.url, "k-2")
            assert during.status_code == 409 and "retry-after" in during.headers
            gated.hold.clear()
            gated.release.set()
            slow.join(10)
            assert results[0].status_code == 201
            assert propose(live.url, "k-2").status_code == 200

            metrics = httpx.get(f"{live.url}/metrics", headers=bearer(OPERATOR)).text
            assert (
                'effectgate_operations{action="submit_order",state="acknowledged"} 3.0' in metrics
            )
        assert gated.effect_count == 3
        assert CANARY not in live.output()


def reconcile(config: Path) -> dict:
    out = subprocess.run(
        [*effectgate_cmd(), "reconcile", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=60,
    )
    assert out.returncode in (0, 3), out.stderr
    assert CANARY not in out.stdout + out.stderr
    return json.loads(out.stdout)


class TestCrashBetweenJournalAndDispatch:
    @pytest.mark.parametrize("point,at_venue", [("after_journal", 0), ("after_venue_call", 1)])
    def test_kill9_restart_reconcile(
        self, tmp_path: Path, venue, point: str, at_venue: int
    ) -> None:
        """Invariant 3: SIGKILL after the journal leaves the row uncertain, never failed and
        never re-sent; after restart the reconciler settles it against the venue. The
        operation is never lost and the effect happens at most once."""
        gated, server = venue
        config = write_config(tmp_path, server.url)
        with live_service(
            config, env={**ENV, "EFFECTGATE_CRASH_AT": point}, log=tmp_path / "crash.log"
        ) as live:
            with pytest.raises(httpx.HTTPError):
                propose(live.url, "k-crash")
            live.proc.wait(timeout=10)
            assert live.proc.returncode == -9
        assert gated.effect_count == at_venue

        with live_service(config, env=ENV, log=tmp_path / "restart.log") as live:
            row = httpx.get(f"{live.url}/v1/operations/k-crash", headers=bearer(AGENT_A))
            assert row.json()["state"] == "submitted"  # uncertain, not failed
            early = propose(live.url, "k-crash")
            assert early.status_code in (200, 409)  # 409 inside the dispatch bound
            time.sleep(max(0.0, row.json()["submitted_at"] + 1.6 - time.time()))
            late = propose(live.url, "k-crash")
            assert late.status_code == 200 and late.json()["state"] == "submitted"
            assert gated.effect_count == at_venue  # a replay never re-sends

            time.sleep(HORIZON)
            report = reconcile(config)
            settled = httpx.get(f"{live.url}/v1/operations/k-crash", headers=bearer(AGENT_A)).json()
            if at_venue:
                assert report["confirmed"] == 1 and settled["state"] == "acknowledged"
                assert settled["venue_id"]
            else:
                # Absent past the visibility horizon: written off, with the reason journalled.
                assert report["written_off"] == 1 and settled["state"] == "failed"
                # The harness may now authorise the action again, as a NEW operation.
                again = propose(live.url, "k-crash-retry")
                assert again.status_code == 201 and again.json()["state"] == "acknowledged"
            assert propose(live.url, "k-crash").json()["state"] == settled["state"]
        assert gated.effect_count == 1
        assert reconcile(config)["new_divergences"] == []
        for log in ("crash.log", "restart.log"):
            assert CANARY not in (tmp_path / log).read_text(errors="replace")
