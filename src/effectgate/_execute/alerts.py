"""Alert sinks: where a tripped breaker or a maintenance rule pages someone.

A sink is any callable taking an :class:`~effectgate._core.controls.Alert`. :func:`raise_alert`
stores the alert once per ``(kind, subject)``, logs it at ERROR and hands it to the sink; a sink
that fails is logged and never stops the caller (an alert must not break dispatch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import httpx

from effectgate._core.controls import Alert
from effectgate.store.roles import Store

__all__ = [
    "AlertSink",
    "LogAlertSink",
    "MultiSink",
    "WebhookAlertSink",
    "default_sink",
    "deliver",
    "raise_alert",
]

log = logging.getLogger("effectgate.alerts")

AlertSink = Callable[[Alert], None]


def default_sink() -> AlertSink:
    """The sink to give when no pager is configured: :func:`deliver` logs every alert at ERROR,
    and that log line is the whole of it. Giving a sink (this one, rather than None) is what
    turns on the alerting that needs one, e.g. the reconciler's maintenance rules."""
    return MultiSink([])


class LogAlertSink:
    """Logs each alert at ERROR on ``effectgate.alerts``, for a caller that hands alerts to a
    sink itself; through :func:`deliver`, which logs already, use :func:`default_sink`."""

    def __call__(self, alert: Alert) -> None:
        log.error("ALERT %s [%s] %s", alert.kind, alert.action or "-", alert.message)


class WebhookAlertSink:
    """POSTs each alert as JSON to ``url`` (a pager or chat webhook)."""

    def __init__(
        self, url: str, *, timeout: float = 5.0, client: httpx.Client | None = None
    ) -> None:
        self.url = url
        self._client = client or httpx.Client(timeout=timeout)

    def __call__(self, alert: Alert) -> None:
        self._client.post(self.url, json=alert.to_dict()).raise_for_status()

    def close(self) -> None:
        self._client.close()


class MultiSink:
    """Fans an alert out to several sinks; one failing does not stop the others."""

    def __init__(self, sinks: Sequence[AlertSink]) -> None:
        self.sinks = list(sinks)

    def __call__(self, alert: Alert) -> None:
        for sink in self.sinks:
            deliver(sink, alert)


def deliver(sink: AlertSink | None, alert: Alert) -> None:
    """Log ``alert`` at ERROR and hand it to ``sink``; a failing sink is logged, not raised."""
    log.error("alert %s for %s: %s", alert.kind, alert.action or "-", alert.message)
    if sink is None:
        return
    try:
        sink(alert)
    except Exception as exc:
        log.error(
            "alert sink %r failed for %s/%s: %s",
            sink,
            alert.kind,
            alert.subject,
            type(exc).__name__,
        )


def raise_alert(store: Store, sink: AlertSink | None, alert: Alert) -> bool:
    """Record ``alert`` once and deliver it the first time; False if it was raised before."""
    if not store.record_alert(alert):
        return False
    deliver(sink, alert)
    return True
