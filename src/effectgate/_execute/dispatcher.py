"""The standing dispatcher: sends the ``validated`` rows a control released.

A control that stood between a row and its dispatch lets go in another process than the one
that journalled the row: an operator completes its approvals, lifts a kill switch, resets a
breaker or widens an envelope, or a full rate or exposure window empties with time. Nothing
sent those rows before but the agent's own retry; now the service runs this job beside the
reconciler (``effectgate serve``), and ``effectgate dispatch`` runs one pass.

Which rows are released is the store's (:meth:`~effectgate.store.roles.Releases
.lease_released`): never a row journalled with ``Gate.propose``, whose caller dispatches it.
Replicas lease rows so they share the work (PostgreSQL skips rows other replicas hold); leases
expire, so a dispatcher that dies leaves its rows to the others. Each row goes through
``Gate.dispatch`` like any other: the kill switch, breaker and envelope are checked in the
transaction that writes ``submitted``, a row still held stays held (its detail and its next
retry updated), and the compare-and-set decides who sends, so two dispatchers never both send
(invariant 1).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from effectgate._core.controls import VerdictKind
from effectgate._execute._gate_protocol import DispatchingGate
from effectgate.errors import EffectgateError

__all__ = ["DispatchReport", "Dispatcher"]

log = logging.getLogger("effectgate.dispatcher")


@dataclass
class DispatchReport:
    """What one pass did with the released rows it leased."""

    leased: int = 0
    #: Moved to ``submitted`` by this pass (the venue's answer is on the row).
    sent: int = 0
    shadowed: int = 0
    #: Still held by a control: left ``validated``, the hold's reason updated.
    held: int = 0
    #: Already moved by another process (or its journal commit was lost): not sent here.
    taken: int = 0
    errors: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "leased": self.leased,
            "sent": self.sent,
            "shadowed": self.shadowed,
            "held": self.held,
            "taken": self.taken,
            "errors": self.errors,
        }


class Dispatcher:
    """Dispatches released rows through ``gate``, once or as a standing job."""

    def __init__(
        self,
        gate: DispatchingGate,
        *,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        batch: int = 100,
    ) -> None:
        if lease_seconds <= 0 or batch < 1:
            raise ValueError("lease_seconds must be positive and batch at least 1")
        self.gate = gate
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        # Longer than a dispatch takes (the venue call included), or another replica may
        # lease the row meanwhile; that costs a wasted attempt, never a second send.
        self.lease_seconds = lease_seconds
        self.batch = batch

    def run_once(self, limit: int | None = None) -> DispatchReport:
        """Lease released rows batch by batch and dispatch each, until none is left."""
        report = DispatchReport()
        seen: set[tuple[str, str]] = set()
        store = self.gate.store
        while limit is None or len(seen) < limit:
            want = self.batch if limit is None else min(self.batch, limit - len(seen))
            keys = store.lease_released(
                self.owner, now=self.gate.clock(), lease_seconds=self.lease_seconds, limit=want
            )
            # A row this pass tried and failed on keeps its lease until it expires; one seen
            # again means another replica's lease expired: leave it to the next pass.
            fresh = [k for k in keys if k not in seen]
            if not fresh:
                break
            for key in fresh:
                seen.add(key)
                self._one(*key, report)
        return report

    def _one(self, scope: str, operation_id: str, report: DispatchReport) -> None:
        report.leased += 1
        try:
            _, verdict = self.gate._dispatch(scope, operation_id, None, self.owner)
        except EffectgateError as exc:
            # A store outage or a vanished row: its lease expires and a later pass retries.
            report.errors += 1
            log.warning("dispatch of released %s:%s failed: %s", scope, operation_id, exc.code)
            return
        if verdict is None:
            report.taken += 1
        elif verdict.kind is VerdictKind.SEND:
            report.sent += 1
        elif verdict.kind is VerdictKind.SHADOW:
            report.shadowed += 1
        else:
            report.held += 1

    def watch(
        self,
        interval: float,
        stop: threading.Event,
        on_report: Callable[[DispatchReport], None] | None = None,
    ) -> None:
        """Run until ``stop`` is set: a pass every ``interval`` seconds."""
        while not stop.is_set():
            report = self.run_once()
            if on_report is not None:
                on_report(report)
            stop.wait(interval)
