"""Shared builders for the run-call tests (not a test module)."""

from __future__ import annotations

import hashlib
from decimal import Decimal

from effectgate import (
    Gate,
    LimitPolicy,
    PolicySet,
    ProviderOutcome,
    ProviderReceipt,
    RunCall,
    RunCompletion,
)
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import default_registry
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock

SCOPE = "default"
RUN = "run-1"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tool_call(
    slot: str, call_id: str | None = None, *, run: str = RUN, deadline: float | None = None
) -> RunCall:
    return RunCall(
        run_id=run,
        slot=slot,
        call_id=call_id or f"{slot}-c1",
        kind="tool",  # type: ignore[arg-type]
        request_digest=digest(f"args of {slot}"),
        request_bytes=42,
        tool="place_order",
        deadline=deadline,
    )


def model_call(slot: str, call_id: str | None = None, *, run: str = RUN) -> RunCall:
    return RunCall(
        run_id=run,
        slot=slot,
        call_id=call_id or f"{slot}-c1",
        kind="model",  # type: ignore[arg-type]
        request_digest=digest(f"prompt of {slot}"),
        request_bytes=1200,
        provider="acme-llm",
        model="acme-large-2",
    )


def completion(text: str = "result", tokens: int | None = 17) -> RunCompletion:
    return RunCompletion(digest(text), len(text), tokens)


def receipt(
    call: RunCall,
    outcome: str = "succeeded",
    *,
    result: str = "result",
    proof: str = "proof-1",
    observed_at: float = 1_000_100.0,
) -> ProviderReceipt:
    return ProviderReceipt(
        outcome=ProviderOutcome(outcome),
        provider=str(call.provider),
        model=str(call.model),
        request_digest=call.request_digest,
        provider_ref=f"req_{call.slot}",
        proof_digest=digest(proof),
        observed_at=observed_at,
        result_digest=digest(result) if outcome == "succeeded" else None,
        reported_tokens=None,
    )


def gate_for(store: Store, clock: ManualClock | None = None) -> tuple[Gate, CountingAdapter]:
    venue = PaperVenue()
    adapter = CountingAdapter(PaperAdapter(venue))
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": adapter},
        policy=PolicySet(
            {
                "submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900")),
                "cancel_order": LimitPolicy(),
            }
        ),
        clock=clock or ManualClock(),
    )
    return gate, adapter
