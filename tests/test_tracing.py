"""OpenTelemetry traces of an action's path (issue 20), with the SDK's in-memory exporter: the
spans, their attributes (the operation key; never a payload or secret), propagation from the
HTTP door (a real server) and the MCP door (the SDK's client), and nothing when off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effectgate import Gate, LimitPolicy, PolicySet, Reconciler
from effectgate._doors.http.app import create_app
from effectgate._doors.mcp.server import build_server
from effectgate._execute import tracing as _tracing
from effectgate._service import Principal, Service, parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import AGENT_A, ORDER, bearer, config_text, uvicorn_thread

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
PATH = ["effectgate.parse", "effectgate.policy", "effectgate.journal", "effectgate.dispatch"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.enable(provider)
    yield exporter
    _tracing.disable()


def values(exporter: InMemorySpanExporter) -> list[str]:
    out: list[str] = []
    for s in exporter.get_finished_spans():
        out += [str(v) for v in (s.attributes or {}).values()]
        for e in s.events:
            out += [str(v) for v in (e.attributes or {}).values()]
    return out


def gate(store: Store, venue: PaperVenue) -> Gate:
    return Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
        clock=ManualClock(),
    )


class TestSpansOfTheActionPath:
    def test_each_step_is_a_span_with_the_operation_key(
        self, store: Store, spans: InMemorySpanExporter
    ) -> None:
        venue = PaperVenue()
        g = gate(store, venue)
        g.submit("submit_order", "op-1", dict(EXAMPLE_ORDER))
        names = [s.name for s in spans.get_finished_spans()]
        assert names == [*PATH, "effectgate.receipt"]
        for s in spans.get_finished_spans():
            assert (s.attributes or {})["effectgate.operation_key"] == "default:op-1"
        receipt = spans.get_finished_spans()[-1]
        assert (receipt.attributes or {})["effectgate.outcome"] == "applied"
        Reconciler(
            store=store, registry=g.registry, adapters={"paper": PaperAdapter(venue)}
        ).run_once()
        assert spans.get_finished_spans()[-1].name == "effectgate.reconcile"

    def test_no_payload_or_secret_in_spans(self, store: Store, spans: InMemorySpanExporter) -> None:
        venue = PaperVenue()
        venue.fail_next(1, after_apply=False)  # an uncertain row: the repair is an event
        g = gate(store, venue)
        canary = {**EXAMPLE_ORDER, "quantity": "3.14159", "rationale": "canary-rationale-77"}
        g.submit("submit_order", "op-2", canary)
        clock = ManualClock(1_000_000.0 + 3600)
        Reconciler(
            store=store, registry=g.registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
        ).run_once()
        seen = values(spans)
        dispatch = [s for s in spans.get_finished_spans() if s.name == "effectgate.dispatch"]
        assert dispatch and not dispatch[0].events  # the failure's text is not recorded
        assert any(
            e.name == "effectgate.repair" for s in spans.get_finished_spans() for e in s.events
        )
        for field_value in ("3.14159", "canary-rationale-77", "XYZ-PERP", "st-114", "sha256:"):
            assert all(str(field_value) not in v for v in seen), field_value


class TestOff:
    """Off, the hot path gets the shared no-op: no allocation, no span."""

    def test_off_is_the_shared_noop(self) -> None:
        _tracing.disable()
        assert _tracing.span("effectgate.parse", {}) is _tracing.span("x", {"a": 1})
        with _tracing.attach_remote({"traceparent": TRACEPARENT}):
            pass
        assert not _tracing.enabled()


class TestPropagation:
    """The gate's spans join the caller's trace from the HTTP and the MCP door."""

    @pytest.fixture
    def service(self, tmp_path: Path) -> Iterator[Service]:
        cfg = parse_config(config_text(store_url=f"sqlite:///{tmp_path}/ledger.db"), "t.toml")
        svc = Service(cfg, adapters={"venue": PaperAdapter(PaperVenue())})
        yield svc
        svc.close()

    def test_http_traceparent(self, service: Service, spans: InMemorySpanExporter) -> None:
        with uvicorn_thread(create_app(service, mcp_http=False)) as url:
            r = httpx.post(
                f"{url}/v1/actions/submit_order",
                content=json.dumps(ORDER).encode(),
                headers=bearer(
                    AGENT_A,
                    **{
                        "Idempotency-Key": "op-t1",
                        "Content-Type": "application/json",
                        "traceparent": TRACEPARENT,
                    },
                ),
                timeout=10,
            )
        assert r.status_code in (200, 201, 202), r.text
        ours = [s for s in spans.get_finished_spans() if s.name == "effectgate.journal"]
        assert ours and f"{ours[0].context.trace_id:032x}" == TRACE_ID

    def test_mcp_meta_traceparent(self, service: Service, spans: InMemorySpanExporter) -> None:
        async def go() -> Any:
            async with Client(build_server(service, Principal("alpha", "agent", "alpha"))) as c:
                return await c.call_tool(
                    "submit_order",
                    {"operation_id": "op-m1", **ORDER},
                    meta={"traceparent": TRACEPARENT},
                )

        res = anyio.run(go)
        assert not res.is_error
        ours = [s for s in spans.get_finished_spans() if s.name == "effectgate.journal"]
        assert ours and f"{ours[0].context.trace_id:032x}" == TRACE_ID


class TestWithoutTheExtra:
    def test_the_gate_runs_and_enable_names_the_extra(self) -> None:
        """Without OpenTelemetry installed, the gate imports and runs (tracing off), and
        enabling it names the extra to install."""
        import subprocess
        import sys

        code = (
            "import sys\n"
            "for name in ('opentelemetry', 'opentelemetry.trace'):\n"
            "    sys.modules[name] = None\n"
            "from decimal import Decimal\n"
            "from effectgate import Gate, LimitPolicy, PolicySet\n"
            "from effectgate._execute import tracing as _tracing\n"
            "from effectgate.adapters.paper import PaperAdapter, PaperVenue\n"
            "from effectgate.examples import EXAMPLE_ORDER, default_registry\n"
            "from effectgate.store import SQLiteStore\n"
            "g = Gate(store=SQLiteStore(':memory:'), registry=default_registry(),\n"
            "    adapters={'paper': PaperAdapter(PaperVenue())},\n"
            "    policy=PolicySet({'submit_order': LimitPolicy(Decimal('100000'))}))\n"
            "print(g.submit('submit_order', 'op-1', dict(EXAMPLE_ORDER)).state.value)\n"
            "try:\n"
            "    _tracing.enable()\n"
            "except ImportError as exc:\n"
            "    print(exc)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
        assert "acknowledged" in out.stdout, out.stderr
        assert "pip install 'effectgate[otel]'" in out.stdout
