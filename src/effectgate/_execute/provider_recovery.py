"""Reconciliation of model-provider calls whose local return is missing (read-only).

A harness that crashed mid-call does not know whether the provider answered. This asks the
provider, through a host hook, about each *original* call, never re-sending it:

* the host's ``lookup(scope, record)`` returns a terminal :class:`ProviderReceipt`, or None for
  a miss (unresolved, never a failure); it must not generate, execute or resend anything;
* ``authenticate(record, receipt)`` must raise unless the proof is genuine and bound to the
  original routing evidence; the receipt is then checked against the journal as it is now
  (provider, model, request digest, and any local return that arrived since) before it is
  kept. Receipts that disagree with each other are both kept.

Pages are bounded and run with bounded concurrency (default 4); each call has a deadline
(default 30 s) counted from when it was queued, so time waiting for a worker counts. A page
with any error returns no cursor (``next_after`` None, ``errors`` non-empty): the caller
retries it, and a retry re-authenticates stored receipts without asking the provider again.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from effectgate._core.runs import (
    ProviderReceipt,
    RunCallKind,
    RunCallRecord,
    check_cursor,
    check_run_id,
    check_scope,
)
from effectgate.errors import ConfigError, EffectgateError, RunNotFound, RunNotSealed
from effectgate.store.roles import Store

__all__ = ["ProviderPage", "ProviderReconciler"]

log = logging.getLogger("effectgate.provider_recovery")

Lookup = Callable[[str, RunCallRecord], ProviderReceipt | None]
Authenticate = Callable[[RunCallRecord, ProviderReceipt], None]

#: The longest one call's reconciliation may take, queue wait included (seed 004).
MAX_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class ProviderPage:
    """What one page observed (not what it newly committed).

    ``scanned``: calls in the page; ``terminal``: model calls with an authenticated receipt
    (new or stored); ``unresolved``: model calls without a return or a receipt (a miss);
    ``tool_calls``: left to effect recovery; ``returned``: model calls with a local return;
    ``disagreements``: model calls holding more than one receipt; ``errors``: why a call
    could not be reconciled (then ``next_after`` is None).
    """

    scanned: int = 0
    terminal: int = 0
    unresolved: int = 0
    tool_calls: int = 0
    returned: int = 0
    disagreements: int = 0
    next_after: str | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {
            "scanned": self.scanned,
            "terminal": self.terminal,
            "unresolved": self.unresolved,
            "tool_calls": self.tool_calls,
            "returned": self.returned,
            "disagreements": self.disagreements,
            "next_after": self.next_after,
            "errors": list(self.errors),
        }


class ProviderReconciler:
    """Pages through a sealed run's model calls and keeps authenticated provider receipts."""

    def __init__(
        self,
        store: Store,
        *,
        lookup: Lookup,
        authenticate: Authenticate,
        concurrency: int = 4,
        timeout: float = MAX_TIMEOUT,
        actor: str = "system:provider-reconciler",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(lookup) or not callable(authenticate):
            raise ConfigError("a provider reconciler needs lookup and authenticate hooks")
        if type(concurrency) is not int or not 1 <= concurrency <= 64:
            raise ConfigError("concurrency must be an integer from 1 to 64")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise ConfigError(f"timeout must be from 0 to {MAX_TIMEOUT} seconds")
        self.store, self.lookup, self.authenticate = store, lookup, authenticate
        self.concurrency, self.timeout, self.actor, self.clock = concurrency, timeout, actor, clock

    def reconcile_page(
        self, run_id: str, *, scope: str = "default", after: str | None = None, limit: int = 100
    ) -> ProviderPage:
        """One page of the sealed run's calls with ``slot > after``. Start each pass with
        ``after=None`` and follow ``next_after`` until it is None; revisit unresolved calls
        on a later pass (a cursor never proves they finished)."""
        scope, run_id = check_scope(scope), check_run_id(run_id)
        after, limit = check_cursor(after, limit, most=1000)
        run = self.store.get_run(scope, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in scope {scope!r}")
        if run.seal is None:
            raise RunNotSealed(f"run {run_id!r} is not sealed: reconcile a sealed run only")
        calls = self.store.list_run_calls(scope, run_id, after=after, limit=limit)
        stored: dict[str, list[ProviderReceipt]] = {}
        for slot, receipt in self.store.provider_receipts(scope, run_id):
            stored.setdefault(slot, []).append(receipt)
        counts = {"terminal": 0, "unresolved": 0, "tool_calls": 0, "returned": 0}
        errors: list[str] = []
        ask: list[RunCallRecord] = []
        for record in calls:
            slot = record.call.slot
            if record.call.kind is RunCallKind.TOOL:
                counts["tool_calls"] += 1
            elif record.completion is not None:
                counts["returned"] += 1
            elif slot in stored:
                # Re-authenticate what is kept; the provider is not asked again.
                try:
                    for receipt in stored[slot]:
                        self.authenticate(record, receipt)
                    counts["terminal"] += 1
                except EffectgateError as exc:
                    errors.append(f"{slot}: stored receipt not authenticated: {exc.message}")
            else:
                ask.append(record)
        for record, outcome in self._ask_all(scope, ask):
            slot = record.call.slot
            if isinstance(outcome, str):
                errors.append(f"{slot}: {outcome}")
            elif outcome is None:
                counts["unresolved"] += 1
            else:
                try:
                    self._adopt(scope, record, outcome)
                    counts["terminal"] += 1
                except EffectgateError as exc:
                    errors.append(f"{slot}: receipt refused: {exc.message}")
        in_page = {r.call.slot for r in calls}
        disagreements = sum(
            1
            for slot, rs in _group(self.store.provider_receipts(scope, run_id)).items()
            if len(rs) > 1 and slot in in_page
        )
        full = len(calls) == limit
        return ProviderPage(
            scanned=len(calls),
            disagreements=disagreements,
            next_after=(calls[-1].call.slot if full and calls else None) if not errors else None,
            errors=tuple(errors),
            **counts,
        )

    def _adopt(self, scope: str, record: RunCallRecord, receipt: ProviderReceipt) -> None:
        self.authenticate(record, receipt)
        # The journal as it is now: a local return may have arrived since the lookup. The
        # store checks it again inside the transaction that keeps the receipt.
        current = self.store.get_run_call(scope, record.call.run_id, record.call.slot)
        if current is None:  # unreachable: a sealed run's calls are never deleted
            raise RunNotFound(f"call in slot {record.call.slot!r} vanished")
        self.store.put_provider_receipt(
            scope, record.call.run_id, record.call.slot, receipt, now=self.clock(), actor=self.actor
        )

    def _ask_all(
        self, scope: str, records: list[RunCallRecord]
    ) -> list[tuple[RunCallRecord, str | ProviderReceipt | None]]:
        """Each lookup in a worker, each with its deadline from when it was queued. A result
        that comes too late is dropped (a string says why), never stored."""
        if not records:
            return []
        pool = cf.ThreadPoolExecutor(self.concurrency, thread_name_prefix="provider-recovery")
        queued = time.monotonic()
        deadline = queued + self.timeout

        def one(record: RunCallRecord) -> tuple[str | ProviderReceipt | None, float]:
            if time.monotonic() > deadline:
                return f"timed out after {self.timeout:g}s waiting for a worker", 0.0
            try:
                found = self.lookup(scope, record)
            except Exception as exc:  # the hook's failure is this call's error, not the page's
                return f"lookup failed: {type(exc).__name__}: {exc}", 0.0
            if found is not None and not isinstance(found, ProviderReceipt):
                return "lookup returned something that is not a ProviderReceipt", 0.0
            return found, time.monotonic()

        futures = [(r, pool.submit(one, r)) for r in records]
        out: list[tuple[RunCallRecord, str | ProviderReceipt | None]] = []
        try:
            for record, future in futures:
                left = deadline - time.monotonic()
                try:
                    result, answered = future.result(timeout=max(left, 0.0))
                except cf.TimeoutError:
                    future.cancel()
                    result, answered = f"timed out after {self.timeout:g}s", 0.0
                if not isinstance(result, str) and answered > deadline:
                    result = f"answered after the {self.timeout:g}s deadline; not adopted"
                out.append((record, result))
        finally:
            # A lookup still running is abandoned: its answer is never read.
            pool.shutdown(wait=False, cancel_futures=True)
        return out


def _group(pairs: list[tuple[str, ProviderReceipt]]) -> dict[str, list[ProviderReceipt]]:
    out: dict[str, list[ProviderReceipt]] = {}
    for slot, receipt in pairs:
        out.setdefault(slot, []).append(receipt)
    return out
