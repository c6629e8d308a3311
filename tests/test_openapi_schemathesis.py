"""Schemathesis stateless run against the live service (uvicorn on a loopback port).

Every generated case gets a fresh Idempotency-Key and the right token for its section; the
check is that nothing answers with a server error. Examples per operation stay small so the
suite stays fast.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from servicekit import AGENT_A, OPERATOR, config_text, uvicorn_thread

EXAMPLES = 25


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("st")
    cfg = parse_config(
        config_text(
            store_url=f"sqlite:///{tmp}/l.db",
            service="[service.rate_limit]\nper_second = 10000\nburst = 10000",
        ),
        "test.toml",
    )
    service = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
    with uvicorn_thread(create_app(service, mcp_http=False)) as url:
        yield url
    service.close()


def test_no_server_errors_on_any_operation(live: str) -> None:
    """OpenAPI published and honest enough that generated requests never produce a 5xx."""
    schema = schemathesis.openapi.from_url(f"{live}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30  # agent, health, metrics, admin ledger and controls
    for operation in operations:
        run_operation(live, operation, OPERATOR if "/admin/" in operation.path else AGENT_A)


def run_operation(live: str, operation: schemathesis.APIOperation, token: str) -> None:
    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=operation.as_strategy())
    def check(case: schemathesis.Case) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        if case.headers is not None and "Idempotency-Key" in case.headers:
            headers["Idempotency-Key"] = f"st-{uuid.uuid4().hex}"
        case.call_and_validate(base_url=live, headers=headers, checks=[not_a_server_error])

    check()
