"""Mutations of the MCP gateway (:mod:`effectgate._doors.gateway`), caught by the gateway actor
(:mod:`effectgate._sim.actors.gateway`; the venue models' ``vm_gateway`` sees some too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from effectgate._execute.adapter import Outcome, Receipt, not_sent
from effectgate._sim.actor import Mutation

__all__ = ["GATEWAY"]

F = Callable[..., Any]
_A = "effectgate._doors.gateway._adapter"


def _retry_unknown(original: F) -> F:
    # An upstream call that ended without an answer is sent once more (invariant 9 broken).
    def execute(self: Any, request: Any, *, timeout: float) -> Receipt:
        receipt: Receipt = original(self, request, timeout=timeout)
        if receipt.outcome is Outcome.UNKNOWN:
            receipt = original(self, request, timeout=timeout)
        return receipt

    return execute


def _unknown_as_failed(original: F) -> F:
    # A lost reply or a timeout is settled as not applied, as if nothing had been sent.
    def execute(self: Any, request: Any, *, timeout: float) -> Receipt:
        receipt: Receipt = original(self, request, timeout=timeout)
        if receipt.outcome is Outcome.UNKNOWN:
            return Receipt(Outcome.NOT_APPLIED, proof=not_sent("gateway: no answer"))
        return receipt

    return execute


def _duplicate_key_ignored(original: F) -> F:
    # The transport's mark of a duplicate JSON key is dropped: the call goes through.
    async def _call(gw: Any, who: Any, params: Any) -> Any:
        from effectgate._doors._shared.mcp_screen import REFUSED_META

        meta = {k: v for k, v in (params.meta or {}).items() if k != REFUSED_META}
        return await original(gw, who, params.model_copy(update={"meta": meta or None}))

    return _call


def _duplicates_hidden(original: F) -> F:
    # The upstream's listing keeps one record per key: a second effect is never seen.
    def _records(items: list[Any], reads: Any) -> list[Any]:
        out, seen = [], set()
        for rec in original(items, reads):
            if rec.operation_key not in seen:
                seen.add(rec.operation_key)
                out.append(rec)
        return out

    return _records


GATEWAY: tuple[Mutation, ...] = (
    Mutation(
        "gateway_retries_unknown",
        "1 gateway_upstream_accounted",
        f"{_A}:UpstreamAdapter.execute",
        _retry_unknown,
    ),
    Mutation(
        "gateway_unknown_as_failed",
        "3 gateway_upstream_accounted",
        f"{_A}:UpstreamAdapter.execute",
        _unknown_as_failed,
    ),
    Mutation(
        "gateway_duplicate_key_ignored",
        "6 gateway_hostile_call_refused",
        "effectgate._doors.gateway._server:_call",
        _duplicate_key_ignored,
    ),
    Mutation(
        "gateway_duplicates_hidden", "5 duplicates_reported", f"{_A}:_records", _duplicates_hidden
    ),
)
