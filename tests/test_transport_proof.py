"""Proof of non-execution: the HTTP adapter returns ``not_applied`` for a transport failure only
when no request byte left the process; every other failure stays unknown (invariant 3: an
uncertain outcome is never guessed; a ``not_applied`` receipt carries proof).

Each failure is produced for real against a loopback server
(effectgate.adapters.conformance.transport_faults)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from effectgate._execute.adapter import OutboundRequest, Outcome
from effectgate.adapters.conformance.transport_faults import FaultServer, refused_url
from effectgate.adapters.http import HttpVenueAdapter, SendWatch, not_sent_proof
from effectgate.errors import AdapterError

EFFECT = {"instrument": "XYZ-PERP", "side": "buy", "quantity": "4", "limit_price": "100.00"}


def request(key: str = "s:op-1") -> OutboundRequest:
    return OutboundRequest(operation_key=key, action="submit_order", effect=EFFECT)


@pytest.fixture
def make() -> Iterator[type[HttpVenueAdapter]]:
    made: list[HttpVenueAdapter] = []

    class _Made(HttpVenueAdapter):
        def __init__(self, endpoint: str, timeout: float = 2.0) -> None:
            super().__init__(endpoint, credential="k-123", timeout=timeout)
            made.append(self)

    yield _Made
    for adapter in made:
        adapter.close()


class TestNothingWrittenIsNotApplied:
    """Connection refused, DNS failure, TLS handshake failure: not_applied, with proof."""

    def test_connection_refused(self, make: type[HttpVenueAdapter]) -> None:
        receipt = make(refused_url()).execute(request(), timeout=2.0)
        assert receipt.outcome is Outcome.NOT_APPLIED
        assert receipt.proof and "before any request byte was written" in (receipt.proof.note or "")
        assert receipt.proof.kind.value == "not_sent"
        assert receipt.detail == {"transport": "ConnectError"}

    def test_dns_failure(self, make: type[HttpVenueAdapter]) -> None:
        # RFC 6761: names under .invalid never resolve.
        receipt = make("http://effectgate-venue.invalid:8080").execute(request(), timeout=2.0)
        assert receipt.outcome is Outcome.NOT_APPLIED
        assert receipt.detail == {"transport": "ConnectError"}

    def test_tls_handshake_failure(self, make: type[HttpVenueAdapter]) -> None:
        with FaultServer("reset-before") as server:
            receipt = make(server.url("https")).execute(request(), timeout=2.0)
            assert server.connections == 1 and server.request_bytes == 0
        assert receipt.outcome is Outcome.NOT_APPLIED
        assert receipt.proof and "could not be established" in (receipt.proof.note or "")


class TestAnythingPossiblyWrittenIsUnknown:
    """A reset or a timeout once the request may have been written raises (unknown)."""

    def test_a_reset_racing_the_connection(self, make: type[HttpVenueAdapter]) -> None:
        """A reset right after accept races the client: if it lands while the connection is
        still being set up (httpcore's connect_tcp sets socket options and fails with
        ECONNRESET) nothing was written, and not_applied is right; once the client began
        writing the request the outcome is unknown. Either way, never applied, and a
        not_applied always comes from the connect phase."""
        outcomes = set()
        for _ in range(10):
            with FaultServer("reset-before") as server:
                try:
                    receipt = make(server.url()).execute(request(), timeout=2.0)
                except AdapterError as exc:
                    assert "POST /v1/orders" in str(exc)
                    outcomes.add("unknown")
                else:
                    assert receipt.outcome is Outcome.NOT_APPLIED
                    assert receipt.detail == {"transport": "ConnectError"}
                    outcomes.add("not_applied")
        assert outcomes <= {"unknown", "not_applied"} and outcomes

    def test_reset_after_the_request(self, make: type[HttpVenueAdapter]) -> None:
        with FaultServer("reset-after") as server:
            with pytest.raises(AdapterError, match="connection to the venue failed"):
                make(server.url()).execute(request(), timeout=2.0)
            assert server.request_bytes > 0  # the venue did receive the request

    def test_timeout_after_the_request(self, make: type[HttpVenueAdapter]) -> None:
        with FaultServer("hang") as server:
            with pytest.raises(AdapterError, match="no answer from the venue in time"):
                make(server.url(), timeout=0.5).execute(request(), timeout=0.5)
            assert server.request_bytes > 0

    def test_reads_never_become_not_applied(self, make: type[HttpVenueAdapter]) -> None:
        """Only execute() settles anything; a failed probe is just an error."""
        with pytest.raises(AdapterError, match="venue unreachable"):
            make(refused_url()).probe("s:op-1")


class TestTheProofNeedsBothSignals:
    """The exception type alone is not proof: a send phase seen in the trace vetoes it (a
    tunnelling proxy writes CONNECT before the TLS handshake that then fails)."""

    def test_connect_error_after_a_send_phase_is_unknown(self) -> None:
        watch = SendWatch()
        watch("http11.send_request_headers.started", {})
        assert not_sent_proof(httpx.ConnectError("tls failed"), watch) is None

    def test_a_read_error_is_never_proof(self) -> None:
        assert not_sent_proof(httpx.ReadError("reset"), SendWatch()) is None
        assert not_sent_proof(httpx.ReadTimeout("slow"), SendWatch()) is None

    def test_connect_phases_alone_keep_the_proof(self) -> None:
        watch = SendWatch()
        watch("connection.connect_tcp.started", {})
        watch("connection.connect_tcp.failed", {})
        assert not_sent_proof(httpx.ConnectError("refused"), watch) is not None
