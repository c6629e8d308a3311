"""The Python an action cannot do without, with no glue around it: the lean path's half.

What is left when everything that is not a guarantee's own work is stripped: the strict parse
and validation of the intent, the policy's decision, the snapshot and effect encoded, the
journal's audit entry encoded and digested, the dispatch id, the venue's answer as a dict entry
with a minted id, the request digest, the receipt's audit entry encoded and digested. The link
of each entry to the chain is left to the replayed SQL, which makes it in both dialects
(SQLite's registered chain function, PostgreSQL's statement). Not done here, though the real
path must: the row objects handed back, the idempotency answers, the adapter contract, locks,
error paths. Timed with the replayed SQL, it is optimistic: an implementation that issues the
same SQL with the same parser and policy does at least this work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orjson import Fragment

from effectgate._evidence.audit import content_digest
from effectgate._core.receipts import dispatch_id, request_digest
from effectgate.bench.b1 import INTENT_BODY
from effectgate.store.base import dumps

PATH = ["proposed", "validated", "submitted"]


class LeanAction:
    """One gate's registry and policy, and a counter for the venue's ids, for :meth:`journal` and
    :meth:`receipt` (call them in that order, once per action)."""

    def __init__(self, gate: Any) -> None:
        self.registry, self.policy = gate.registry, gate.policy
        self.cls = self.registry.get("submit_order")
        self.serial = 0
        self.venue: dict[str, tuple[str, str]] = {}

    def journal(self, op: str) -> None:
        """Parse, decide, encode and digest what the journal's transaction writes."""
        now = time.time()
        parsed = self.registry.parse("submit_order", INTENT_BODY)
        decision = self.policy.decide(self.cls, parsed)
        intent = dumps(parsed.snapshot)
        self.effect = dumps(parsed.effect)
        self.fingerprint, self.now = parsed.fingerprint, now
        self.did = dispatch_id("default", op, now)
        detail = dumps(
            {
                "state": "submitted",
                "path": PATH,
                "intent": Fragment(intent),
                "fingerprint": parsed.fingerprint,
                "action": "submit_order",
                "tier": decision.tier.value,
                "reason": decision.reason,
                "policy_version": "bench",
                "dispatch_id": self.did,
            }
        )
        self.digests = [content_digest(3, now, "default", op, "transition", detail)]

    def receipt(self, op: str) -> None:
        """The venue's answer and what the receipt's transaction writes."""
        self.serial += 1
        venue_id = f"V-{self.serial:06d}"
        self.venue[venue_id] = (op, self.effect)
        digest = request_digest(f"default:{op}", "submit_order", self.fingerprint)
        detail = dumps(
            {
                "state": "acknowledged",
                "outcome": "acknowledged",
                "venue_id": venue_id,
                "dispatch_id": self.did,
                "request_digest": digest,
                "detail": {},
            }
        )
        self.digests.append(content_digest(3, self.now, "default", op, "transition", detail))


Figure = tuple[float, float, float]


def round_line(k: int, f1: Figure, f2: Figure, sides: dict[str, Figure], cpu: str) -> str:
    """One round's line: each figure as ``wall (<cpu>user-or-client sSYS-or-server)`` and each
    side's ratio to the mean of the round's two floors."""

    def fmt(x: Figure) -> str:
        return f"{x[0]:.0f} ({cpu}{x[1]:.0f} s{x[2]:.0f})"

    floor = (f1[0] + f2[0]) / 2
    rest = "  ".join(f"{name} {fmt(x)} {floor / x[0]:.2f}x" for name, x in sides.items())
    return f"round {k}: floor {fmt(f1)} / {fmt(f2)}  {rest}"


def check_acknowledged(done: dict[str, int], expected: int) -> None:
    """Every replayed action wrote its row and moved it on: none was skipped as a conflict."""
    for prefix, count in done.items():
        if count != expected:
            raise SystemExit(f"{prefix}: {count} acknowledged rows, expected {expected}")


def run_round(
    k: int,
    measure: Callable[[Callable[[], None]], Figure],
    sides: dict[str, Callable[[], None]],
    cpu: str,
) -> None:
    """Time ``sides`` in order (``floor`` first, ``floor2`` last) and print the round's line;
    ``cpu`` labels ``measure``'s second figure (``u`` user, ``c`` this process)."""
    figures = {name: measure(fn) for name, fn in sides.items()}
    f1, f2 = figures.pop("floor"), figures.pop("floor2")
    print(round_line(k, f1, f2, figures, cpu), flush=True)
