"""What a seed drove and which faults it injected, counted per step (``effectgate simulate``'s
summary, issue 38 item 8).

Generic, so a new actor shows up with no edit here: each step an actor runs counts once under
the actor's ``name`` (a capability or a door); an actor may also offer ``counters()``, read at
the end of the seed, whose keys count beside its name (``http=3``) or, written ``fault:NAME``,
as faults (``fault:venue_timeout``). The core workload's step kinds are labelled below; a core
kind missing from the table counts under its own name. The counts come from the seeded
schedule only, so they are the same on every replay (they are not part of the digest).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CORE", "FAULT", "count_final", "count_step"]

#: The prefix of a counter key that names a fault.
FAULT = "fault:"

#: The core workload's step kinds: the capability or door each drives, or the fault it injects.
CORE: Mapping[str, str] = {
    "new": "gate",
    "retry": "gate",
    "conflict": "gate",
    "dispatch-held": "gate",
    "twin": "breaker",
    "reset-breaker": "breaker",
    "approve": "approvals",
    "approve-stale": "approvals",
    "refuse": "approvals",
    "expire": "approvals",
    "kill": "kill",
    "release": "kill",
    "shadow-on": "shadow",
    "shadow-off": "shadow",
    "reconcile": "reconcile",
    "tick": "clock",
    "jump": FAULT + "clock_jump",
    "crash": FAULT + "crash",
    "lose-reply": FAULT + "lost_reply",
    "lose-commit": FAULT + "lost_commit",
    "read-lag": FAULT + "read_lag",
    "honour-key": FAULT + "keys_ignored",
    "inject": FAULT + "injected_record",
    # Arming a ledger fault; the ones that fire count apart (``ledger_busy``, ...).
    "ledger-fault": FAULT + "ledger_armed",
}


def _add(drove: Counter[str], faults: Counter[str], key: str, n: int = 1) -> None:
    if key.startswith(FAULT):
        faults[key[len(FAULT) :]] += n
    else:
        drove[key] += n


def count_step(drove: Counter[str], faults: Counter[str], kind: str, actor: Any | None) -> None:
    """Count one step of ``kind`` (``actor``: the actor that offers it, None for the core)."""
    _add(drove, faults, CORE.get(kind, kind) if actor is None else str(actor.name))


def count_final(drove: Counter[str], faults: Counter[str], actors: Iterable[Any]) -> None:
    """Add each actor's own ``counters()``, if it has any, at the end of a seed."""
    for actor in actors:
        counters = getattr(actor, "counters", None)
        if counters is None:
            continue
        for key, n in sorted(counters().items()):
            _add(drove, faults, str(key), int(n))
