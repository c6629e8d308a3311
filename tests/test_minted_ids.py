"""Operation ids minted at the decision (issue 39 item 7), on every store.

A class with ``operation_ids = "minted"`` takes the caller's id as a request key: the boundary
mints the operation id when the policy lets the action run, binds the key to it, and returns it
(a proposal that needs an approval is minted at the approval: tests/test_minted_at_approval.py). The
guarantees checked: invariant 1 (one operation and one dispatch per deliberate action, however
often the proposal is repeated) and invariant 2 (a key reused with another payload is refused).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from effectgate import (
    Gate,
    IdempotencyConflict,
    IntentError,
    LimitPolicy,
    Operator,
    PolicySet,
    Registry,
    RegistryError,
    State,
)
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.server import OPERATION_ID_SCHEMA, REQUEST_KEY_SCHEMA, tool_definitions
from effectgate._service import Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, RequestKeyConflict
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock
from servicekit import AGENT_A, ORDER, bearer, config_text

INTENT = dict(EXAMPLE_ORDER)  # 4 x 100.00 = 400: allowed at tier validate
BIG = dict(EXAMPLE_ORDER, quantity="95")  # 9500 > 900: needs an approval
MINTED = re.compile(r"minted:[0-9a-f]{32}")


@dataclass
class World:
    store: Store
    venue: PaperVenue
    adapter: CountingAdapter
    gate: Gate
    operator: Operator

    def kinds(self, operation_id: str) -> list[str]:
        return [e.kind for e in self.store.iter_audit() if e.operation_id == operation_id]


def make_world(store: Store, mode: str) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    adapter = CountingAdapter(PaperAdapter(venue))
    registry = Registry([replace(submit_order_class(), operation_ids=mode), cancel_order_class()])
    policy = PolicySet(
        {
            "submit_order": LimitPolicy(Decimal("100000"), approve_above=Decimal("900")),
            "cancel_order": LimitPolicy(),
        }
    )
    gate = Gate(
        store=store, registry=registry, adapters={"paper": adapter}, policy=policy, clock=clock
    )
    return World(store, venue, adapter, gate, Operator(store=store, registry=registry, clock=clock))


@pytest.fixture
def minted(store: Store) -> World:
    return make_world(store, "minted")


@pytest.fixture
def caller(store: Store) -> World:
    return make_world(store, "caller")


class TestMinted:
    def test_the_boundary_mints_the_id_and_returns_it(self, minted: World) -> None:
        """Invariant 1: the row, the venue key and the audit trail all carry the minted id;
        the request key names none of them."""
        op = minted.gate.submit("submit_order", "req-1", INTENT)
        assert MINTED.fullmatch(op.operation_id), op.operation_id
        assert op.state is State.ACKNOWLEDGED and not op.replayed
        assert minted.store.get("default", "req-1") is None
        assert [r.operation_key for r in minted.adapter.requests] == [f"default:{op.operation_id}"]
        assert "operation_id_minted" in minted.kinds(op.operation_id)

    def test_a_reproposal_with_the_same_request_key_is_the_same_operation(
        self, minted: World
    ) -> None:
        """Invariant 1: a proposer that lost its id and proposes again with the same request
        key gets the same operation back, replayed: no second row, no second effect."""
        first = minted.gate.submit("submit_order", "req-1", INTENT)
        again = minted.gate.submit("submit_order", "req-1", dict(INTENT, rationale="again"))
        assert again.operation_id == first.operation_id and again.replayed
        assert minted.store.count_by_state() == {("submit_order", "acknowledged"): 1}
        assert minted.adapter.execute_calls == 1 and minted.venue.effect_count == 1

    def test_two_request_keys_are_two_actions(self, minted: World) -> None:
        """Identity is the minted id, never the payload: byte-identical proposals under two
        request keys are two operations with unrelated ids."""
        a = minted.gate.submit("submit_order", "req-a", INTENT)
        b = minted.gate.submit("submit_order", "req-b", INTENT)
        assert a.operation_id != b.operation_id and a.fingerprint == b.fingerprint
        assert minted.venue.effect_count == 2

    def test_the_same_key_with_another_payload_is_refused(self, minted: World) -> None:
        """Invariant 2: a request key reused with another effect payload is refused
        (RequestKeyConflict, 422), never deduplicated; only the audit log changes."""
        first = minted.gate.submit("submit_order", "req-1", INTENT)
        with pytest.raises(RequestKeyConflict) as info:
            minted.gate.submit("submit_order", "req-1", dict(INTENT, quantity="5"))
        exc = info.value
        assert isinstance(exc, IdempotencyConflict)
        assert (exc.code, exc.status) == ("request_key_conflict", 422)
        assert exc.request_key == "req-1" and exc.operation_id == first.operation_id
        assert minted.store.count_by_state() == {("submit_order", "acknowledged"): 1}
        assert minted.adapter.execute_calls == 1
        assert "request_key_conflict" in minted.kinds(first.operation_id)

    def test_a_retry_under_the_minted_id_replays_the_operation(self, minted: World) -> None:
        """The minted id, sent back in place of the request key, is the operation's retry;
        with another payload it is the ordinary IdempotencyConflict (invariant 2)."""
        first = minted.gate.submit("submit_order", "req-1", INTENT)
        again = minted.gate.submit("submit_order", first.operation_id, INTENT)
        assert again.operation_id == first.operation_id and again.replayed
        with pytest.raises(IdempotencyConflict) as info:
            minted.gate.submit("submit_order", first.operation_id, dict(INTENT, quantity="5"))
        assert not isinstance(info.value, RequestKeyConflict)
        assert minted.adapter.execute_calls == 1

    def test_a_minted_id_nobody_minted_is_refused(self, minted: World) -> None:
        """A caller cannot choose a minted id: one the boundary never returned is refused,
        and nothing but the audit line is written."""
        made_up = "minted:" + "0" * 32
        with pytest.raises(IntentError) as info:
            minted.gate.submit("submit_order", made_up, INTENT)
        assert (info.value.field, info.value.reason) == ("operation_id", "unknown_minted_operation")
        assert minted.store.count_by_state() == {} and minted.adapter.execute_calls == 0
        assert minted.kinds(made_up) == ["intent_refused"]


class TestDurability:
    def test_a_binding_left_without_its_row_is_journalled_by_the_next_proposal(
        self, minted: World
    ) -> None:
        """A process that bound the key and died before its journal: the next proposal under
        the key journals the bound id, not a second one (invariant 1)."""
        parsed = minted.gate.registry.parse("submit_order", INTENT)
        bound = minted.store.bind_request_key(
            "default",
            "submit_order",
            "req-1",
            fingerprint=parsed.fingerprint,
            operation_id="minted:" + "12" * 16,
            now=1.0,
        )
        assert bound == ("minted:" + "12" * 16, parsed.fingerprint)
        op = minted.gate.submit("submit_order", "req-1", INTENT)
        assert op.operation_id == bound[0] and not op.replayed
        assert op.state is State.ACKNOWLEDGED and minted.adapter.execute_calls == 1

    def test_concurrent_proposals_under_one_key_are_one_operation(self, minted: World) -> None:
        """Invariant 1 across threads: the binding's primary key picks one minted id, the
        operations row's unique key one journal; the venue is called once."""
        barrier = threading.Barrier(4)

        def propose() -> str:
            barrier.wait()
            return minted.gate.submit("submit_order", "req-race", INTENT).operation_id

        with ThreadPoolExecutor(4) as pool:
            ids = list(pool.map(lambda _: propose(), range(4)))
        assert len(set(ids)) == 1 and MINTED.fullmatch(ids[0])
        assert minted.store.count_by_state() == {("submit_order", "acknowledged"): 1}
        assert minted.adapter.execute_calls == 1 and minted.venue.effect_count == 1


class TestCaller:
    def test_caller_mode_is_unchanged(self, caller: World) -> None:
        """The default: the caller's id is the operation's; same id again is a retry."""
        first = caller.gate.submit("submit_order", "op-1", INTENT)
        again = caller.gate.submit("submit_order", "op-1", INTENT)
        assert first.operation_id == "op-1" and again.replayed
        assert [r.operation_key for r in caller.adapter.requests] == ["default:op-1"]
        assert "operation_id_minted" not in caller.kinds("op-1")

    def test_the_minted_namespace_is_refused_in_caller_mode(self, caller: World) -> None:
        """No caller may claim an id in the boundary's namespace: refused naming the field,
        nothing journalled, one audit line."""
        claimed = "minted:" + "ab" * 16
        with pytest.raises(IntentError) as info:
            caller.gate.submit("submit_order", claimed, INTENT)
        assert (info.value.field, info.value.reason) == ("operation_id", "reserved_operation_id")
        assert caller.store.count_by_state() == {} and caller.adapter.execute_calls == 0
        assert caller.kinds(claimed) == ["intent_refused"]


def test_an_unknown_mode_is_refused_at_registration() -> None:
    with pytest.raises(RegistryError, match="operation_ids must be one of caller, minted"):
        replace(submit_order_class(), operation_ids="payload")


# --- the doors: the TOML key, HTTP's Idempotency-Key, MCP's operation_id ---------------------

MINTED_TOML = 'key_retention = 86400\noperation_ids = "minted"\ntarget_field = "instrument"'


def minted_config(tmp_path: Path) -> str:
    text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db")
    assert 'key_retention = 86400\ntarget_field = "instrument"' in text
    return text.replace('key_retention = 86400\ntarget_field = "instrument"', MINTED_TOML, 1)


def test_the_config_key_is_read_per_class_and_defaults_to_caller(tmp_path: Path) -> None:
    cfg = parse_config(minted_config(tmp_path), "test.toml")
    assert cfg.registry.get("submit_order").operation_ids == "minted"
    assert cfg.registry.get("cancel_order").operation_ids == "caller"
    bad = minted_config(tmp_path).replace('operation_ids = "minted"', 'operation_ids = "mint"')
    with pytest.raises(ConfigError, match="operation_ids"):
        parse_config(bad, "test.toml")


@pytest.fixture
def http(tmp_path: Path, store: Store) -> Iterator[tuple[TestClient, PaperVenue]]:
    venue = PaperVenue()
    cfg = parse_config(minted_config(tmp_path), "test.toml")
    svc = Service(cfg, adapters={"venue": PaperAdapter(venue)}, store=store)
    with TestClient(create_app(svc, mcp_http=False)) as c:
        yield c, venue
    svc.close()


def post(client: TestClient, key: str, order: dict[str, object], action: str = "submit_order"):
    headers = {"Content-Type": "application/json", "Idempotency-Key": key, **bearer(AGENT_A)}
    return client.post(f"/v1/actions/{action}", content=json.dumps(order).encode(), headers=headers)


class TestHttp:
    def test_the_idempotency_key_is_the_request_key(
        self, http: tuple[TestClient, PaperVenue]
    ) -> None:
        """Invariant 1 over HTTP: in minted mode the Idempotency-Key names the proposal; the
        response (body and Location) carries the minted id, and the key again is the stored
        result, replayed, with one effect."""
        client, venue = http
        first = post(client, "req-1", ORDER)
        assert first.status_code == 201, first.text
        minted_id = first.json()["operation_id"]
        assert MINTED.fullmatch(minted_id) and first.json()["state"] == "acknowledged"
        assert first.headers["location"] == f"/v1/operations/{minted_id}"
        again = post(client, "req-1", ORDER)
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["operation_id"] == minted_id
        retry = post(client, minted_id, ORDER)  # the minted id is the operation's own retry
        assert retry.status_code == 200 and retry.json()["operation_id"] == minted_id
        looked = client.get(f"/v1/operations/{minted_id}", headers=bearer(AGENT_A))
        assert looked.status_code == 200 and looked.json()["state"] == "acknowledged"
        assert venue.effect_count == 1

    def test_the_same_key_with_another_payload_is_422(
        self, http: tuple[TestClient, PaperVenue]
    ) -> None:
        """Invariant 2 over HTTP: request_key_conflict, problem+json, nothing sent."""
        client, venue = http
        post(client, "req-1", ORDER)
        changed = post(client, "req-1", {**ORDER, "quantity": "5"})
        assert changed.status_code == 422
        assert changed.headers["content-type"] == "application/problem+json"
        assert changed.json()["code"] == "request_key_conflict"
        assert venue.effect_count == 1

    def test_a_caller_mode_class_refuses_the_minted_namespace(
        self, http: tuple[TestClient, PaperVenue]
    ) -> None:
        client, _ = http
        cancel = {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": "XYZ-PERP",
            "order_ref": "ord-1",
        }
        refused = post(client, "minted:" + "cd" * 16, cancel, action="cancel_order")
        assert refused.status_code == 400, refused.text
        problem = refused.json()
        assert problem["code"] == "invalid_intent"
        assert "reserved_operation_id" in refused.text and "operation_id" in refused.text


def test_the_mcp_tool_says_its_operation_id_is_a_request_key(tmp_path: Path) -> None:
    svc = Service(parse_config(minted_config(tmp_path), "test.toml"))
    try:
        tools = {t.name: t for t in tool_definitions(svc)}
    finally:
        svc.close()
    assert tools["submit_order"].input_schema["properties"]["operation_id"] == REQUEST_KEY_SCHEMA
    assert tools["cancel_order"].input_schema["properties"]["operation_id"] == OPERATION_ID_SCHEMA
