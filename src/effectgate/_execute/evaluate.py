"""Evaluate without writing: an intent's whole decision path, read-only (docs/service.md).

:func:`evaluate` runs the submit path's stages as reads: the strict parse and the policy's tier
(:mod:`.intake`), the class's controls (kill switch, breaker, shadow, the envelope's per-action
axes and its rate and exposure windows, read from the one record of dispatched value), the
grant authoriser and the host's preconditions (the pre-dispatch pipeline's stages over a row
that is not journalled), the approvals the tier needs and from whom, and the venue's dry run
where the adapter speculates. It writes no row, no budget, no breaker signal and no window
entry; its only write is one audit line (``intent_evaluated``), rate-limited per principal.

:func:`check_token` is the submit side: a token presented with a submit must verify and the
state it covers must still hold (:func:`effectgate._core.evaluation.stale_reason`).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Protocol

from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.controls import ApprovalRules, ClassControls, to_micros
from effectgate._core.evaluation import (
    BudgetQuote,
    Evaluation,
    StateQuote,
    sign_token,
    stale_reason,
    verify_token,
)
from effectgate._core.intent import ActionClass, Intent, Tier
from effectgate._core.policy import Decision, PolicySet
from effectgate._core.runs import RunCallRef
from effectgate._core.states import State
from effectgate._execute._gate_protocol import SpeculationGate
from effectgate._execute.adapter import OutboundRequest, speculator
from effectgate._execute.intake import RawIntent, check_principal, decide, new_operation, parse
from effectgate._execute.predispatch import DispatchContext, Pipeline, Refusal
from effectgate._execute.speculation import active_speculation
from effectgate.errors import (
    ConfigError,
    EffectgateError,
    EvaluationTokenRefused,
    EvaluationTokenStale,
)
from effectgate.store.base import Operation, make_op_key
from effectgate.store.roles import Store

__all__ = ["EvaluateGate", "Evaluator", "check_token", "evaluate"]

#: The operation id an evaluation without one dry-runs under (never journalled).
_EVAL_ID = "evaluation"


class Evaluator:
    """The gate's evaluation settings: the token's secret and lifetime, who may approve (for
    the answer's ``approvals``), and the per-principal limit on evaluation audit lines.

    ``secret``: the HMAC key of tokens (None: a random one for this process, so a token
    verifies only in the process that issued it; a service with several processes sets one).
    """

    def __init__(
        self,
        secret: bytes | None = None,
        *,
        ttl: float = 300.0,
        audit_per_minute: int = 30,
        approver_roles: ApproverRoles | None = None,
    ) -> None:
        if secret is not None and len(secret) < 16:
            raise ConfigError("the evaluation secret must be at least 16 bytes")
        if ttl <= 0 or audit_per_minute < 1:
            raise ConfigError("evaluation ttl and audit_per_minute must be positive")
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self.ttl = ttl
        self.audit_per_minute = audit_per_minute
        self.approver_roles = approver_roles
        self._lock = threading.Lock()
        self._windows: dict[str | None, list[float]] = {}  # [window start, lines, suppressed]

    def audit(
        self,
        store: Store,
        now: float,
        principal: str | None,
        scope: str,
        detail: Mapping[str, object],
    ) -> bool:
        """One ``intent_evaluated`` line, unless the principal used its lines this minute (the
        count it suppressed is carried on its next line). Whether a line was written."""
        with self._lock:
            w = self._windows.get(principal)
            if w is None or now - w[0] >= 60.0:
                suppressed = int(w[2]) if w is not None else 0
                w = self._windows[principal] = [now, 0.0, float(suppressed)]
                if len(self._windows) > 10_000:  # bound memory: forget the oldest windows
                    for key in sorted(self._windows, key=lambda k: self._windows[k][0])[:1000]:
                        self._windows.pop(key, None)
            if w[1] >= self.audit_per_minute:
                w[2] += 1
                return False
            w[1] += 1
            suppressed, w[2] = int(w[2]), 0.0
        store.append_audit(
            "intent_evaluated",
            {**detail, "principal": principal, "suppressed_before": suppressed},
            now=now,
            scope=scope,
        )
        return True


class EvaluateGate(SpeculationGate, Protocol):
    """What evaluation reads of the gate (``Gate`` satisfies it)."""

    @property
    def policy(self) -> PolicySet: ...
    @property
    def pipeline(self) -> Pipeline: ...
    @property
    def approvals(self) -> ApprovalRules: ...
    @property
    def evaluator(self) -> Evaluator: ...


def _controls_digest(ctl: ClassControls) -> str:
    state = ctl.to_dict()
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()


def _value_target(ac: ActionClass, parsed: Intent) -> tuple[Decimal | None, str | None]:
    value = ac.value_of(parsed.effect) if ac.value_of else None
    target = parsed.effect.get(ac.target_field) if ac.target_field else None
    return value, None if target is None else str(target)


def _controls(
    store: Store, ac: ActionClass, parsed: Intent, now: float
) -> tuple[ClassControls, list[str], list[BudgetQuote], bool]:
    """The class's controls as a dispatch would meet them: ``(controls, holds, budgets,
    shadow)``; the same rules as the store's in-transaction verdict, over reads only."""
    ctl = store.controls(ac.name)
    holds: list[str] = []
    if ctl.killed:
        holds.append(
            f"kill switch on {ac.name}" + (f" ({ctl.kill_reason})" if ctl.kill_reason else "")
        )
    if ctl.breaker_open:
        holds.append(f"breaker open on {ac.name} ({ctl.breaker_reason})")
    env = ctl.envelope
    value, target = _value_target(ac, parsed)
    breach = env.per_action_breach(value, target)
    if breach:
        holds.append(breach)
    quotes: list[BudgetQuote] = []
    if env.rate_limit is not None and env.rate_interval is not None:
        count, _ = store.dispatch_window(ac.name, now - env.rate_interval)
        quotes.append(BudgetQuote("envelope.rate", env.rate_limit, count, 1, "dispatches"))
    if env.exposure_limit is not None and env.exposure_window is not None:
        _, used = store.dispatch_window(ac.name, now - env.exposure_window)
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
    return ctl, holds, quotes, ctl.shadow


def _row(
    ac: ActionClass, parsed: Intent, decision: Decision, scope: str, op_id: str, now: float
) -> Operation:
    """The row a submit would journal, never written (version 0): what the stages read."""
    journalled = new_operation(ac, parsed, decision, scope, op_id).journalled(State.VALIDATED, now)
    return replace(journalled, version=0)


def _stages(gate: EvaluateGate, ctx: DispatchContext) -> list[dict[str, object]]:
    """The pipeline's authorisation and preconditions over the unjournalled row (read-only)."""
    out: list[dict[str, object]] = []
    pipeline = gate.pipeline
    named = ([("authorise", pipeline.authorise)] if pipeline.authorise else []) + [
        ("precondition", s) for s in pipeline.preconditions
    ]
    for name, stage in named:
        try:
            refusal = stage(ctx)
        except Exception as exc:  # a hook that errors denies, as at dispatch
            refusal = Refusal(
                "reject", f"{name}_hook_failed", f"the {name} hook failed ({type(exc).__name__})"
            )
        if refusal is not None and not isinstance(refusal, Refusal):
            refusal = Refusal(
                "reject",
                f"{name}_hook_failed",
                f"the {name} hook returned {type(refusal).__name__}",
            )
        out.append(
            {"stage": name, "passed": refusal is None}
            | (
                {}
                if refusal is None
                else {"code": refusal.code, "move": refusal.move, "reason": refusal.reason}
            )
        )
    return out


def _approvals(
    gate: EvaluateGate, ac: ActionClass, tier: Tier, principal: str | None
) -> dict[str, object] | None:
    if tier is Tier.VALIDATE:
        return None
    roles = gate.evaluator.approver_roles
    by_role = roles.by_class.get(ac.name) if roles is not None else None
    return {
        "required": 1 if tier is Tier.APPROVE else gate.approvals.multi_approvers,
        "roles": sorted(by_role) if by_role is not None else None,
        "approvers": sorted({p for r in by_role for p in roles.members[r]} - {principal})
        if by_role is not None and roles is not None
        else None,
        "excluded": [principal] if principal else [],
        "ttl": gate.approvals.ttl,
    }


def _speculate(
    gate: EvaluateGate, ac: ActionClass, parsed: Intent, op_key: str
) -> dict[str, object] | None:
    """The venue's dry run (no effect, nothing recorded), where the class speculates."""
    if active_speculation(gate, ac) is None:
        return None
    adapter = speculator(gate.adapters[ac.adapter])
    if adapter is None:
        return None
    request = OutboundRequest(operation_key=op_key, action=ac.name, effect=parsed.effect)
    try:
        dry = adapter.speculate(request, attempt=1, timeout=gate.dispatch_timeout)
    except Exception as exc:
        text = str(exc) if isinstance(exc, EffectgateError) else type(exc).__name__
        return {"verdict": "RETRYABLE_TIMEOUT", "reason": f"no verdict: {text[:300]}"}
    return {"verdict": dry.verdict, "reason": dry.reason[:500], "expires_in": dry.expires_in}


def _run_budget(
    store: Store, scope: str, run_call: RunCallRef | None, op_id: str, now: float
) -> tuple[list[BudgetQuote], list[str]]:
    """A run-bound action's tool slot (charged once per operation id, at its first admission)
    and its run's deadline: ``(quotes, refusals)``."""
    state = store.run_budget(scope, run_call.run_id) if run_call is not None else None
    if state is None:
        return [], []
    refusals: list[str] = []
    budget = state.budget
    if budget.deadline is not None and now >= budget.deadline:
        refusals.append(f"budget_exceeded: run {state.run_id!r} is past its deadline (deadline)")
    quotes: list[BudgetQuote] = []
    if budget.max_tool_calls:
        reserve = 0 if store.get(scope, op_id) is not None else 1
        q = BudgetQuote(
            "run.tool_calls", budget.max_tool_calls, state.usage.tool_calls, reserve, "calls"
        )
        quotes.append(q)
        if q.left < 0:
            refusals.append(f"budget_exceeded: run {state.run_id!r} has no tool call left")
    return quotes, refusals


def _grant_budgets(
    gate: EvaluateGate, ac: ActionClass, parsed: Intent, run: tuple[str, str | None], now: float
) -> list[BudgetQuote]:
    """The aggregate budgets of the caller's live grants that name this class and tenant
    (grants on only): the value the action would draw from each, and what would be left."""
    scope, principal = run
    if gate.pipeline.authorise is None or principal is None:
        return []
    value, _ = _value_target(ac, parsed)
    quotes: list[BudgetQuote] = []
    for g in gate.store.live_grants_for(principal, now):
        s = g.spec
        if s.budget is None or not ({"*", ac.name} & s.actions) or s.scope not in ("*", scope):
            continue
        used = gate.store.dispatched_micros(principal, s.actions, g.created_at)
        asked = to_micros(value) if value is not None else 0
        quotes.append(
            BudgetQuote(f"grant.{g.grant_id}", to_micros(s.budget), used, asked, "micros")
        )
    return quotes


def _state(
    gate: EvaluateGate,
    ac: ActionClass,
    parsed: Intent,
    decision: Decision,
    now: float,
    run: tuple[str, str, RunCallRef | None],
    principal: str | None,
) -> tuple[StateQuote, ClassControls, list[str], list[str], bool]:
    """What the token covers, with the controls, holds and run refusals it was read from."""
    ctl, holds, quotes, shadow = _controls(gate.store, ac, parsed, now)
    scope, op_id, run_call = run
    run_quotes, refusals = _run_budget(gate.store, scope, run_call, op_id, now)
    run_quotes += _grant_budgets(gate, ac, parsed, (scope, principal), now)
    quote = StateQuote(
        decision.allowed,
        decision.tier.value,
        decision.policy_version,
        _controls_digest(ctl),
        tuple(quotes + run_quotes),
    )
    return quote, ctl, holds, refusals, shadow


def evaluate(
    gate: EvaluateGate,
    action: str,
    intent: RawIntent,
    scope: str = "default",
    principal: str | None = None,
    operation_id: str | None = None,
    run_call: RunCallRef | None = None,
) -> Evaluation:
    """What a submit of ``intent`` would do now, with a token binding a submit to it."""
    store, now = gate.store, gate.clock()
    op_id = operation_id if operation_id is not None else _EVAL_ID
    parsed = parse(gate.registry, store, gate.clock, action, op_id, intent, scope)
    check_principal(principal)
    ac = gate.registry.get(action)
    decision = decide(gate.policy, ac, parsed, None)
    run = (scope, op_id, run_call)
    state, ctl, holds, over, shadow = _state(gate, ac, parsed, decision, now, run, principal)
    reasons = [f"policy: {decision.reason}"]
    row = _row(ac, parsed, decision, scope, op_id, now)
    checks = _stages(gate, DispatchContext(row, ac, store, now, None, principal))
    refused = [f"{c['stage']}: {c['code']}: {c['reason']}" for c in checks if not c["passed"]]
    refused += [f"run budget: {why}" for why in over]
    spec = _speculate(gate, ac, parsed, make_op_key(scope, op_id)) if decision.allowed else None
    if spec is not None and spec["verdict"] == "DENY":
        refused.append(f"speculation: {spec['reason']}")
    reasons += refused + [f"held: {h}" for h in holds]
    approvals = _approvals(gate, ac, decision.tier, principal) if decision.allowed else None
    if approvals is not None:
        reasons.append(
            f"approval: {approvals['required']} approver(s) needed ({decision.tier.value})"
        )
    existing = store.get(scope, op_id) if operation_id is not None else None
    if existing is not None and existing.fingerprint == parsed.fingerprint:
        reasons.insert(0, f"replay: {op_id!r} is {existing.state.value}; a submit returns it")
        outcome = "replay"
    elif existing is not None:
        reasons.insert(0, f"idempotency_conflict: {op_id!r} holds another payload")
        outcome = "conflict"
    elif not decision.allowed or refused:
        outcome = "rejected"
    elif approvals is not None:
        outcome = "awaiting_approval"
    elif shadow:
        outcome = "shadowed"
    elif holds:
        outcome = "held"
    else:
        outcome = "dispatch"
    expires = now + gate.evaluator.ttl
    token = sign_token(
        gate.evaluator.secret,
        principal=principal,
        scope=scope,
        action=ac.name,
        fingerprint=parsed.fingerprint,
        state=state,
        expires_at=expires,
    )
    controls = {k: v for k, v in ctl.to_dict().items() if k not in ("updated_by", "updated_at")}
    result = Evaluation(
        ac.name, scope, parsed.fingerprint, outcome, tuple(reasons), state, controls,
        approvals, spec, now, expires, token, tuple(checks),
    )  # fmt: skip
    gate.evaluator.audit(
        store,
        now,
        principal,
        scope,
        {"action": ac.name, "fingerprint": parsed.fingerprint, "outcome": outcome,
         "policy_version": decision.policy_version, "expires_at": expires},
    )  # fmt: skip
    return result


def check_token(
    gate: EvaluateGate,
    ac: ActionClass,
    parsed: Intent,
    decision: Decision,
    token: str,
    scope: str,
    principal: str | None,
    run: tuple[str, RunCallRef | None] = ("", None),
) -> None:
    """Refuse a submit whose evaluation token does not hold (invalid, or stale); the refusal
    writes one audit line and nothing else."""
    now = gate.clock()
    try:
        payload = verify_token(
            gate.evaluator.secret, token, principal=principal, scope=scope, action=ac.name
        )
        state = _state(gate, ac, parsed, decision, now, (scope, *run), principal)[0]
        why = stale_reason(payload, fingerprint=parsed.fingerprint, state=state, now=now)
        if why is not None:
            raise EvaluationTokenStale(why[1], reason=why[0])
    except EvaluationTokenRefused as exc:
        detail = {"action": ac.name, "principal": principal, "error": exc.to_dict()}
        gate.store.append_audit("evaluation_token_refused", detail, now=now, scope=scope)
        raise
