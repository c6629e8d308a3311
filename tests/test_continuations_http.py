"""Continuations over the operator HTTP API, under a real server, on both stores; and the agent
door refusing the reserved namespace (docs/continuations.md). Invariant 9."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from effectgate import Gate
from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.store.roles import Store
from servicekit import (
    AGENT_A,
    OPERATOR,
    ORDER,
    SCOPED_OPERATOR,
    bearer,
    config_text,
    uvicorn_thread,
)


@pytest.fixture
def served(tmp_path: Path, store: Store) -> Iterator[tuple[str, PaperVenue, Gate]]:
    text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db").replace(
        'effect_class = "non_idempotent_mutation"\n',
        'effect_class = "non_idempotent_mutation"\ncompensation = "cancel_order"\n',
    )
    venue = PaperVenue(strict_orders=True)
    svc = Service(
        parse_config(text, "test.toml"), adapters={"venue": PaperAdapter(venue)}, store=store
    )
    try:
        other = Gate(
            store=store,
            registry=svc.config.registry,
            adapters=svc.adapters,
            policy=svc.config.policy,
            process_id="replica-2",
        )
        with uvicorn_thread(create_app(svc, mcp_http=False)) as url:
            yield url, venue, other
    finally:
        svc.close()


def _submit(client: httpx.Client, key: str) -> httpx.Response:
    return client.post(
        "/v1/actions/submit_order",
        content=json.dumps(ORDER).encode(),
        headers=bearer(AGENT_A, **{"Idempotency-Key": key, "Content-Type": "application/json"}),
    )


class TestContinuationsOverHTTP:
    def test_agents_cannot_submit_in_the_reserved_namespace(
        self, served: tuple[str, PaperVenue, Gate]
    ) -> None:
        url, venue, _ = served
        with httpx.Client(base_url=url, timeout=30) as client:
            r = _submit(client, "cont:op-1:1")
            assert r.status_code == 400, r.text
            assert r.json()["reason"] == "reserved_operation_id"
        assert venue.effect_count == 0

    def test_operator_compensates_an_order_over_http(
        self, served: tuple[str, PaperVenue, Gate]
    ) -> None:
        """The chain is read, the compensation admitted with the fence it names, the venue's
        order cancelled; a scoped operator of another tenant is refused."""
        url, venue, other_process = served
        with httpx.Client(base_url=url, timeout=30) as client:
            r = _submit(client, "op-1")
            assert r.status_code == 201, r.text
            venue_id = r.json()["venue_id"]
            chain = client.get("/v1/admin/continuations/alpha/op-1", headers=bearer(OPERATOR))
            assert chain.status_code == 200, chain.text
            fence = chain.json()
            body = {
                "proof": {
                    "ground": "applied_effect",
                    "kind": "venue_record",
                    "reference": venue_id,
                },
                "seq": fence["next_seq"],
                "predecessor": fence["predecessor_digest"],
                "intent": {
                    "intent_version": "1",
                    "action": "cancel_order",
                    "instrument": ORDER["instrument"],
                    "order_ref": venue_id,
                },
            }
            stale = client.post(
                "/v1/admin/continuations/alpha/op-1/compensate",
                headers=bearer(OPERATOR),
                json={**body, "predecessor": "f" * 64},
            )
            assert stale.status_code == 409 and stale.json()["reason"] == "stale_predecessor"
            ok = client.post(
                "/v1/admin/continuations/alpha/op-1/compensate", headers=bearer(OPERATOR), json=body
            )
            assert ok.status_code == 200, ok.text
            # This service process dispatched the original: it admits, another dispatches.
            assert ok.json()["continuation"]["state"] == "validated"
            assert venue.order_state(venue_id) == "open"
            other_process.dispatch("cont:op-1:1", scope="alpha")
            assert venue.order_state(venue_id) == "cancelled"
            other = client.get("/v1/admin/continuations/beta/op-1", headers=bearer(SCOPED_OPERATOR))
            assert other.status_code == 403
