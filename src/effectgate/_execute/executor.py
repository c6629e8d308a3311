"""The gate: one intent's route through the stages, each in a module of its own.

:meth:`Gate.submit` reads top to bottom: admit the ids, parse, decide (policy and tier),
plan, journal (:mod:`.intake`); then speculate (:mod:`.speculation`) or dispatch through the
pre-dispatch pipeline and the dispatching transaction (:mod:`.dispatch_tx`); then call the venue
once (:mod:`.call`) and record its answer (:mod:`.record`). The order of durable steps is the
contract: the row reaches ``submitted`` in a committed transaction *before* the adapter is
called (invariant 3), the store's compare-and-set decides who dispatches (invariant 1), and
nothing retries a mutation (invariant 9). An exception, timeout or crash after the journal
leaves the row ``submitted``: uncertain, for the reconciler to settle.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from effectgate._core.controls import ApprovalRules, BreakerConfig, DispatchGuard, Verdict
from effectgate._core.effects import check_compensations, is_continuation_id
from effectgate._core.intent import Registry
from effectgate._core.policy import PolicySet
from effectgate._core.states import State
from effectgate._execute import tracing as _tracing
from effectgate._execute.adapter import Adapter
from effectgate._execute.alerts import AlertSink
from effectgate._execute.call import call_once
from effectgate._execute.continuations import continuation_may_dispatch
from effectgate._execute.dispatch_tx import commit_dispatch, refused_before_tx
from effectgate._execute.evaluate import Evaluator, audit_refusal, check_token, evaluate
from effectgate._execute.intake import (
    RawIntent,
    admission_for,
    check_principal,
    decide,
    journal,
    parse,
    plan,
    submit_guard,
)
from effectgate._execute.minting import operation_id_for
from effectgate._execute.model_change import Seen, note_provenance
from effectgate._execute.predispatch import ADAPTER_CALL_CEILING, InTxCheck, Pipeline, Stage
from effectgate._execute.record import after_journal, after_lost_commit, explain
from effectgate._execute.runs import current_run_call, journal_for
from effectgate._execute.speculation import (
    active_speculation,
    before_dispatch,
    check_speculation,
    speculate,
)
from effectgate.errors import ConfigError, EvaluationTokenRefused, OperationNotFound
from effectgate.store.base import Journal, Operation
from effectgate.store.roles import Store

if TYPE_CHECKING:
    from effectgate._core.evaluation import Evaluation
    from effectgate._core.runs import RunCallRef

__all__ = ["Gate"]


class Gate:
    """What a harness embeds: one object per process, safe to share between threads."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        adapters: Mapping[str, Adapter],
        policy: PolicySet,
        clock: Callable[[], float] = time.time,
        dispatch_timeout: float = 10.0,
        breakers: Mapping[str, BreakerConfig] | None = None,
        approvals: ApprovalRules | None = None,
        alerts: AlertSink | None = None,
        in_flight_grace: float = 2.0,
        authorise: Stage | None = None,
        preconditions: Iterable[Stage] = (),
        admission_checks: Iterable[InTxCheck] = (),
        process_id: str | None = None,
        evaluator: Evaluator | None = None,
    ) -> None:
        missing = sorted({registry.get(n).adapter for n in registry.names()} - set(adapters))
        if missing:
            raise ConfigError(f"action classes name adapters that are not configured: {missing}")
        if dispatch_timeout <= 0:
            raise ConfigError("dispatch_timeout must be positive")
        if dispatch_timeout > ADAPTER_CALL_CEILING:
            raise ConfigError(
                f"dispatch_timeout {dispatch_timeout}s is above the {ADAPTER_CALL_CEILING:g}s "
                "ceiling on any one adapter call"
            )
        check_compensations(
            {
                n: (registry.get(n).effect_class.value, registry.get(n).compensation)
                for n in registry.names()
            }
        )
        #: This process, as the audit names a dispatcher: a continuation excludes it.
        self.process_id = process_id or f"process:{socket.gethostname()}:{os.getpid()}"
        self.store = store
        self.registry = registry
        self.adapters = dict(adapters)
        self.policy = policy
        self.clock = clock
        self.dispatch_timeout = dispatch_timeout
        # Operator configuration: the agent reaches none of it, and nothing here flips a
        # control (that is effectgate.Operator's job, on the operator's credential).
        self.breakers = dict(breakers or {})
        for name in self.breakers:
            registry.get(name)
        self.approvals = approvals or ApprovalRules()
        self.alerts = alerts
        #: Provenances (class, model, harness version) seen: :mod:`.model_change`.
        self._models_seen: Seen = set()
        self.evaluator = evaluator or Evaluator()  # evaluate's token secret, audit limit
        # Speculation (seed 000): the retry horizon is the dispatch timeout plus this grace.
        self.in_flight_grace = in_flight_grace
        check_speculation(
            {n: registry.get(n) for n in registry.names()}, self.adapters, self.horizon
        )
        # The pre-dispatch pipeline (docs/continuations.md); empty: the path is unchanged.
        self.pipeline = Pipeline(
            authorise=authorise,
            preconditions=tuple(preconditions),
            in_tx=tuple(admission_checks),
            reapprove_ttl=self.approvals.ttl,
        )

    @property
    def horizon(self) -> float:
        """The retry horizon: from the last speculation to the end of a dispatch."""
        return self.dispatch_timeout + self.in_flight_grace

    # --- the front door -------------------------------------------------------------------

    def submit(
        self,
        action: str,
        operation_id: str,
        intent: RawIntent,
        *,
        scope: str = "default",
        dispatch: bool = True,
        principal: str | None = None,
        correlation_id: str | None = None,
        run_call: RunCallRef | None = None,
        evaluation_token: str | None = None,
    ) -> Operation:
        """Propose an action under ``operation_id`` and, if policy allows it automatically, run it.

        For a class with ``operation_ids = "minted"``, ``operation_id`` is a request key (or a
        minted id returned earlier) and the returned row carries the minted id (:mod:`.minting`).

        The same id with the same effect payload is a retry: the existing row comes back
        (``replayed=True``) and nothing is sent again. The same id with another payload raises
        :class:`~effectgate.errors.IdempotencyConflict`. Refused input raises
        :class:`~effectgate.errors.IntentError` and writes only an audit line.

        ``principal``: who submits (mapped from the agent credential); it may never approve the
        action. ``correlation_id``: keys a shadowed row to the incumbent's outcome (default:
        the operation id). A row a control holds comes back ``validated`` with ``detail``
        saying why; one in shadow mode comes back ``shadowed``. A ``submitted`` row comes
        back with ``cause`` saying why its outcome is unknown.

        ``run_call`` (default: the harness's :func:`~effectgate.run_call_context`, if any): the
        run call proposing it. The row is then admitted only against that exact, unfinished
        tool call of an unsealed run, in the journal's transaction (docs/runs.md); a replay
        after the seal raises :class:`~effectgate.errors.RunSealed` carrying the row.
        ``evaluation_token`` (:meth:`evaluate`): refused unless what it covers still holds.
        """
        write = journal_for(self.store, run_call or current_run_call())
        admission = admission_for(operation_id)
        # Tracing off (the default) is a plain branch: no span, no attribute dict (tracing).
        traced = _tracing._tracer is not None
        where = (
            {"effectgate.operation_key": f"{scope}:{operation_id}", "effectgate.action": action}
            if traced
            else {}
        )
        store, clock = self.store, self.clock
        if traced:
            with _tracing.span("effectgate.parse", where):
                parsed = parse(self.registry, store, clock, action, operation_id, intent, scope)
        else:
            parsed = parse(self.registry, store, clock, action, operation_id, intent, scope)
        check_principal(principal)
        ac = self.registry.get(action)
        if traced:
            with _tracing.span("effectgate.policy", where):
                decision = decide(self.policy, ac, parsed, admission)
        else:
            decision = decide(self.policy, ac, parsed, admission)
        if ac.model_window is not None:
            note_provenance(store, self._models_seen, ac, parsed, clock, self.alerts)
        recheck = None
        if evaluation_token is not None:
            run = (operation_id, run_call or current_run_call())
            recheck = check_token(
                self, ac, parsed, decision, evaluation_token, scope, principal, run
            )
        # The id to journal under: the caller's, minted now, or a proposal handle (.minting).
        operation_id = operation_id_for(
            store, clock, ac, parsed, decision, scope, operation_id, admission
        )
        spec = active_speculation(self, ac) if ac.speculation else None
        # A speculating class stops at validated: the dry run comes before any dispatch.
        # With a pipeline configured (or a continuation admitted) the row stops at validated
        # and _dispatch sends it, so the pipeline's stages run on the first submit too.
        staged = self.pipeline.active or admission is not None
        send_now = dispatch and spec is None and not staged
        p = plan(
            ac,
            parsed,
            decision,
            scope=scope,
            operation_id=operation_id,
            principal=principal,
            send_now=send_now,
            dispatcher=self.process_id,
        )
        # Only the authenticated submitter is excluded from approving: proposed_by is an
        # audit field the agent writes, and audit fields never influence a decision.
        proposers: tuple[str, ...] = (principal,) if principal else ()
        if admission is not None:
            proposers = tuple(dict.fromkeys((*proposers, *admission.excluded)))

        def guard() -> DispatchGuard:
            g = submit_guard(
                ac,
                parsed.effect,
                correlation_id,
                breakers=self.breakers,
                approvals=self.approvals,
                dispatch=dispatch,
            )
            g.proposers = proposers
            g.recheck = recheck
            return g

        try:
            if traced:
                with _tracing.span("effectgate.journal", where):
                    journalled = journal(write, store, clock, p, guard)
            else:
                journalled = journal(write, store, clock, p, guard)
        except EvaluationTokenRefused as exc:  # the recheck in the journal's transaction
            audit_refusal(self, ac, exc, scope, principal, clock())
            raise
        if journalled is None:
            return after_lost_commit(store, scope, operation_id)
        done, now = journalled
        if spec is not None:
            return self._speculative(done, ac.name, now, dispatch, correlation_id)
        row = done.row
        if not done.created:
            return self._replay(row, dispatch, correlation_id)
        after_journal(self.alerts, ac.name, done, now)
        if row.state is State.SUBMITTED:
            return self._call(row)
        if row.state is State.VALIDATED and dispatch and staged:
            return self._dispatch(scope, operation_id, correlation_id)[0]
        return row

    def evaluate(
        self, action: str, intent: RawIntent, *, scope: str = "default",
        principal: str | None = None, operation_id: str | None = None,
        run_call: RunCallRef | None = None,
    ) -> Evaluation:  # fmt: skip
        """What :meth:`submit` would do with ``intent`` now, read-only, and its token
        (:mod:`.evaluate`); writes nothing but an audit line."""
        run_call = run_call or current_run_call()
        return evaluate(self, action, intent, scope, principal, operation_id, run_call)

    def _replay(self, row: Operation, dispatch: bool, correlation_id: str | None) -> Operation:
        """The same id and payload again: the row as it is, sent only if it waits validated."""
        if self._replay_redispatches(row):
            return self._call(row)
        if row.state is State.VALIDATED and dispatch:
            return _replayed(
                self.dispatch(row.operation_id, scope=row.scope, correlation_id=correlation_id)
            )
        return _replayed(self._explain(row))

    def propose(
        self, action: str, operation_id: str, intent: RawIntent, *, scope: str = "default"
    ) -> Operation:
        """Journal and decide without dispatching (the row ends ``validated`` at most)."""
        return self.submit(action, operation_id, intent, scope=scope, dispatch=False)

    def dispatch(
        self,
        operation_id: str,
        *,
        scope: str = "default",
        correlation_id: str | None = None,
        dispatcher: str | None = None,
    ) -> Operation:
        """Send a ``validated`` operation. Any other state is returned untouched.

        The controls are checked in the transaction that writes ``submitted``: a held row
        comes back ``validated`` (``detail`` says why), a shadowed class's row ``shadowed``.
        """
        return self._dispatch(scope, operation_id, correlation_id, dispatcher)[0]

    def _dispatch(
        self,
        scope: str,
        operation_id: str,
        correlation_id: str | None,
        dispatcher: str | None = None,
    ) -> tuple[Operation, Verdict | None]:
        """:meth:`dispatch`, and the verdict of the dispatching transaction this call ran
        (None: it ran none to its end: the row was not validated, or another process moved
        it first). The standing dispatcher counts by it.

        Every dispatching path comes through here, so the pre-dispatch pipeline runs on each:
        authorisation, preconditions, the speculation verdict, then the dispatch transaction
        with the in-transaction checks (docs/continuations.md); :mod:`.dispatch_tx` runs all
        but the speculation verdict and answers a :class:`~.dispatch_tx.Dispatched`."""
        row = self._row(scope, operation_id)
        if row.state is not State.VALIDATED:
            return self._explain(row), None
        action_class = self.registry.get(row.action)
        if is_continuation_id(operation_id) and not continuation_may_dispatch(
            self, row, dispatcher or self.process_id
        ):
            return self._explain(row), None
        if self.pipeline.checks_before_tx:
            denied = refused_before_tx(
                self.store, self.clock, self.pipeline, row, action_class, dispatcher
            )
            if denied is not None:
                return denied, None
        commit: dict[str, object] | None = None
        if action_class.speculation is not None:
            spec = active_speculation(self, action_class)
            if spec is not None:
                # The commit check; the dispatch's audit entry then carries both keys.
                stopped, commit = before_dispatch(self, row, spec)
                if stopped is not None:
                    return self._explain(stopped), None
        done = commit_dispatch(
            self.store,
            self.clock,
            row,
            action_class,
            pipeline=self.pipeline,
            breakers=self.breakers,
            approvals=self.approvals,
            alerts=self.alerts,
            correlation_id=correlation_id,
            # Who dispatched: a continuation excludes the original's dispatcher.
            audit={**(commit or {}), "dispatcher": dispatcher or self.process_id},
        )
        if done.then == "reread":
            return self.get(operation_id, scope=scope), None
        if done.then == "send":
            return self._call(done.row), done.verdict
        return done.row, done.verdict

    def _speculative(
        self, done: Journal, action: str, now: float, dispatch: bool, correlation_id: str | None
    ) -> Operation:
        """After journalling a speculating class's row: count the arrival (the attempt), dry-run
        a new row at proposal, and dispatch it (the commit check runs in :meth:`_dispatch`)."""
        row = done.row
        attempt = self.store.note_arrival(row.scope, row.operation_id, now=now)
        if not done.created:
            if row.state is State.VALIDATED and dispatch:
                return _replayed(
                    self.dispatch(row.operation_id, scope=row.scope, correlation_id=correlation_id)
                )
            return _replayed(self._explain(row))
        after_journal(self.alerts, action, done, now)
        if row.state in (State.VALIDATED, State.AWAITING_APPROVAL):
            row = speculate(self, row, attempt)[1]
        if row.state is State.VALIDATED and dispatch:
            return self.dispatch(row.operation_id, scope=row.scope, correlation_id=correlation_id)
        return row

    def get(self, operation_id: str, *, scope: str = "default") -> Operation:
        """The row as stored; a ``submitted`` one with ``cause`` read from its audit trail."""
        return self._explain(self._row(scope, operation_id))

    def _row(self, scope: str, operation_id: str) -> Operation:
        row = self.store.get(scope, operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
        return row

    def _replay_redispatches(self, row: Operation) -> bool:
        """Whether a replay of an existing row sends it again: never (invariants 1, 9).

        An uncertain (``submitted``) row is settled by the reconciler, not by a second call.
        """
        return False

    def _explain(self, row: Operation) -> Operation:
        return explain(self.store, row)

    def _call(self, row: Operation) -> Operation:
        """The one outbound call for a row this process moved to ``submitted``."""
        adapter = self.adapters[self.registry.get(row.action).adapter]
        return call_once(self.store, self.clock, adapter, self.dispatch_timeout, row)


def _replayed(row: Operation) -> Operation:
    return replace(row, replayed=True)
