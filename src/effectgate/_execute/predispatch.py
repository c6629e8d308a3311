"""The pre-dispatch pipeline: every check that runs just before an adapter is called.

One fixed order (docs/continuations.md, "Authorisation at the write boundary"):

1. **authorisation** of the current grant (a host hook; a grant may have been revoked since
   approval). No hook: the policy and controls already in effectgate decide. A hook that raises
   denies.
2. **preconditions** (approval preconditions; issue 18 plugs its checks in here).
3. **the speculation verdict** (``before_dispatch``, docs/speculation.md).
4. **the dispatch transaction**: the ``validated -> submitted`` compare-and-set, with the kill
   switch, breakers and envelopes (already in the store) and every :data:`InTxCheck` (value and
   count budgets, grant fences) in the SAME transaction, so concurrent processes cannot overdraw.

Stages 1-3 run before the transaction and only read. Each is fenced against a change before the
commit: the compare-and-set refuses a row that left ``validated`` meanwhile, and anything a stage
decided from other state (a grant, a budget) is re-checked by an :data:`InTxCheck` inside the
transaction when it can change concurrently. A refusal applies one of the last-moment moves of
docs/speculation.md: ``validated -> rejected`` with the reason, or a new approval round.

Every path that dispatches runs this pipeline through :meth:`Gate._dispatch`: the first submit,
a dispatch after approval, the standing dispatcher of released rows, and continuations. A gate
with no hook, preconditions or in-transaction checks configured skips it entirely (the first
submit keeps its one-transaction path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from effectgate._core.intent import ActionClass, Tier
from effectgate._core.policy import Decision
from effectgate._core.states import State
from effectgate._execute.adapter import ADAPTER_CALL_CEILING
from effectgate.errors import StaleState
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = [
    "ADAPTER_CALL_CEILING",
    "ADMITTING",
    "Admission",
    "DispatchContext",
    "InTxCheck",
    "Pipeline",
    "Refusal",
    "Stage",
    "apply_refusal",
    "at_least",
]

log = logging.getLogger("effectgate.predispatch")


@dataclass(frozen=True, slots=True)
class Refusal:
    move: Literal["reject", "reapprove"]  # validated -> rejected | validated -> awaiting_approval
    code: str  # stable error/outcome code, e.g. "grant_revoked"
    reason: str  # one printable line for the audit and the caller


@dataclass(frozen=True, slots=True)
class DispatchContext:  # what a stage may read; stages never write
    entry: Operation  # the validated row about to be dispatched
    action_class: ActionClass
    store: Store
    now: float
    dispatcher: str | None  # principal/process dispatching (None: the gate itself)
    #: Who proposes it, when known without the ledger (an evaluation: no row was journalled).
    proposer: str | None = None


Stage = Callable[[DispatchContext], Refusal | None]  # runs BEFORE the dispatch transaction


@dataclass(frozen=True, slots=True)
class Admission:
    """A continuation the continuation service admitted and is journalling now: the one id in
    the reserved namespace ``Gate.submit`` accepts, the lowest tier it may run at, and who may
    neither approve nor dispatch it (the original's proposer and dispatchers, its authoriser)."""

    operation_id: str
    min_tier: str
    excluded: tuple[str, ...]


#: Set only by the continuation service around its own ``Gate.submit`` call.
ADMITTING: ContextVar[Admission | None] = ContextVar("effectgate_admitting", default=None)
InTxCheck = Callable[[SharedTx, Operation, float], Refusal | None]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """The configured checks, in the fixed order. Empty: the dispatch path is unchanged."""

    #: The host's authorisation hook (stage 1); None: effectgate's own policy and controls.
    authorise: Stage | None = None
    #: Stage 2, in order.
    preconditions: tuple[Stage, ...] = ()
    #: Checks about a row's approvals (an approver revoked since, an approver's role, the
    #: state an approval was bound to), run after ``authorise`` and before ``preconditions``.
    #: A row its first submit sends had no approval, so these never move that submit off its
    #: one-transaction path (they do not make the pipeline :attr:`active`).
    approved: tuple[Stage, ...] = ()
    #: Run inside the dispatch transaction, in order, after the controls' verdict.
    in_tx: tuple[InTxCheck, ...] = ()
    #: Run once a dispatch transaction committed ``submitted``, before the adapter is called
    #: (e.g. delivering an alert the transaction recorded); one that raises is logged only.
    after_commit: tuple[Callable[[Operation], None], ...] = ()
    #: Approval round opened by a ``reapprove`` refusal.
    reapprove_required: int = 1
    reapprove_ttl: float = 86400.0

    @property
    def active(self) -> bool:
        """Whether a first submit must stop at ``validated`` so the stages run before it."""
        return self.authorise is not None or bool(self.preconditions) or bool(self.in_tx)

    @property
    def checks_before_tx(self) -> bool:
        """Whether :meth:`before_tx` has anything to run on a dispatch of a validated row."""
        return self.authorise is not None or bool(self.approved) or bool(self.preconditions)

    def before_tx(self, ctx: DispatchContext) -> Refusal | None:
        """Stages 1 and 2. A stage that raises denies (no permissive fallback)."""
        stages: Sequence[tuple[str, Stage]] = (
            ([("authorise", self.authorise)] if self.authorise is not None else [])
            + [("approval", s) for s in self.approved]
            + [("precondition", s) for s in self.preconditions]
        )
        for name, stage in stages:
            try:
                refusal = stage(ctx)
            except Exception as exc:  # a configured hook that errors denies
                log.error(
                    "%s hook for %s raised %s; dispatch denied",
                    name,
                    ctx.entry.op_key,
                    type(exc).__name__,
                )
                return Refusal(
                    "reject",
                    f"{name}_hook_failed",
                    f"the {name} hook failed ({type(exc).__name__}); denied, never allowed",
                )
            if refusal is not None:
                if not isinstance(refusal, Refusal):
                    return Refusal(
                        "reject",
                        f"{name}_hook_failed",
                        f"the {name} hook returned {type(refusal).__name__}, not a Refusal",
                    )
                return refusal
        return None


def run_in_tx(
    checks: Sequence[InTxCheck], tx: SharedTx, row: Operation, now: float
) -> Refusal | None:
    """The in-transaction checks; one that raises denies."""
    for check in checks:
        try:
            refusal = check(tx, row, now)
        except Exception as exc:
            if isinstance(exc, StaleState):
                raise
            log.error("in-transaction check for %s raised %s", row.op_key, type(exc).__name__)
            return Refusal(
                "reject",
                "admission_check_failed",
                f"an admission check failed ({type(exc).__name__}); denied",
            )
        if refusal is not None:
            return refusal
    return None


def apply_refusal(
    store: Store, row: Operation, refusal: Refusal, *, now: float, stage: str, pipeline: Pipeline
) -> Operation:
    """Apply a refusal's last-moment move; a row that moved meanwhile is returned as it is."""
    reason = f"{refusal.code}: {refusal.reason}"
    try:
        if refusal.move == "reapprove":
            return store.reopen_approval(
                row.scope,
                row.operation_id,
                reason=reason,
                required=pipeline.reapprove_required,
                ttl=pipeline.reapprove_ttl,
                by=f"predispatch:{stage}",
                now=now,
            )
        return store.transition(
            row.scope,
            row.operation_id,
            State.VALIDATED,
            State.REJECTED,
            now=now,
            detail=reason,
            audit={"by": f"predispatch:{stage}", "code": refusal.code},
        )
    except StaleState:
        current = store.get(row.scope, row.operation_id)
        return current if current is not None else row


def at_least(decision: Decision, floor: Tier) -> Decision:
    """A continuation runs at no lower tier than its original."""
    order = list(Tier)
    if not decision.allowed or order.index(decision.tier) >= order.index(floor):
        return decision
    return Decision(
        True,
        floor,
        f"{decision.reason}; raised to {floor.value}: a continuation runs at no lower tier "
        "than its original",
        decision.policy_version,
    )
