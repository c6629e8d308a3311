"""The operator's side of the boundary: switches, breakers, approvals, authority, shadow, audit.

Nothing here is reachable through :class:`~effectgate.Gate`, which is all an agent's harness
holds. Every state-changing method takes the operator's identity (the HTTP layer maps the
operator credential to it), validates its input before the store is touched, and is audited in
the same transaction as the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.authority_evidence import widens
from effectgate._core.controls import (
    ApprovalOutcome,
    AuthorityStep,
    ClassControls,
    Envelope,
    parse_axis_value,
)
from effectgate._core.effects import is_proposal_handle
from effectgate._core.intent import ActionClass, Registry
from effectgate._core.model_window import ModelWindow
from effectgate._core.rehearsal import Rehearsal, RehearsalStatus, rehearsal_status
from effectgate._core.states import State
from effectgate._evidence.audit import VerifyResult, export_bundle, verify_store
from effectgate._execute.alerts import AlertSink
from effectgate._execute.minting import mint
from effectgate._execute.rehearsal import BlastRadius, blast_radius
from effectgate._execute.rehearsal import drill as run_drill
from effectgate._execute.shadow import ShadowReport, build_report
from effectgate._execute.step_evidence import measure as measure_evidence
from effectgate._execute.step_evidence import verify as verify_evidence
from effectgate.errors import ApprovalError, ApprovalExpired, ControlError, InvalidApprover
from effectgate.store.base import IDENTITY_PATTERN, SYSTEM_PREFIX, Operation, validate_identity
from effectgate.store.roles import Store

__all__ = ["BlastRadius", "Operator", "ShadowReport"]

#: Rows held by a control carry a ``detail`` starting with this.
HELD_PREFIX = "held:"


class Operator:
    """Operator actions on one store. Construct it only where the operator credential lives."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        alerts: AlertSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.alerts = alerts
        self.clock = clock
        #: Who may approve what (docs/authority.md); None: any approver, as before.
        self.approver_roles: ApproverRoles | None = None
        #: Called after an approval is recorded, ``(scope, operation_id, approver)``: binds
        #: the approval's precondition (``execute/preconditions.py``).
        self.on_approved: Callable[[str, str, str], object] | None = None

    # --- input checks (before anything is written) ----------------------------------------

    def _class(self, action: str) -> ActionClass:
        return self.registry.get(action)  # raises UnknownActionClass

    @staticmethod
    def _who(operator: str) -> str:
        if (
            not isinstance(operator, str)
            or not IDENTITY_PATTERN.fullmatch(operator)
            or operator.startswith(SYSTEM_PREFIX)
        ):
            raise ControlError(
                f"operator identity {operator!r} must match "
                f"{IDENTITY_PATTERN.pattern} and not start with "
                f"{SYSTEM_PREFIX!r}",
                field="operator",
            )
        return operator

    # --- kill switch ------------------------------------------------------------------------

    def kill(self, action: str, *, operator: str, reason: str | None = None) -> ClassControls:
        """Halt new dispatches of ``action`` in every process (held rows stay ``validated``)."""
        self._class(action)
        return self.store.set_kill(
            action, True, operator=self._who(operator), reason=reason, now=self.clock()
        )

    def release(self, action: str, *, operator: str, reason: str | None = None) -> ClassControls:
        """Lift the switch; the rows it held go to the standing dispatcher (``Dispatcher``)."""
        self._class(action)
        return self.store.set_kill(
            action, False, operator=self._who(operator), reason=reason, now=self.clock()
        )

    def blast_radius(self, action: str, *, limit: int = 1000) -> BlastRadius:
        """Rehearse a switch: what it would hold now, without flipping it (not recorded; see
        :meth:`rehearse`)."""
        self._class(action)
        return blast_radius(self.store, action, now=self.clock(), limit=limit)

    def rehearse(
        self, action: str, *, operator: str, drill: bool = False, reason: str | None = None
    ) -> Rehearsal:
        """Rehearse ``action``'s kill switch and record it: the blast-radius dry run, or with
        ``drill`` the switch flipped on, seen held and flipped off (refused while it is on)."""
        self._class(action)
        who = self._who(operator)
        if drill:
            return run_drill(self.store, action, operator=who, reason=reason, clock=self.clock)
        now = self.clock()
        radius = blast_radius(self.store, action, now=now)
        detail: dict[str, object] = radius.summary()
        if reason:
            detail["reason"] = reason
        return self.store.record_rehearsal(
            action, "blast_radius", operator=who, detail=detail, now=now
        )

    def rehearsals(self, action: str | None = None, *, limit: int = 100) -> list[Rehearsal]:
        """Recorded rehearsals, newest first."""
        if action is not None:
            self._class(action)
        return self.store.list_rehearsals(action, limit=limit)

    def rehearsal_status(self, action: str | None = None) -> list[RehearsalStatus]:
        """Each class (or ``action``) against its ``rehearsal_period``: the last rehearsal,
        when the next is due, and whether it is overdue (as ``rehearsal-overdue`` pages)."""
        classes = [self._class(action)] if action is not None else list(self.registry)
        now = self.clock()
        out = []
        for ac in classes:
            newest = self.store.list_rehearsals(ac.name, limit=1)
            last = newest[0] if newest else None
            out.append(rehearsal_status(ac.name, ac.rehearsal_period, last, now))
        return out

    def held(self, action: str | None = None, *, limit: int = 1000) -> list[Operation]:
        """``validated`` rows a control is holding back (listed, never failed)."""
        if action is not None:
            self._class(action)
        return [
            r
            for r in self.store.list_operations(state=State.VALIDATED, action=action, limit=limit)
            if (r.detail or "").startswith(HELD_PREFIX)
        ]

    def status(self, action: str | None = None) -> list[ClassControls]:
        names = [self._class(action).name] if action else self.registry.names()
        return [self.store.controls(n) for n in names]

    # --- breaker, shadow, staged authority -----------------------------------------------

    def reset_breaker(
        self, action: str, *, operator: str, reason: str | None = None
    ) -> ClassControls:
        """Close an open breaker (the only way it closes)."""
        self._class(action)
        return self.store.reset_breaker(
            action, operator=self._who(operator), reason=reason, now=self.clock()
        )

    def set_shadow(self, action: str, on: bool, *, operator: str) -> ClassControls:
        self._class(action)
        return self.store.set_shadow(action, on, operator=self._who(operator), now=self.clock())

    def envelope(self, action: str) -> Envelope:
        self._class(action)
        return self.store.controls(action).envelope

    def step(
        self,
        action: str,
        axis: str,
        new: object,
        *,
        evidence: Mapping[str, object],
        operator: str,
        reverse_on: str | None = None,
    ) -> AuthorityStep:
        """Move one envelope axis, naming the evidence and the condition that reverses it.

        A step that widens the axis names evidence the boundary recomputes now from its own
        records (:meth:`step_evidence` gives it) and a breaker trip that reverses it
        (``breaker_trip`` by default; ``manual`` alone is refused). A step that tightens names
        a note and is reversed only by hand. The oversight tier is not an axis: a tier floor
        is never lowered by evidence.
        """
        self._class(action)
        who = self._who(operator)
        now = self.clock()
        clean = parse_axis_value(axis, new)
        current = self.store.controls(action).envelope.axis(axis)
        if widens(axis, current, clean) or (isinstance(evidence, Mapping) and "kind" in evidence):
            evidence = verify_evidence(self.store, self.registry, action, axis, evidence, now=now)
        return self.store.apply_authority_step(
            action, axis, new, evidence=evidence, reverse_on=reverse_on, operator=who, now=now
        )

    def step_evidence(
        self, action: str, axis: str, *, kind: str, since: float, until: float
    ) -> dict[str, object]:
        """The evidence a step widening ``axis`` may name: ``kind`` (``shadow_report`` or
        ``operations``) of ``action`` over ``[since, until)``, its figures and digest."""
        return measure_evidence(self.store, self.registry, action, axis, kind, since, until)

    def history(self, action: str | None = None) -> list[AuthorityStep]:
        if action is not None:
            self._class(action)
        return self.store.authority_history(action)

    # --- approvals ------------------------------------------------------------------------

    def pending(self, *, limit: int = 1000) -> list[Operation]:
        return self.store.list_operations(state=State.AWAITING_APPROVAL, limit=limit)

    def approve(
        self,
        operation_id: str,
        *,
        fingerprint: str,
        approver: str,
        scope: str = "default",
        reason: str | None = None,
        claimed_roles: Collection[str] = (),
    ) -> ApprovalOutcome:
        """Approve exactly the payload ``fingerprint`` of ``operation_id``. ``claimed_roles``:
        the approver roles the approver's verified credential asserts (docs/authority.md).

        Complete approvals move the row to ``validated`` and, when its proposer submitted it
        to be sent, release it to the standing dispatcher (``outcome.released``); a row
        journalled with ``Gate.propose`` stays its caller's to dispatch.
        """
        return self._decide(
            operation_id, fingerprint, approver, scope, True, reason, tuple(claimed_roles)
        )

    def refuse(
        self,
        operation_id: str,
        *,
        fingerprint: str,
        approver: str,
        scope: str = "default",
        reason: str | None = None,
    ) -> ApprovalOutcome:
        """Refuse the payload; the row ends ``denied``."""
        return self._decide(operation_id, fingerprint, approver, scope, False, reason)

    def _decide(
        self,
        operation_id: str,
        fingerprint: str,
        approver: str,
        scope: str,
        approve: bool,
        reason: str | None,
        claimed: tuple[str, ...] = (),
    ) -> ApprovalOutcome:
        validate_identity(scope, operation_id)
        try:
            who = self._who(approver)
        except ControlError as exc:
            raise InvalidApprover(exc.message) from None
        now = self.clock()
        try:
            if approve and self.approver_roles is not None:
                row = self.store.get(scope, operation_id)
                if row is not None:
                    self.approver_roles.require(row.action, who, claimed)
            outcome = self.store.decide_approval(
                scope,
                operation_id,
                approver=who,
                fingerprint=fingerprint,
                approve=approve,
                reason=reason,
                now=now,
                roles=claimed,
                # A proposal handle becomes an operation at its completing approval: the id
                # is minted here, once per answer, and used only if this answer completes it.
                mint_as=mint() if is_proposal_handle(operation_id) else None,
            )
        except ApprovalError as exc:
            self.store.append_audit(
                "approval_refused",
                {"approver": who, "fingerprint": fingerprint, "error": exc.to_dict()},
                now=now,
                scope=scope,
                operation_id=operation_id,
            )
            raise
        if outcome.expired:
            raise ApprovalExpired(
                f"the approval window of {operation_id!r} closed; it is now denied"
            )
        if approve and self.on_approved is not None:
            # The approvals now live under the operation's id (a handed-over proposal's too).
            self.on_approved(scope, outcome.operation.operation_id, who)
        return outcome

    def expire_approvals(self) -> list[Operation]:
        return self.store.expire_approvals(now=self.clock())

    # --- shadow mode ----------------------------------------------------------------------

    def feed_incumbent(
        self, correlation_id: str, action: str, intent: Mapping[str, object] | None, *, source: str
    ) -> str | None:
        """Record what the incumbent (a human, the old system) did; ``None``: it did nothing.

        ``intent`` is parsed like an agent's intent (``intent_version`` and ``action`` may be
        left out), so the comparison is by fingerprint of the canonical effect. Returns it.
        """
        ac = self._class(action)
        if not isinstance(correlation_id, str) or not IDENTITY_PATTERN.fullmatch(correlation_id):
            raise ControlError(
                f"correlation id {correlation_id!r} must match {IDENTITY_PATTERN.pattern}",
                field="correlation_id",
            )
        fingerprint: str | None = None
        effect: dict[str, Any] | None = None
        if intent is not None:
            body = {"intent_version": min(ac.schema_versions), "action": action, **intent}
            parsed = self.registry.parse(action, body)
            fingerprint, effect = parsed.fingerprint, dict(parsed.effect)
        self.store.record_incumbent(
            correlation_id, action, fingerprint, effect, source=self._who(source), now=self.clock()
        )
        return fingerprint

    def shadow_report(
        self,
        action: str | None = None,
        *,
        window: float | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> ShadowReport:
        """The agent against the incumbent (see :mod:`effectgate._execute.shadow`): overall,
        and per model, harness version and ``window`` seconds; cases from ``since`` until
        ``until`` (epoch seconds), so a model change can be measured on its own."""
        if action is not None:
            self._class(action)
        return build_report(
            self.store.shadow_pairs(action), action, window=window, since=since, until=until
        )

    def model_windows(self, action: str | None = None) -> list[tuple[ModelWindow, ShadowReport]]:
        """Each comparison window a new proposer model opened, with the shadow report of that
        class over it (every case of the window, so the new model's group is in its groups)."""
        if action is not None:
            self._class(action)
        return [
            (w, self.shadow_report(w.action, since=w.opened_at, until=w.closes_at))
            for w in self.store.model_windows(action)
        ]

    # --- audit ----------------------------------------------------------------------------

    def verify_audit(
        self, *, expect_heads: Mapping[int, tuple[int, str]] | None = None
    ) -> VerifyResult:
        return verify_store(self.store, expect_heads=expect_heads)

    def export_evidence(self, operation_id: str, *, scope: str = "default") -> dict[str, Any]:
        validate_identity(scope, operation_id)
        return export_bundle(self.store, operation_id, scope=scope)
