"""A whole effectgate service on the paper venue, in this process: for examples and users' tests.

:func:`paper_service` serves the HTTP API (the same app ``effectgate serve`` runs) with uvicorn
on a free loopback port, over a fresh SQLite ledger, with the example action classes
(``submit_order`` above a notional of 900 waits for an approval; above 1000 it is refused) and
three principals: a harness (proposes), an approver (approves) and an operator.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from effectgate.adapters.paper import PaperAdapter, PaperVenue

__all__ = ["PaperService", "paper_service"]

_CONFIG = """
[service]
host = "127.0.0.1"

[store]
url = "sqlite:///{db}"

[adapters.venue]
kind = "paper"

[classes.submit_order]
schema = "effectgate.examples:SubmitOrder"
value = "effectgate.examples:notional"
adapter = "venue"
effect_class = "non_idempotent_mutation"
visibility_horizon = 60
key_retention = 86400
target_field = "instrument"
decimal_fields = ["quantity", "limit_price"]

[classes.cancel_order]
schema = "effectgate.examples:CancelOrder"
adapter = "venue"
effect_class = "idempotent_mutation"
visibility_horizon = 60
key_retention = 86400

[policies.submit_order]
max_value = "1000"
approve_above = "900"

[policies.cancel_order]
"""


@dataclass
class PaperService:
    """A running service: its URL, one token per role, the venue and the service object."""

    url: str
    harness_token: str
    approver_token: str
    operator_token: str
    venue: PaperVenue
    service: Any  # effectgate._service.Service

    def approve(self, operation_id: str, *, reason: str = "checked", scope: str = "default") -> Any:
        """Approve the pending operation as the approver principal, over HTTP: what a person
        does in the console. Returns the answer's JSON (the operation, dispatched)."""
        return self._decide(operation_id, "approve", reason, scope)

    def refuse(self, operation_id: str, *, reason: str = "no", scope: str = "default") -> Any:
        return self._decide(operation_id, "refuse", reason, scope)

    def _decide(self, operation_id: str, verb: str, reason: str, scope: str) -> Any:
        auth = {"Authorization": f"Bearer {self.approver_token}"}
        with httpx.Client(base_url=self.url, headers=auth, timeout=30) as http:
            pending = http.get("/v1/admin/approvals", params={"scope": scope})
            pending.raise_for_status()
            found = [p for p in pending.json() if p["operation_id"] == operation_id]
            if not found:
                raise LookupError(f"{operation_id!r} is not awaiting approval")
            got = http.post(
                f"/v1/admin/approvals/{scope}/{operation_id}/{verb}",
                json={"fingerprint": found[0]["fingerprint"], "reason": reason},
            )
            got.raise_for_status()
            return got.json()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def paper_service(venue: PaperVenue | None = None) -> Iterator[PaperService]:
    """Serve effectgate on the paper venue until the block ends (needs the ``server`` extra)."""
    import uvicorn

    from effectgate._doors.http.app import create_app
    from effectgate._service import Service, parse_config

    venue = venue or PaperVenue()
    tmp = Path(tempfile.mkdtemp(prefix="effectgate-paper-"))
    service = Service(
        parse_config(_CONFIG.format(db=tmp / "ledger.db"), "paper.toml"),
        adapters={"venue": PaperAdapter(venue)},
    )
    try:
        issued = {
            role: service.store.create_principal(
                f"paper-{role}",
                role,
                "*" if role == "operator" else "default",
                created_by="paper_service",
                now=time.time(),
            ).token
            for role in ("harness", "approver", "operator")
        }
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(service, mcp_http=False),
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="on",
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the paper service did not start")
            time.sleep(0.01)
        try:
            yield PaperService(
                url=f"http://127.0.0.1:{port}",
                harness_token=issued["harness"],
                approver_token=issued["approver"],
                operator_token=issued["operator"],
                venue=venue,
                service=service,
            )
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    finally:
        service.close()
        shutil.rmtree(tmp, ignore_errors=True)
