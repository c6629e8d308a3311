"""The conformance kit's shared values: :class:`VenueDriver` (what a check needs beside the
adapter) and :class:`ConformanceReport` (results and their SHA-256 digest). The kit
(:mod:`effectgate.adapters.conformance.kit`, which re-exports both) and its separate checks
(:mod:`effectgate.adapters.conformance.reads`) import them from here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from effectgate._execute.adapter import Adapter, OutboundRequest

__all__ = ["ConformanceReport", "VenueDriver"]


class VenueDriver(Protocol):
    """What the kit needs beside the adapter: requests to send, and direct access to the venue.

    ``request(key)``: a valid request under ``key`` (each call may be sent as a new effect).
    ``refused_request(key)``: one the venue provably refuses, or None.
    ``unreachable()``: the same adapter pointed where nothing answers (or answers 5xx).
    ``direct_effect()``: make an effect at the venue outside the boundary (its venue id), or None.
    ``delivered(key)``: for a venue with no read view, how many effects under ``key`` arrived as
    the venue's far end saw them (a test mailbox), or None.
    ``secrets()``: the credential values that must never appear anywhere.

    Optional: ``pointed_at(url)``, the same adapter pointed at a loopback ``http(s)://`` URL
    (None if it cannot be), for the ``transport-classification`` check.
    """

    venue: str

    def request(self, operation_key: str) -> OutboundRequest: ...
    def refused_request(self, operation_key: str) -> OutboundRequest | None: ...
    def unreachable(self) -> Adapter: ...
    def direct_effect(self) -> str | None: ...
    def delivered(self, operation_key: str) -> int | None: ...
    def secrets(self) -> list[str]: ...


@dataclass
class ConformanceReport:
    adapter: str
    venue: str
    listing: str
    results: dict[str, dict[str, str]] = field(default_factory=dict)
    honours_key: str = "unknown"
    measured_lag: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    date: str = ""
    digest: str = ""

    def add(self, check: str, status: str, detail: str) -> None:
        self.results[check] = {"status": status, "detail": detail}

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.results.items() if v["status"] == "fail"]

    def body(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "venue": self.venue,
            "listing": self.listing,
            "honours_key": self.honours_key,
            "measured_lag": self.measured_lag,
            "versions": self.versions,
            "date": self.date,
            "results": self.results,
        }

    def seal(self) -> None:
        self.digest = _digest(self.body())

    def write(self, path: str | Path) -> None:
        self.seal()
        Path(path).write_text(json.dumps({**self.body(), "digest": self.digest}, indent=2) + "\n")

    def render(self) -> str:
        lines = [f"effectgate conformance: adapter {self.adapter} at {self.venue} ({self.listing})"]
        for name, res in self.results.items():
            lines.append(f"  {res['status']:>8}  {name}: {res['detail']}")
        lines.append(f"  key honoured by the venue: {self.honours_key}")
        return "\n".join(lines)


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
