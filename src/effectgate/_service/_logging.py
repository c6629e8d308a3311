"""How the service's processes log: one handler, timestamped lines or JSON lines.

Every line carries a UTC timestamp. ``json`` writes one object per line (``ts``, ``level``,
``logger``, ``message``, and ``exc`` with the traceback when there is one) for log shippers.
uvicorn's own loggers are routed through the same handler. ``httpx`` and ``httpcore`` are held
at WARNING: at INFO, httpx logs every request the HTTP adapter makes, so the standing
reconciler's polls would drown the lines that matter. So is the MCP SDK's transport, which logs
a line at INFO for every stateless request it ends.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging"]

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: Loggers that speak once per outbound request; held at WARNING (or the level, if higher).
QUIET_LOGGERS = ("httpx", "httpcore", "mcp.server.streamable_http")


def _timestamp(record: logging.LogRecord) -> str:
    at = datetime.fromtimestamp(record.created, UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """``2026-05-09T07:35:25.123Z INFO effectgate._service: message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _timestamp(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the message is formatted first, so it is plain text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``stream``, or to whatever ``sys.stderr`` is at the time of each line (a test
    runner that swaps and closes it must not be left with a handler on a closed file)."""

    def __init__(self, stream: IO[str] | None) -> None:
        super().__init__(stream or sys.stderr)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    level: str = "info", fmt: str = "text", stream: IO[str] | None = None
) -> None:
    """Log ``fmt`` lines at ``level`` to ``stream`` (stderr); replaces an earlier call's."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    root = logging.getLogger()
    # Only our own handler is replaced: one a host program (or a test runner) installed stays.
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
