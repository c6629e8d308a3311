"""The paper venue over real HTTP, driven by the HTTP venue adapter."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from effectgate._execute.adapter import OutboundRequest, Outcome, VenueRecord, iter_records
from effectgate.adapters._paper_server import PaperVenueServer, serve_paper_venue
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperVenue
from effectgate.errors import AdapterError, ConfigError

CANARY = "canary-SECRET-123"
ENV = "EFFECTGATE_TEST_VENUE_KEY"
EFFECT = {"instrument": "XYZ-PERP", "side": "buy", "quantity": "4", "limit_price": "100.00"}


def request(key: str, **effect: str | int | bool) -> OutboundRequest:
    return OutboundRequest(operation_key=key, action="submit_order", effect={**EFFECT, **effect})


@pytest.fixture
def venue() -> PaperVenue:
    return PaperVenue(instruments=frozenset({"XYZ-PERP"}), max_quantity=100)


@pytest.fixture
def server(venue: PaperVenue) -> Iterator[PaperVenueServer]:
    with serve_paper_venue(venue, api_key=CANARY) as running:
        yield running


@pytest.fixture
def adapter(
    server: PaperVenueServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HttpVenueAdapter]:
    monkeypatch.setenv(ENV, CANARY)
    made = HttpVenueAdapter(server.url, credential_env=ENV, timeout=5.0)
    yield made
    made.close()


def raw(server: PaperVenueServer, method: str, path: str, **kwargs: object) -> httpx.Response:
    return httpx.request(method, server.url + path, timeout=5.0, **kwargs)  # type: ignore[arg-type]


class TestEndToEnd:
    """invariant 5: duplicates are visible through the real wire protocol."""

    def test_execute_probe_records(self, adapter: HttpVenueAdapter, venue: PaperVenue) -> None:
        receipt = adapter.execute(request("op-1"), timeout=5.0)
        assert (receipt.outcome, receipt.venue_id) == (Outcome.APPLIED, "V-000001")
        assert adapter.execute(request("op-1"), timeout=5.0).venue_id == "V-000001"
        assert venue.effect_count == 1 and venue.calls == 2
        assert adapter.probe("op-1") == ["V-000001"]
        assert adapter.probe("op-absent") == []
        assert adapter.records(None, 10) == [VenueRecord("op-1", "V-000001")]

    def test_ignored_key_duplicates_are_enumerated(
        self, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        venue.set_honour_key(False)
        a = adapter.execute(request("op-1"), timeout=5.0).venue_id
        b = adapter.execute(request("op-1"), timeout=5.0).venue_id
        assert a != b
        assert adapter.probe("op-1") == [a, b]
        assert [r.operation_key for r in adapter.records(None, 10)] == ["op-1", "op-1"]

    def test_paging_over_http_returns_every_record_once(
        self, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        venue.set_honour_key(False)
        for i in range(23):
            venue.submit(f"op-{i % 5}", "submit_order", EFFECT)
        venue.inject_record("op-orphan")
        records = list(iter_records(adapter, page_size=4))
        assert len(records) == 24 and records == sorted(records) and len(set(records)) == 24

    def test_odd_keys_travel_intact(self, adapter: HttpVenueAdapter) -> None:
        key = "op/with?odd&chars=1 #x"
        venue_id = adapter.execute(request(key), timeout=5.0).venue_id
        assert adapter.probe(key) == [venue_id]
        assert adapter.records(None, 5) == [VenueRecord(key, str(venue_id))]

    def test_read_lag_over_http(
        self, server: PaperVenueServer, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        venue.set_read_lag(3600.0)
        adapter.execute(request("op-lag"), timeout=5.0)
        assert adapter.probe("op-lag") == [] and adapter.records(None, 5) == []


class TestReceipts:
    """invariant 3: only an explicit refusal is proof; everything else is unknown."""

    def test_rejection_is_not_applied_with_proof(
        self, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        receipt = adapter.execute(request("op-1", instrument="NOPE"), timeout=5.0)
        assert receipt.outcome is Outcome.NOT_APPLIED
        assert receipt.proof is not None and "NOPE" in (receipt.proof.note or "")
        assert venue.effect_count == 0

    @pytest.mark.parametrize("after_apply", [False, True])
    def test_lost_reply_is_adapter_error(
        self, adapter: HttpVenueAdapter, venue: PaperVenue, after_apply: bool
    ) -> None:
        venue.fail_next(1, after_apply=after_apply)
        with pytest.raises(AdapterError):
            adapter.execute(request("op-1"), timeout=5.0)
        assert venue.effect_count == (1 if after_apply else 0)
        # The adapter's pooled client recovers for the next call.
        assert adapter.probe("op-1") == (["V-000001"] if after_apply else [])

    def test_wrong_key_is_adapter_error(self, server: PaperVenueServer, venue: PaperVenue) -> None:
        wrong = HttpVenueAdapter(server.url, credential="not-the-key")
        with pytest.raises(AdapterError) as info:
            wrong.execute(request("op-1"), timeout=5.0)
        assert "401" in str(info.value)
        with pytest.raises(AdapterError):
            wrong.probe("op-1")
        with pytest.raises(AdapterError):
            wrong.records(None, 5)
        assert venue.effect_count == 0
        wrong.close()

    def test_server_stopped_is_adapter_error(
        self, server: PaperVenueServer, adapter: HttpVenueAdapter
    ) -> None:
        adapter.execute(request("op-1"), timeout=5.0)  # leaves a pooled keep-alive connection
        server.stop()
        # Either the stale pooled connection took the request (unknown: it raises) or httpx
        # saw it closed and a new connection was refused before any byte was written
        # (not_applied, with that proof; docs/evidence.md). Never applied.
        try:
            receipt = adapter.execute(request("op-2"), timeout=5.0)
        except AdapterError:
            pass
        else:
            assert receipt.outcome is Outcome.NOT_APPLIED
            assert receipt.proof and "before any request byte was written" in (
                receipt.proof.note or ""
            )
            assert receipt.proof.kind.value == "not_sent"
        with pytest.raises(AdapterError):
            adapter.probe("op-1")

    def test_oversized_effect_is_adapter_error(
        self, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        with pytest.raises(AdapterError) as info:
            adapter.execute(request("op-1", memo="x" * 70_000), timeout=5.0)
        assert "413" in str(info.value)
        assert venue.calls == 0

    def test_timeout_budget_is_the_smaller_one(self, adapter: HttpVenueAdapter) -> None:
        with pytest.raises(AdapterError):
            adapter.execute(request("op-1"), timeout=0.0)


class TestServerProtocol:
    """The wire contract the HTTP adapter relies on."""

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {CANARY}"}

    def test_missing_idempotency_key_is_400(
        self, server: PaperVenueServer, venue: PaperVenue
    ) -> None:
        response = raw(
            server,
            "POST",
            "/v1/orders",
            headers=self.auth(),
            json={"action": "submit_order", "effect": EFFECT},
        )
        assert response.status_code == 400
        assert venue.calls == 0

    def test_oversized_body_is_413(self, server: PaperVenueServer, venue: PaperVenue) -> None:
        response = raw(
            server,
            "POST",
            "/v1/orders",
            headers={**self.auth(), "Idempotency-Key": "op-1"},
            content=b"{" + b" " * (64 * 1024 + 1) + b"}",
        )
        assert response.status_code == 413
        assert venue.calls == 0

    @pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {CANARY}", CANARY])
    def test_bad_credentials_are_401(
        self, server: PaperVenueServer, venue: PaperVenue, header: str | None
    ) -> None:
        headers = {"Idempotency-Key": "op-1"} | ({"Authorization": header} if header else {})
        response = raw(
            server,
            "POST",
            "/v1/orders",
            headers=headers,
            json={"action": "submit_order", "effect": EFFECT},
        )
        assert response.status_code == 401
        assert raw(server, "GET", "/v1/records", headers=headers).status_code == 401
        assert venue.calls == 0

    @pytest.mark.parametrize(
        "body",
        [
            b"not json",
            b'{"action": "submit_order"}',
            b'{"action": "submit_order", "effect": {"quantity": 1.5}}',
            b'{"action": "submit_order", "effect": {"quantity": NaN}}',
            b'{"action": "submit_order", "effect": {"nested": {}}, "extra": 1}',
        ],
    )
    def test_malformed_body_is_400(
        self, server: PaperVenueServer, venue: PaperVenue, body: bytes
    ) -> None:
        response = raw(
            server,
            "POST",
            "/v1/orders",
            headers={**self.auth(), "Idempotency-Key": "op-1"},
            content=body,
        )
        assert response.status_code == 400
        assert venue.calls == 0

    def test_health_and_unknown_paths(self, server: PaperVenueServer) -> None:
        assert raw(server, "GET", "/v1/health").json() == {"status": "ok"}
        assert raw(server, "GET", "/nope", headers=self.auth()).status_code == 404

    @pytest.mark.parametrize("query", ["limit=0", "limit=x", "after_key=a", "limit=100001"])
    def test_bad_paging_is_400(self, server: PaperVenueServer, query: str) -> None:
        response = raw(server, "GET", f"/v1/records?{query}", headers=self.auth())
        assert response.status_code == 400


class TestSecrets:
    """invariant 6: no credential ever leaves the executor."""

    def test_key_never_in_errors_reprs_or_bodies(
        self, server: PaperVenueServer, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        texts = [repr(adapter), str(adapter), repr(server), repr(vars(adapter))]
        venue.fail_next(1, after_apply=False)
        wrong = HttpVenueAdapter(server.url, credential="wrong")
        calls: list[Callable[[], object]] = [
            lambda: adapter.execute(request("op-1"), timeout=5.0),  # lost connection
            lambda: wrong.execute(request("op-2"), timeout=5.0),  # 401
            lambda: adapter.execute(request("op-3", memo="x" * 70_000), timeout=5.0),  # 413
        ]
        for call in calls:
            with pytest.raises(AdapterError) as info:
                call()
            texts += [str(info.value), repr(info.value), repr(info.value.__cause__)]
        for method, path, headers in (
            ("POST", "/v1/orders", {"Authorization": "Bearer wrong"}),
            ("POST", "/v1/orders", {"Authorization": f"Bearer {CANARY}"}),
            ("GET", "/v1/records?limit=0", {"Authorization": f"Bearer {CANARY}"}),
            ("GET", "/v1/orders", {"Authorization": f"Bearer {CANARY}"}),
        ):
            response = raw(server, method, path, headers=headers, content=b"{}")
            texts += [response.text, str(response.headers)]
        server.stop()
        with pytest.raises(AdapterError) as stopped:
            adapter.probe("op-1")
        texts += [str(stopped.value), repr(stopped.value.__cause__)]
        wrong.close()
        assert all(CANARY not in text for text in texts)

    def test_config_errors_never_show_the_key(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(ENV, CANARY)
        secret_file = tmp_path / "key"
        secret_file.write_text(CANARY + "\n")
        cases = [
            dict(credential_env=ENV, credential=CANARY),
            dict(credential_env=ENV, credential_file=str(secret_file)),
            dict(),
            dict(credential_env="EFFECTGATE_TEST_UNSET_VAR"),
            dict(credential_file=str(tmp_path / "missing")),
            dict(credential=CANARY + "\r\nX-Injected: 1"),
        ]
        for kwargs in cases:
            with pytest.raises(ConfigError) as info:
                HttpVenueAdapter("http://127.0.0.1:1", **kwargs)  # type: ignore[arg-type]
            assert CANARY not in str(info.value) and CANARY not in repr(info.value)
        with pytest.raises(ConfigError) as info:
            HttpVenueAdapter(f"http://user:{CANARY}@127.0.0.1:1", credential_env=ENV)
        assert CANARY not in str(info.value)

    def test_credential_file_is_read_and_stripped(
        self, server: PaperVenueServer, tmp_path: Path, venue: PaperVenue
    ) -> None:
        secret_file = tmp_path / "key"
        secret_file.write_text(CANARY + "\n")
        adapter = HttpVenueAdapter(server.url, credential_file=str(secret_file))
        assert adapter.execute(request("op-1"), timeout=5.0).outcome is Outcome.APPLIED
        assert CANARY not in repr(adapter)
        adapter.close()


class TestEndpointIsConfiguration:
    """invariant 6: the request cannot choose the URL or the headers."""

    def test_request_has_no_way_to_name_an_endpoint(self) -> None:
        fields = set(inspect.signature(OutboundRequest).parameters)
        assert fields == {"operation_key", "action", "effect"}
        params = set(inspect.signature(HttpVenueAdapter.execute).parameters)
        assert params == {"self", "request", "timeout"}

    def test_effect_fields_that_look_like_urls_are_just_data(
        self, adapter: HttpVenueAdapter, venue: PaperVenue, server: PaperVenueServer
    ) -> None:
        hostile = request(
            "op-1",
            url="http://evil.example/",
            endpoint="http://evil.example/",
            Authorization="Bearer stolen",
            host="evil.example",
        )
        receipt = adapter.execute(hostile, timeout=5.0)
        assert receipt.outcome is Outcome.APPLIED
        assert adapter.endpoint == server.url
        record = venue.visible_records()[0]
        assert record.effect["url"] == "http://evil.example/"  # stored as data, not followed

    def test_header_injection_via_operation_key_is_refused(
        self, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        with pytest.raises(AdapterError):
            adapter.execute(request("op-1\r\nAuthorization: Bearer x"), timeout=5.0)
        assert venue.calls == 0

    @pytest.mark.parametrize(
        "endpoint",
        ["ftp://127.0.0.1/", "127.0.0.1:80", "http://127.0.0.1/?next=evil", "http:///nohost"],
    )
    def test_bad_endpoints_refused(self, endpoint: str) -> None:
        with pytest.raises(ConfigError):
            HttpVenueAdapter(endpoint, credential="k")


class TestRecordVersions:
    """The record's version over the wire (docs/paper-venue.md, "Record versions")."""

    def test_lookups_report_each_record_s_version(
        self, server: PaperVenueServer, adapter: HttpVenueAdapter, venue: PaperVenue
    ) -> None:
        placed = adapter.execute(request("op-1"), timeout=5.0)
        posted = raw(
            server, "POST", "/v1/orders", json={"action": "submit_order", "effect": EFFECT},
            headers={"Authorization": f"Bearer {CANARY}", "Idempotency-Key": "op-1"},
        )  # fmt: skip
        assert posted.status_code == 201
        assert posted.json() == {"venue_id": placed.venue_id, "created": False, "version": 1}
        found = raw(server, "GET", "/v1/orders?key=op-1",
                    headers={"Authorization": f"Bearer {CANARY}"})  # fmt: skip
        assert found.json() == {"venue_ids": [placed.venue_id], "versions": {placed.venue_id: 1}}

    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ({"venue_id": "V-1", "created": True}, None),  # optional: a venue may not report it
            ({"venue_id": "V-1", "created": True, "version": 7}, "7"),
        ],
    )
    def test_the_adapter_reads_the_version_when_present(
        self, body: dict[str, object], expected: str | None
    ) -> None:
        adapter = _answering(201, body)
        receipt = adapter.execute(request("op-1"), timeout=5.0)
        assert receipt.outcome is Outcome.APPLIED and receipt.venue_version == expected

    @pytest.mark.parametrize("version", [0, -1, "3", True, 1.5, None])
    def test_a_malformed_version_makes_the_outcome_unknown(self, version: object) -> None:
        adapter = _answering(201, {"venue_id": "V-1", "created": True, "version": version})
        with pytest.raises(AdapterError, match="malformed version"):
            adapter.execute(request("op-1"), timeout=5.0)


def _answering(status: int, body: dict[str, object]) -> HttpVenueAdapter:
    """An http adapter whose venue answers ``status`` with ``body`` to every request."""
    made = HttpVenueAdapter("http://127.0.0.1:9", credential="k", timeout=5.0)
    made._client = httpx.Client(  # a venue other than the paper one, speaking the protocol
        base_url="http://127.0.0.1:9",
        transport=httpx.MockTransport(lambda _: httpx.Response(status, json=body)),
    )
    return made
