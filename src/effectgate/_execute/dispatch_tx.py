"""The dispatch stage: a ``validated`` row through the pipeline's checks and the dispatching
transaction, short of the venue call.

:meth:`effectgate.Gate._dispatch` runs the checks that need its view (a continuation's
dispatcher, the speculation commit check) and hands the rest here. This module writes
``submitted`` only in the transaction that checks the guard (kill switch, breaker, envelope,
approvals) and the in-transaction checks (invariants 3, 7); the store's compare-and-set decides
who sends (invariant 1). It returns a :class:`Dispatched` for the gate to apply, and never
imports the gate or calls the venue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from effectgate._core.controls import ApprovalRules, BreakerConfig, Verdict
from effectgate._core.effects import is_continuation_id
from effectgate._core.intent import ActionClass
from effectgate._core.states import State
from effectgate._execute.alerts import AlertSink
from effectgate._execute.continuation_budget import continuation_budget_check
from effectgate._execute.intake import submit_guard
from effectgate._execute.predispatch import (
    DispatchContext,
    Pipeline,
    Refusal,
    apply_refusal,
    run_in_tx,
)
from effectgate._execute.record import after_journal, after_lost_commit, explain
from effectgate.errors import CommitOutcomeUnknown, DispatchRefused, StaleState
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["Dispatched", "commit_dispatch", "refused_before_tx"]

# The gate's logger: an after-commit hook's error reads as the gate's, as it did before.
log = logging.getLogger("effectgate.executor")


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What the dispatching transaction decided, for the gate to apply."""

    row: Operation
    #: The verdict of the transaction this call ran to its end (None: it ran none).
    verdict: Verdict | None = None
    #: ``send``: this process moved the row to ``submitted`` and makes the one venue call;
    #: ``reread``: another process moved it first, read it as it stands; ``done``: ``row``.
    then: Literal["send", "reread", "done"] = "done"


def refused_before_tx(
    store: Store,
    clock: Callable[[], float],
    pipeline: Pipeline,
    row: Operation,
    action_class: ActionClass,
    dispatcher: str | None,
) -> Operation | None:
    """The pipeline's stages before the transaction (authorisation, preconditions): the row as
    a refusal left it, or None when none refused (docs/continuations.md)."""
    refusal = pipeline.before_tx(DispatchContext(row, action_class, store, clock(), dispatcher))
    if refusal is None:
        return None
    denied = apply_refusal(store, row, refusal, now=clock(), stage="before", pipeline=pipeline)
    return explain(store, denied)


def commit_dispatch(
    store: Store,
    clock: Callable[[], float],
    row: Operation,
    action_class: ActionClass,
    *,
    pipeline: Pipeline,
    breakers: Mapping[str, BreakerConfig],
    approvals: ApprovalRules,
    alerts: AlertSink | None,
    correlation_id: str | None,
    audit: dict[str, object],
) -> Dispatched:
    """The transaction that writes ``submitted`` (``audit`` on its entry), then the trip alerts
    and the pipeline's after-commit hooks; a continuation is charged to its original's run."""
    scope, operation_id = row.scope, row.operation_id
    guard = submit_guard(
        action_class, row.effect, correlation_id, breakers=breakers, approvals=approvals
    )
    now = clock()
    checks = pipeline.in_tx
    if is_continuation_id(operation_id):
        # Charged separately, to its original's run, in this transaction.
        checks = (*checks, continuation_budget_check)
    try:
        if checks:
            done = store.dispatch(
                scope,
                operation_id,
                now=now,
                guard=guard,
                audit=audit,
                checks=(lambda tx, r, at: run_in_tx(checks, tx, r, at),),
            )
        else:
            done = store.dispatch(scope, operation_id, now=now, guard=guard, audit=audit)
    except DispatchRefused as exc:
        # An admission check refused inside the transaction, which rolled back: apply its
        # move instead (docs/continuations.md).
        answer = exc.refusal
        if not isinstance(answer, Refusal):
            raise
        refused = apply_refusal(
            store, row, answer, now=clock(), stage="admission", pipeline=pipeline
        )
        return Dispatched(explain(store, refused))
    except StaleState:
        # Another process won the compare-and-set; it alone dispatches (invariant 1).
        return Dispatched(row, then="reread")
    except CommitOutcomeUnknown:
        return Dispatched(after_lost_commit(store, scope, operation_id))
    after_journal(alerts, guard.action, done, now)
    moved = done.row
    if moved.state is not State.SUBMITTED:
        return Dispatched(moved, done.verdict)
    for hook in pipeline.after_commit:
        try:
            hook(moved)
        except Exception as exc:  # a notification must not stop a committed dispatch
            log.error("after-commit hook for %s raised %s", moved.op_key, type(exc).__name__)
    return Dispatched(moved, done.verdict, then="send")
