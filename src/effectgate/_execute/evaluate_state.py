"""What an evaluation token covers, read from the store or from the journal's transaction.

:func:`read_state` reads the class's controls, its envelope windows, a run-bound action's
tool slot and leaf value reservation, the caller's grant budgets and the active policy version
over any :class:`StateReads`: the store (evaluate, and the submit's pre-check) or
:class:`~effectgate.store._tx_reads.TxReads` (the recheck inside the journal's transaction,
:func:`recheck`). The same function both times, so a quote and its recheck cannot disagree on
what they measure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from effectgate._core.breaker_signals import WindowCounts
from effectgate._core.budgets import RunBudgetState
from effectgate._core.controls import BreakerConfig, ClassControls, to_micros
from effectgate._core.evaluation import BudgetQuote, StateQuote, stale_reason
from effectgate._core.governed_policy import ActivePolicy
from effectgate._core.grants import Grant
from effectgate._core.intent import ActionClass, Intent
from effectgate._core.policy import Decision, PolicySet
from effectgate._core.run_value import LeafValue
from effectgate._core.runs import RunCallRef
from effectgate._execute.breaker_forecast import forecast
from effectgate._execute.budgets import budget_dispatch_check
from effectgate._execute.intake import decide
from effectgate._execute.predispatch import Pipeline
from effectgate.errors import EvaluationTokenStale
from effectgate.store._tx import SharedTx
from effectgate.store._tx_reads import TxReads
from effectgate.store.base import Operation

__all__ = ["Found", "StateReads", "read_state", "recheck"]


class StateReads(Protocol):
    """The reads a token covers (the store, or a transaction's :class:`TxReads`)."""

    def controls(self, action: str) -> ClassControls: ...
    def dispatch_window(self, action: str, since: float) -> tuple[int, int]: ...
    def run_budget(self, scope: str, run_id: str) -> RunBudgetState | None: ...
    def leaf_value(self, scope: str, run_id: str) -> LeafValue | None: ...
    def get(self, scope: str, operation_id: str) -> Operation | None: ...
    def live_grants_for(self, holder: str, now: float) -> list[Grant]: ...
    def dispatched_micros(self, holder: str, actions: frozenset[str], since: float) -> int: ...
    def active_policy(self) -> ActivePolicy | None: ...
    def breaker_window(self, action: str, since: float, repeat: str) -> WindowCounts: ...
    def seen_targets(self, targets: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...


class Found:
    """What :func:`read_state` found: the quote, and the controls, holds and refusals it was
    read from (``refusals``: the run budget's, ``holds``: the controls'), and the breaker's
    forecast (:func:`~effectgate._execute.breaker_forecast.forecast`; None: no breaker)."""

    __slots__ = ("breaker", "controls", "holds", "quote", "refusals")

    def __init__(
        self,
        quote: StateQuote,
        controls: ClassControls,
        holds: list[str],
        refusals: list[str],
        breaker: dict[str, object] | None = None,
    ) -> None:
        self.quote, self.controls, self.holds, self.refusals = quote, controls, holds, refusals
        self.breaker = breaker


def _controls_digest(ctl: ClassControls) -> str:
    state = ctl.to_dict()
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()


def value_target(ac: ActionClass, parsed: Intent) -> tuple[Decimal | None, str | None]:
    value = ac.value_of(parsed.effect) if ac.value_of else None
    target = parsed.effect.get(ac.target_field) if ac.target_field else None
    return value, None if target is None else str(target)


def _controls(
    reads: StateReads, ac: ActionClass, parsed: Intent, now: float
) -> tuple[ClassControls, list[str], list[BudgetQuote]]:
    """The class's controls as a dispatch would meet them: ``(controls, holds, budgets)``;
    the same rules as the store's in-transaction verdict, over reads only."""
    ctl = reads.controls(ac.name)
    holds: list[str] = []
    if ctl.killed:
        holds.append(
            f"kill switch on {ac.name}" + (f" ({ctl.kill_reason})" if ctl.kill_reason else "")
        )
    if ctl.breaker_open:
        holds.append(f"breaker open on {ac.name} ({ctl.breaker_reason})")
    env = ctl.envelope
    value, target = value_target(ac, parsed)
    breach = env.per_action_breach(value, target)
    if breach:
        holds.append(breach)
    quotes: list[BudgetQuote] = []
    if env.rate_limit is not None and env.rate_interval is not None:
        count, _ = reads.dispatch_window(ac.name, now - env.rate_interval)
        quotes.append(BudgetQuote("envelope.rate", env.rate_limit, count, 1, "dispatches"))
    if env.exposure_limit is not None and env.exposure_window is not None:
        _, used = reads.dispatch_window(ac.name, now - env.exposure_window)
        micros = to_micros(value) if value is not None else None
        if micros is None:
            holds.append("the value cannot be measured, so the exposure window cannot be charged")
        quotes.append(
            BudgetQuote(
                "envelope.exposure", to_micros(env.exposure_limit), used, micros or 0, "micros"
            )
        )
    holds += [
        f"{q.name}: {q.reserve} would not fit ({q.limit - q.used} left)"
        for q in quotes
        if q.left < 0
    ]
    return ctl, holds, quotes


def _run_budget(
    reads: StateReads,
    ac: ActionClass,
    parsed: Intent,
    run: tuple[str, str, RunCallRef | None],
    pipeline: Pipeline,
    now: float,
) -> tuple[list[BudgetQuote], list[str]]:
    """A run-bound action's tool slot (charged once per operation id, at its first admission),
    its run's deadline and, where the gate charges value at dispatch
    (:func:`~effectgate._execute.budgets.budget_dispatch_check`), the value its run's leaf
    reservation would be charged: ``(quotes, refusals)``."""
    scope, op_id, run_call = run
    state = reads.run_budget(scope, run_call.run_id) if run_call is not None else None
    if state is None or run_call is None:
        return [], []
    refusals: list[str] = []
    budget = state.budget
    if budget.deadline is not None and now >= budget.deadline:
        refusals.append(f"budget_exceeded: run {state.run_id!r} is past its deadline (deadline)")
    quotes: list[BudgetQuote] = []
    if budget.max_tool_calls:
        reserve = 0 if reads.get(scope, op_id) is not None else 1
        q = BudgetQuote(
            "run.tool_calls", budget.max_tool_calls, state.usage.tool_calls, reserve, "calls"
        )
        quotes.append(q)
        if q.left < 0:
            refusals.append(f"budget_exceeded: run {state.run_id!r} has no tool call left")
    leaf = reads.leaf_value(scope, run_call.run_id)
    if leaf is not None and budget_dispatch_check in pipeline.in_tx:
        if leaf.settled:
            refusals.append(
                f"budget_exceeded: run {state.run_id!r}'s reservation "
                f"{leaf.reservation_id!r} has settled (settled)"
            )
        elif leaf.value_bound:
            value, _ = value_target(ac, parsed)
            q = BudgetQuote(
                f"reservation.{leaf.plan_id}.{leaf.reservation_id}.value",
                leaf.allocation,
                leaf.spent,
                to_micros(value) if value is not None else 0,
                "micros",
            )
            quotes.append(q)
            if value is None or q.left < 0:
                refusals.append(f"budget_exceeded: {q.name}: {q.reserve} would not fit")
    return quotes, refusals


def _grant_budgets(
    reads: StateReads,
    ac: ActionClass,
    parsed: Intent,
    who: tuple[str, str | None, bool],
    now: float,
) -> list[BudgetQuote]:
    """The aggregate budgets of the caller's live grants that name this class and tenant
    (grants on only): the value the action would draw from each, and what would be left."""
    scope, principal, grants_on = who
    if not grants_on or principal is None:
        return []
    value, _ = value_target(ac, parsed)
    quotes: list[BudgetQuote] = []
    for g in reads.live_grants_for(principal, now):
        s = g.spec
        if s.budget is None or not ({"*", ac.name} & s.actions) or s.scope not in ("*", scope):
            continue
        used = reads.dispatched_micros(principal, s.actions, g.created_at)
        asked = to_micros(value) if value is not None else 0
        quotes.append(
            BudgetQuote(f"grant.{g.grant_id}", to_micros(s.budget), used, asked, "micros")
        )
    return quotes


def read_state(
    reads: StateReads,
    pipeline: Pipeline,
    ac: ActionClass,
    parsed: Intent,
    decision: Decision,
    now: float,
    run: tuple[str, str, RunCallRef | None],
    principal: str | None,
    breakers: Mapping[str, BreakerConfig],
) -> Found:
    """What the token covers, with the controls, holds and run refusals it was read from."""
    ctl, holds, quotes = _controls(reads, ac, parsed, now)
    value, target = value_target(ac, parsed)
    rejected = not decision.allowed or bool(ctl.envelope.per_action_breach(value, target))
    breaker = forecast(reads, breakers, ac, parsed, ctl=ctl, rejected=rejected, now=now)
    run_quotes, refusals = _run_budget(reads, ac, parsed, run, pipeline, now)
    grants_on = pipeline.authorise is not None
    run_quotes += _grant_budgets(reads, ac, parsed, (run[0], principal, grants_on), now)
    active = reads.active_policy()
    quote = StateQuote(
        decision.allowed,
        decision.tier.value,
        decision.policy_version,
        _controls_digest(ctl),
        tuple(quotes + run_quotes),
        None if active is None else active.policy_hash,
        None if breaker is None or ctl.breaker_open else bool(breaker["would_trip"]),
    )
    return Found(quote, ctl, holds, refusals, breaker)


def recheck(
    policy: Callable[[], PolicySet],
    pipeline: Pipeline,
    ac: ActionClass,
    parsed: Intent,
    payload: Mapping[str, Any],
    run: tuple[str, str, RunCallRef | None],
    principal: str | None,
    breakers: Mapping[str, BreakerConfig],
) -> Callable[[Any, float], None]:
    """The token's re-check in the journal's transaction (``DispatchGuard.recheck``): the
    policy decided again from the gate's policy as it is now, the state read in ``tx``;
    anything changed since the token raises :class:`EvaluationTokenStale` (``stage: in_tx``)."""

    def check(tx: SharedTx, now: float) -> None:
        decision = decide(policy(), ac, parsed, None)
        reads = TxReads(tx)
        found = read_state(reads, pipeline, ac, parsed, decision, now, run, principal, breakers)
        why = stale_reason(payload, fingerprint=parsed.fingerprint, state=found.quote, now=now)
        if why is not None:
            raise EvaluationTokenStale(why[1], reason=why[0], stage="in_tx")

    return check
