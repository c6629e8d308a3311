"""Approvals bound to preconditions: the venue state an approval was given against.

When an approval is given for a class whose adapter can read its precondition
(:class:`~effectgate._execute.adapter.ReadsPrecondition`), :func:`bind_precondition` reads the
resource state through the adapter and records its fingerprint on that approval (columns of
the approval, written with a chained ``precondition_bound`` audit entry in one transaction).
Just before dispatch, :func:`precondition_check` (a pre-dispatch stage, after authorisation)
reads the approvals' bindings and the state again: a fingerprint different from any
approval's binding, or a state that cannot be read, refuses the dispatch with a new approval
round (``reapprove``), so a human looks again at the world as it now is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from effectgate._core.intent import Registry
from effectgate._execute.adapter import Adapter, ReadsPrecondition
from effectgate._execute.predispatch import DispatchContext, Refusal, Stage
from effectgate.errors import EffectgateError
from effectgate.store.roles import Store

__all__ = ["BOUND_ENTRY", "bind_precondition", "precondition_check", "precondition_fingerprint"]

#: The audit entry that records a binding.
BOUND_ENTRY = "precondition_bound"


def precondition_fingerprint(state: Mapping[str, object]) -> str:
    text = json.dumps(state, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _reader(
    adapters: Mapping[str, Adapter], registry: Registry, action: str
) -> ReadsPrecondition | None:
    adapter: object = adapters.get(registry.get(action).adapter)
    # Wrappers (timing, counting) hold the real adapter as ``inner``.
    for _ in range(4):
        if isinstance(adapter, ReadsPrecondition) or not hasattr(adapter, "inner"):
            break
        adapter = adapter.inner
    return adapter if isinstance(adapter, ReadsPrecondition) else None


def bind_precondition(
    store: Store,
    adapters: Mapping[str, Adapter],
    registry: Registry,
    scope: str,
    operation_id: str,
    *,
    approver: str,
    now: float,
    timeout: float = 5.0,
) -> str | None:
    """Read and record the precondition an approval is given against, on that approval; its
    fingerprint, or None when the class's adapter reads none. A failed read is bound as
    unread (the check before dispatch then asks again)."""
    row = store.get(scope, operation_id)
    if row is None:
        return None
    reader = _reader(adapters, registry, row.action)
    if reader is None:
        return None
    try:
        state = reader.read_precondition(row.action, row.effect, timeout=timeout)
    except (EffectgateError, OSError) as exc:
        store.bind_approval_precondition(
            scope, operation_id, approver=approver, fingerprint=None,
            detail={"error": str(exc)[:500]}, now=now,
        )  # fmt: skip
        return None
    fingerprint = precondition_fingerprint(state)
    store.bind_approval_precondition(
        scope, operation_id, approver=approver, fingerprint=fingerprint,
        detail={"state": dict(state)}, now=now,
    )  # fmt: skip
    return fingerprint


def _bound(store: Store, scope: str, operation_id: str) -> list[str | None]:
    """The fingerprints bound to this round's approvals (None: that approval's read failed);
    empty: no approval of this round bound one. Read from the approvals' own columns (a new
    round deletes the earlier round's approvals, and their bindings with them)."""
    return [
        a.precondition
        for a in store.list_approvals(scope, operation_id)
        if a.verdict == "approve" and a.precondition_at is not None
    ]


def precondition_check(
    adapters: Mapping[str, Adapter], registry: Registry, *, timeout: float = 5.0
) -> Stage:
    """The precondition stage: the bound state must still hold, or the approval is asked again."""

    def check(ctx: DispatchContext) -> Refusal | None:
        entry = ctx.entry
        reader = _reader(adapters, registry, entry.action)
        if reader is None:
            return None
        bound = _bound(ctx.store, entry.scope, entry.operation_id)
        if not bound:
            return None  # no approval bound a precondition (an auto-approved action)
        if any(fp is None for fp in bound):
            return Refusal("reapprove", "precondition_unbound", "the approval's state was unread")
        try:
            now_state = reader.read_precondition(entry.action, entry.effect, timeout=timeout)
        except (EffectgateError, OSError) as exc:
            return Refusal("reapprove", "precondition_unreadable", f"cannot re-read: {exc}"[:500])
        current = precondition_fingerprint(now_state)
        # Every approver's binding must still hold: each saw the world as it then was.
        changed = sorted({fp for fp in bound if fp is not None and fp != current})
        if changed:
            fingerprint = changed[0]
            return Refusal(
                "reapprove",
                "precondition_changed",
                f"the state approved against changed ({fingerprint[:19]} -> {current[:19]}): "
                f"now {json.dumps(dict(now_state), sort_keys=True, default=str)[:300]}",
            )
        return None

    return check
