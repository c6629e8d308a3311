"""The paper venue: an in-process reference system of record, and its adapter.

The venue and its values live in :mod:`effectgate.adapters._paper_venue` (re-exported here, so
its names still import from this module); the adapter is defined here.

Users point their harness at a :class:`PaperVenue` before going live. It behaves like a real
venue in the ways that matter to the boundary: it may or may not honour the operation key, its
read view may lag its writes, it refuses some effects, and its calls can fail before or after the
effect is applied. Methods marked *test hook* exist to drive those cases from tests.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from effectgate._execute.adapter import (
    ADAPTER_CALL_CEILING,
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    DryRun,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    refusal,
)
from effectgate.adapters._paper_venue import CANCEL_ACTION as CANCEL_ACTION
from effectgate.adapters._paper_venue import ORDER_ACTION as ORDER_ACTION
from effectgate.adapters._paper_venue import (
    EffectValue,
    PaperRecord,
    PaperVenue,
    Submitted,
    VenueRejection,
    submitted_version,
)
from effectgate.errors import AdapterError, ConfigError

if TYPE_CHECKING:
    from effectgate.adapters._paper_sandbox import PaperSandbox

__all__ = [
    "PaperAdapter",
    "PaperRecord",
    "PaperVenue",
    "Submitted",
    "VenueRejection",
    "submitted_version",
]


class PaperAdapter(Adapter):
    """An in-process adapter over a :class:`PaperVenue`."""

    name = "paper"

    def __init__(
        self, venue: PaperVenue, *, sandbox: PaperSandbox | None = None, latency: float = 0.0
    ) -> None:
        if not (latency >= 0.0 and latency <= ADAPTER_CALL_CEILING):  # also refuses NaN
            raise ConfigError(
                f"paper adapter latency must be in [0, {ADAPTER_CALL_CEILING:g}] s, got {latency!r}"
            )
        self.venue = venue
        self.sandbox = sandbox
        #: Seconds each dispatch waits before the venue answers: a real venue's round trip
        #: (tens to hundreds of ms), so a fleet can be rehearsed against a slow system of record.
        self.latency = latency

    def read_precondition(
        self, action: str, effect: Mapping[str, EffectValue], *, timeout: float
    ) -> Mapping[str, object]:
        """The position the effect's instrument stands at (see :class:`ReadsPrecondition`)."""
        instrument = str(effect.get("instrument", ""))
        net, orders = self.venue.position(instrument)
        return {"instrument": instrument, "position": str(net), "orders": orders}

    @property
    def can_speculate(self) -> bool:
        """Whether this adapter has a sandbox to dry-run against."""
        return self.sandbox is not None

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        """Dry-run ``request`` at the sandbox under the key it carries; applies nothing."""
        if self.sandbox is None:
            raise AdapterError("this paper adapter has no sandbox to speculate against")
        answer = self.sandbox.dry_run(
            request.operation_key, request.action, request.effect, attempt=attempt
        )
        return DryRun(
            answer.verdict,
            answer.reason,
            answer.sandbox_key,
            answer.expires_in,
            subject=answer.subject,
            evidence={"sandbox": "paper", "mode": self.sandbox.mode.value},
        )

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        """Submit once; a refusal is ``not_applied`` with proof, any other failure is unknown.

        With a ``latency``, the call waits that long first (no lock held), as a network round
        trip would; a latency past ``timeout`` is a request lost in flight: the venue never sees
        it and the call fails after ``timeout``, an unknown outcome for the boundary.
        """
        if self.latency:
            if self.latency > timeout:
                time.sleep(timeout)
                raise AdapterError(f"paper venue did not answer within {timeout:g} s")
            time.sleep(self.latency)
        try:
            answer = self.venue.submit(request.operation_key, request.action, request.effect)
        except VenueRejection as exc:
            return Receipt(Outcome.NOT_APPLIED, proof=refusal(f"venue rejected: {exc.reason}"))
        except Exception as exc:  # the venue may or may not have applied it
            raise AdapterError(f"paper venue call failed: {type(exc).__name__}: {exc}") from exc
        venue_id, created = answer
        version = submitted_version(self.venue, answer)
        return Receipt(
            Outcome.APPLIED,
            venue_id=venue_id,
            detail={"created": "true" if created else "false"},
            venue_version=None if version is None else str(version),
        )

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        call_budget(timeout)  # in process, never blocks: only the argument is checked
        return self.venue.find(operation_key)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        call_budget(timeout)
        return self.venue.records_after(after, limit)

    def __repr__(self) -> str:
        extra = f", latency={self.latency:g}" if self.latency else ""
        return f"PaperAdapter(venue={self.venue!r}{extra})"
