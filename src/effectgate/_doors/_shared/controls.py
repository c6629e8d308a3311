"""The operator controls under ``/v1/admin`` (operator tokens; approvals also approver tokens):
the HTTP face of :class:`~effectgate._execute.operator.Operator`, mirroring ``effectgate
kill/breaker/approvals/authority/shadow/audit/alerts``.

Who may do what. A control acts on an action class in *every* tenant, so changing one (kill
switch, breaker reset, envelope step, shadow mode, incumbent outcomes) and reading what spans
tenants (blast radius, shadow report, whole-log audit verification) needs an operator of scope
``"*"``. Reading a class's control state needs any operator token. Per-operation routes
(approvals, held rows, evidence bundles, alerts about operations) are limited to the token's
scope, filtered in SQL. Approvals (list, approve, refuse) take an approver or an operator
token, and nothing else takes an approver's. The approver is the token's name; the agent that
proposed an action is recorded as its proposer and can never approve it (the intent's own
``proposed_by`` is an audit field and excludes nobody).

Bad input is refused before anything is written: an unknown class is ``404
unknown_action_class``, a malformed envelope value or threshold ``400 invalid_control`` naming
the field, an approval that cannot apply ``409 approval_refused`` (``403`` for self-approval)
with its ``reason``.
"""

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from effectgate._core.controls import ClassControls
from effectgate._core.states import State
from effectgate._doors._shared.control_models import (
    AlertOut,
    ApprovalOutcomeOut,
    BlastRadiusOut,
    ControlsOut,
    DecisionIn,
    EnvelopeOut,
    IncumbentIn,
    IncumbentOut,
    PendingOut,
    ReasonIn,
    ShadowReportOut,
    StepIn,
    StepOut,
    VerifyOut,
)
from effectgate._doors._shared.models import OperationOut, operation_dict
from effectgate._service import Principal, Service
from effectgate.errors import ControlError, PermissionDenied

__all__ = ["controls_router", "visible_scope"]

T = TypeVar("T")


def _global(who: Principal, what: str) -> None:
    if who.scope != "*":
        raise PermissionDenied(f"{what} acts on every tenant: needs an operator of scope '*'")


def visible_scope(who: Principal, scope: str | None) -> str | None:
    """The scope filter an operator may use: theirs, or any when their scope is ``*``."""
    if who.scope == "*":
        return scope
    if scope is not None and scope != who.scope:
        raise PermissionDenied(f"this token is limited to scope {who.scope!r}")
    return who.scope


def _controls(c: ClassControls) -> dict[str, Any]:
    return c.to_dict()


def _heads(items: list[str]) -> dict[int, tuple[int, str]]:
    heads: dict[int, tuple[int, str]] = {}
    for item in items:
        parts = item.split(":")
        if (
            len(parts) != 3
            or not parts[0].isdigit()
            or not parts[1].isdigit()
            or len(parts[0]) > 6
            or len(parts[1]) > 18
        ):
            raise ControlError(f"{item!r} is not LANE:SEQ:HASH", field="expect_head")
        heads[int(parts[0])] = (int(parts[1]), parts[2])
    return heads


def controls_router(
    service: Service, operator: Any, approver: Any, errors: dict[int | str, Any]
) -> APIRouter:
    router = APIRouter(responses=errors)
    op = service.operator

    async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await run_in_threadpool(lambda: fn(*args, **kw))

    # --- status of every class (any operator) --------------------------------------------

    @router.get(
        "/controls",
        response_model=list[ControlsOut],
        summary="Every class's controls: kill switch, breaker, shadow, envelope",
    )
    async def controls(who: operator) -> list[dict[str, Any]]:
        return [_controls(c) for c in await call(op.status)]

    @router.get("/controls/{action}", response_model=ControlsOut, summary="One class's controls")
    async def one_class(who: operator, action: str) -> dict[str, Any]:
        return _controls((await call(op.status, action))[0])

    # --- kill switch ---------------------------------------------------------------------

    @router.get(
        "/kill", response_model=list[ControlsOut], summary="Kill switch status of every class"
    )
    async def kill_status(who: operator) -> list[dict[str, Any]]:
        return [_controls(c) for c in await call(op.status)]

    @router.put(
        "/kill/{action}",
        response_model=ControlsOut,
        summary="Kill switch on: hold every new dispatch of the class, in every process",
    )
    async def kill_on(who: operator, action: str, body: ReasonIn | None = None) -> dict[str, Any]:
        _global(who, "a kill switch")
        return _controls(
            await call(op.kill, action, operator=who.name, reason=body.reason if body else None)
        )

    @router.delete(
        "/kill/{action}",
        response_model=ControlsOut,
        summary="Kill switch off (held rows stay validated until dispatched)",
    )
    async def kill_off(
        who: operator, action: str, reason: Annotated[str | None, Query(max_length=500)] = None
    ) -> dict[str, Any]:
        _global(who, "a kill switch")
        return _controls(await call(op.release, action, operator=who.name, reason=reason))

    @router.get(
        "/kill/{action}/blast-radius",
        response_model=BlastRadiusOut,
        summary="Rehearsal: what the switch would hold right now (nothing is flipped)",
    )
    async def blast_radius(
        who: operator, action: str, limit: Annotated[int, Query(ge=1, le=10000)] = 1000
    ) -> dict[str, object]:
        _global(who, "a blast radius")
        return (await call(op.blast_radius, action, limit=limit)).to_dict()

    @router.get(
        "/held",
        response_model=list[OperationOut],
        summary="Operations a control is holding (validated: not sent, not failed)",
    )
    async def held(
        who: operator,
        action: Annotated[str | None, Query(max_length=64)] = None,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        visible = visible_scope(who, scope)
        if action is not None:
            service.config.registry.get(action)
        rows = await call(service.store.list_held, action=action, scope=visible, limit=limit)
        return [operation_dict(r, service.config.registry) for r in rows]

    # --- breakers ------------------------------------------------------------------------

    @router.get(
        "/breakers",
        response_model=list[ControlsOut],
        summary="Every class's breaker: open (with why) or closed",
    )
    async def breakers(who: operator) -> list[dict[str, Any]]:
        return [_controls(c) for c in await call(op.status)]

    @router.post(
        "/breakers/{action}/reset",
        response_model=ControlsOut,
        summary="Close an open breaker (it never closes by itself)",
    )
    async def breaker_reset(
        who: operator, action: str, body: ReasonIn | None = None
    ) -> dict[str, Any]:
        _global(who, "a breaker reset")
        return _controls(
            await call(
                op.reset_breaker, action, operator=who.name, reason=body.reason if body else None
            )
        )

    # --- approvals -----------------------------------------------------------------------

    @router.get(
        "/approvals",
        response_model=list[PendingOut],
        summary="Operations awaiting approval, with the fingerprint to approve",
    )
    async def approvals(
        who: approver,
        scope: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        visible = visible_scope(who, scope)

        def load() -> list[dict[str, Any]]:
            out = []
            for r in service.store.list_operations(
                state=State.AWAITING_APPROVAL, scope=visible, limit=limit
            ):
                req = service.store.approval_request(r.scope, r.operation_id)
                got = service.store.list_approvals(r.scope, r.operation_id)
                out.append(
                    {
                        **operation_dict(r, service.config.registry),
                        "effect": dict(r.effect),
                        "required": req.required if req else 1,
                        "expires_at": req.expires_at if req else None,
                        "approvers": [a.approver for a in got if a.verdict == "approve"],
                    }
                )
            return out

        return await run_in_threadpool(load)

    async def decide(
        who: Principal, scope: str, operation_id: str, body: DecisionIn, approve: bool
    ) -> dict[str, Any]:
        visible_scope(who, scope)

        def run() -> dict[str, Any]:
            fp, name, why = body.fingerprint, who.name, body.reason
            # The approver roles the verified credential asserts count beside the config's.
            out = (
                op.approve(
                    operation_id, fingerprint=fp, approver=name, scope=scope, reason=why,
                    claimed_roles=who.approver_roles,
                )
                if approve
                else op.refuse(operation_id, fingerprint=fp, approver=name, scope=scope, reason=why)
            )  # fmt: skip
            row = out.operation
            if out.released and row.state is State.VALIDATED:
                # The approval released it: dispatch now rather than at the standing
                # dispatcher's next pass (the kill switch, breaker and envelope are checked in
                # the dispatching transaction, as for any row; the compare-and-set decides).
                # A minted-id proposal's row is the operation its approval minted.
                row = service.gate.dispatch(row.operation_id, scope=scope)
            return {
                "operation": operation_dict(row, service.config.registry),
                "approvals": out.approvals,
                "required": out.required,
                "complete": out.complete,
            }

        return await run_in_threadpool(run)

    @router.post(
        "/approvals/{scope}/{operation_id}/approve",
        response_model=ApprovalOutcomeOut,
        summary="Approve exactly one payload; complete approvals dispatch it",
    )
    async def approve(
        who: approver, scope: str, operation_id: str, body: DecisionIn
    ) -> dict[str, Any]:
        return await decide(who, scope, operation_id, body, True)

    @router.post(
        "/approvals/{scope}/{operation_id}/refuse",
        response_model=ApprovalOutcomeOut,
        summary="Refuse the payload; the operation ends denied",
    )
    async def refuse(
        who: approver, scope: str, operation_id: str, body: DecisionIn
    ) -> dict[str, Any]:
        return await decide(who, scope, operation_id, body, False)

    # --- staged authority ----------------------------------------------------------------

    @router.get(
        "/envelope/{action}",
        response_model=EnvelopeOut,
        summary="The class's envelope, axis by axis (null: not constrained)",
    )
    async def envelope(who: operator, action: str) -> dict[str, Any]:
        env = await call(op.envelope, action)
        return {"action": action, "version": env.version, **env.to_json()}

    @router.post(
        "/envelope/{action}/step",
        response_model=StepOut,
        summary="Move one axis as a recorded step, with evidence and reversal",
    )
    async def step(who: operator, action: str, body: StepIn) -> dict[str, Any]:
        _global(who, "an envelope step")
        try:
            json.dumps([body.value, body.evidence], allow_nan=False)
        except ValueError:
            raise ControlError("NaN and Infinity are not values", field="value") from None
        out = await call(
            op.step,
            action,
            body.axis,
            body.value,
            evidence=body.evidence,
            operator=who.name,
            reverse_on=body.reverse_on,
        )
        return out.to_dict()

    @router.get(
        "/envelope/{action}/evidence",
        summary="The evidence a step widening AXIS may name: figures and digest of a window",
    )
    async def step_evidence(
        who: operator,
        action: str,
        axis: Annotated[str, Query(max_length=32)],
        kind: Annotated[str, Query(max_length=32, description="shadow_report or operations")],
        since: Annotated[float, Query(ge=0, le=1e11, description="From (epoch seconds)")],
        until: Annotated[float, Query(ge=0, le=1e11, description="Before (epoch seconds)")],
    ) -> dict[str, Any]:
        _global(who, "a class's evidence")
        return await call(op.step_evidence, action, axis, kind=kind, since=since, until=until)

    @router.get(
        "/envelope/{action}/history",
        response_model=list[StepOut],
        summary="Every recorded step of the class, reversals included",
    )
    async def history(who: operator, action: str) -> list[dict[str, Any]]:
        return [s.to_dict() for s in await call(op.history, action)]

    # --- shadow mode ---------------------------------------------------------------------

    @router.put(
        "/shadow/{action}",
        response_model=ControlsOut,
        summary="Shadow mode on: the pipeline runs, nothing is sent",
    )
    async def shadow_on(who: operator, action: str) -> dict[str, Any]:
        _global(who, "shadow mode")
        return _controls(await call(op.set_shadow, action, True, operator=who.name))

    @router.delete(
        "/shadow/{action}",
        response_model=ControlsOut,
        summary="Shadow mode off (its history is kept)",
    )
    async def shadow_off(who: operator, action: str) -> dict[str, Any]:
        _global(who, "shadow mode")
        return _controls(await call(op.set_shadow, action, False, operator=who.name))

    @router.post(
        "/shadow/incumbent",
        response_model=IncumbentOut,
        summary="Record what the incumbent actually did, by correlation id",
    )
    async def incumbent(who: operator, body: IncumbentIn) -> dict[str, Any]:
        _global(who, "an incumbent outcome")
        fp = await call(
            op.feed_incumbent, body.correlation_id, body.action, body.intent, source=who.name
        )
        return {"correlation_id": body.correlation_id, "fingerprint": fp}

    @router.get(
        "/shadow/report",
        response_model=ShadowReportOut,
        summary="Disagreement rate against the incumbent, per model, harness version and window",
    )
    async def shadow_report(
        who: operator,
        action: Annotated[str | None, Query(max_length=64)] = None,
        window: Annotated[
            float | None, Query(gt=0, le=1e9, description="Split by windows of N seconds")
        ] = None,
        since: Annotated[
            float | None, Query(ge=0, le=1e11, description="Cases from (epoch seconds)")
        ] = None,
        until: Annotated[
            float | None, Query(ge=0, le=1e11, description="Cases before (epoch seconds)")
        ] = None,
    ) -> dict[str, object]:
        _global(who, "the shadow report")
        report = await call(op.shadow_report, action, window=window, since=since, until=until)
        return report.to_dict()

    # --- audit and alerts ----------------------------------------------------------------

    @router.get(
        "/audit/verify",
        response_model=VerifyOut,
        summary="Verify the whole hash chain; findings say where it breaks",
    )
    async def audit_verify(
        who: operator,
        expect_head: Annotated[
            list[str] | None,
            Query(
                max_length=200,
                description="LANE:SEQ:HASH anchored earlier, that must still be in the log",
            ),
        ] = None,
    ) -> dict[str, object]:
        _global(who, "verifying the whole audit log")
        heads = _heads(expect_head or [])
        return (await call(op.verify_audit, expect_heads=heads)).to_dict()

    @router.get(
        "/audit/operations/{scope}/{operation_id}",
        response_model=dict[str, Any],
        summary="One operation's evidence bundle (verifies offline)",
    )
    async def audit_export(who: operator, scope: str, operation_id: str) -> dict[str, Any]:
        visible_scope(who, scope)
        return await call(op.export_evidence, operation_id, scope=scope)

    @router.get(
        "/alerts",
        response_model=list[AlertOut],
        summary="Alerts raised so far, each once (a scoped token: its operations')",
    )
    async def alerts(
        who: operator, limit: Annotated[int, Query(ge=1, le=10000)] = 1000
    ) -> list[dict[str, object]]:
        rows = await call(service.store.list_alerts_in, visible_scope(who, None), limit=limit)
        return [a.to_dict() for a in rows]

    return router
