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

import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.controls import ApprovalRules, BreakerConfig
from effectgate._core.evaluation import Evaluation, sign_token, stale_reason, verify_token
from effectgate._core.intent import ActionClass, Intent, Tier
from effectgate._core.policy import Decision, PolicySet
from effectgate._core.runs import RunCallRef
from effectgate._core.states import State
from effectgate._execute._gate_protocol import SpeculationGate
from effectgate._execute.adapter import OutboundRequest, speculator
from effectgate._execute.evaluate_state import read_state, recheck
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
    @property
    def breakers(self) -> Mapping[str, BreakerConfig]: ...


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
    found = read_state(
        store, gate.pipeline, ac, parsed, decision, now, run, principal, gate.breakers
    )
    state, ctl, holds, over = found.quote, found.controls, found.holds, found.refusals
    shadow, breaker = ctl.shadow, found.breaker
    if breaker is not None and breaker["would_trip"]:
        holds.append(f"breaker would trip on {ac.name} ({breaker['reason']})")
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
        approvals, spec, now, expires, token, tuple(checks), breaker,
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
) -> Callable[[Any, float], None]:
    """Refuse a submit whose evaluation token does not hold (invalid, or stale) now; else the
    recheck the journal's transaction runs (:func:`.evaluate_state.recheck`), so a change
    committed after this check still refuses. A refusal writes one audit line, nothing else."""
    now = gate.clock()
    try:
        payload = verify_token(
            gate.evaluator.secret, token, principal=principal, scope=scope, action=ac.name
        )
        state = read_state(
            gate.store, gate.pipeline, ac, parsed, decision, now, (scope, *run), principal,
            gate.breakers,
        ).quote  # fmt: skip
        why = stale_reason(payload, fingerprint=parsed.fingerprint, state=state, now=now)
        if why is not None:
            raise EvaluationTokenStale(why[1], reason=why[0])
    except EvaluationTokenRefused as exc:
        audit_refusal(gate, ac, exc, scope, principal, now)
        raise
    return recheck(
        lambda: gate.policy, gate.pipeline, ac, parsed, payload, (scope, *run), principal,
        gate.breakers,
    )  # fmt: skip


def audit_refusal(
    gate: EvaluateGate,
    ac: ActionClass,
    exc: EvaluationTokenRefused,
    scope: str,
    principal: str | None,
    now: float,
) -> None:
    """The one audit line of a token refusal (``stage`` in the error: before or in the
    journal's transaction, which rolled back)."""
    detail = {"action": ac.name, "principal": principal, "error": exc.to_dict()}
    gate.store.append_audit("evaluation_token_refused", detail, now=now, scope=scope)
