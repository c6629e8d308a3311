"""OpenTelemetry traces of an action's path (optional: ``pip install 'effectgate[otel]'``).

Spans: ``effectgate.parse``, ``effectgate.policy``, ``effectgate.journal``,
``effectgate.dispatch``, ``effectgate.receipt`` (the gate) and ``effectgate.reconcile`` (one per
pass). Attributes are identifiers and outcomes only: ``effectgate.operation_key``,
``effectgate.action``, ``effectgate.scope``, a tier or state; never an intent, an effect, a
venue's reply or a credential.

Tracing is off until :func:`enable` (or ``EFFECTGATE_TRACING=otel`` in the environment, read
once at import). Off, or with the extra absent, the gate does not call :func:`span` at all: it
branches on ``_tracer is not None`` (a plain ``if``); elsewhere :func:`span` returns one shared
no-op context manager.

The HTTP door extracts a W3C ``traceparent`` from the request's headers and the MCP door from
a tool call's ``_meta`` (:func:`attach_remote`), so the gate's spans join the caller's trace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

__all__ = ["attach_remote", "disable", "enable", "enabled", "event", "span"]


class _Noop:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NOOP = _Noop()
_tracer: Any = None


def enable(tracer_provider: Any = None) -> None:
    """Trace from now on, with ``tracer_provider`` (default: OpenTelemetry's global one).
    :class:`ImportError` naming the extra when OpenTelemetry is not installed."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        raise ImportError("tracing needs OpenTelemetry: pip install 'effectgate[otel]'") from None
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("effectgate")
    except PackageNotFoundError:
        ours = None
    _tracer = trace.get_tracer("effectgate", ours, tracer_provider=tracer_provider)


def disable() -> None:
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


def span(name: str, attributes: Mapping[str, str | int | float | bool]) -> Any:
    """A span named ``name`` as a context manager; the shared no-op when tracing is off.
    ``attributes`` must hold identifiers and outcomes only (module docstring)."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    # record_exception=False: an exception's text and traceback can carry a request's details
    # (an adapter's error message, a payload in a repr); the span only says that it failed.
    return tracer.start_as_current_span(
        name, attributes=dict(attributes), record_exception=False, set_status_on_exception=True
    )


def event(name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
    """An event on the current span (nothing when tracing is off)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(name, attributes=dict(attributes))


@contextmanager
def attach_remote(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the W3C trace context in ``carrier`` (``traceparent``/``tracestate``) the parent
    of the spans started inside; nothing when tracing is off or there is none."""
    if _tracer is None or not carrier:
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        context.detach(token)


if os.environ.get("EFFECTGATE_TRACING", "").lower() == "otel":  # pragma: no cover - env-driven
    enable()
