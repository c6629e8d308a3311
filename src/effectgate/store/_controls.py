"""The controls, approvals and alerts roles, written once over :class:`StoreHooks`."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from effectgate._core.breaker_signals import WindowCounts
from effectgate._core.controls import (
    Alert,
    ApprovalOutcome,
    ApprovalRecord,
    ApprovalRequest,
    AuthorityStep,
    ClassControls,
    ShadowPair,
)
from effectgate._core.effects import is_minted_id, is_proposal_handle
from effectgate._core.states import State
from effectgate.errors import DuplicateApprover, NotAwaitingApproval
from effectgate.store import _guard as g
from effectgate.store import _journal as j
from effectgate.store import _sql as sql
from effectgate.store._handover import hand_over
from effectgate.store._hooks import Hold, StoreHooks, scoped
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker, dumps, where

__all__ = ["ControlRoles", "SignalReads"]


def _approval(r: Sequence[Any]) -> ApprovalRecord:
    return ApprovalRecord(
        str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]), float(r[4]),
        tuple(json.loads(r[5])) if r[5] else (), None if r[6] is None else str(r[6]),
        None if r[7] is None else float(r[7]),
    )  # fmt: skip


class SignalReads(StoreHooks):
    """The breaker's reads: its signal window and the targets seen (also inside a journal's
    transaction, for an evaluation token's recheck: store/_tx_reads.py)."""

    def breaker_window(self, action: str, since: float, repeat: str) -> WindowCounts:
        r = self._rows(sql.SIGNAL_STATS, (repeat, action, since), "breaker window")[0]
        return WindowCounts(int(r[0]), int(r[1]), int(r[2]), int(r[4]), int(r[3]))

    def seen_targets(self, targets: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        if not targets:
            return set()
        terms = " OR ".join("(action = ? AND target = ?)" for _ in targets)
        args = [x for pair in targets for x in pair]
        found = self._rows(f"SELECT action, target FROM known_targets WHERE {terms}", args)
        return {(str(r[0]), str(r[1])) for r in found}


class ControlRoles(SignalReads):
    """Controls (switches, breakers, steps, shadow), approvals and alerts."""

    # --- controls -----------------------------------------------------------------------

    def controls(self, action: str) -> ClassControls:
        rows = self._rows(sql.SELECT_CONTROLS, (action,), "controls")
        return sql.controls_from_row(action, rows[0] if rows else None)

    def list_controls(self) -> list[ClassControls]:
        return [
            sql.controls_from_row(r[0], r[1:])
            for r in self._rows(
                f"SELECT action, {sql.CONTROL_COLUMNS} FROM class_controls ORDER BY action"
            )
        ]

    def count_dispatched(self, since: float) -> dict[str, int]:
        return {
            str(r[0]): int(r[1])
            for r in self._rows(
                "SELECT action, count(*) FROM dispatch_log WHERE at >= ? GROUP BY action", (since,)
            )
        }

    def dispatch_window(self, action: str, since: float) -> tuple[int, int]:
        r = self._rows(sql.DISPATCH_USAGE, (action, since), "dispatch window")[0]
        return int(r[0]), int(r[1])

    def _change_controls(
        self,
        action: str,
        *,
        operator: str,
        now: float,
        kind: str,
        detail: Mapping[str, object],
        reset_signals: bool = False,
        release: bool = False,
        **changes: Any,
    ) -> ClassControls:
        """One audited transaction that replaces a class's control row (``release``: the
        change may lift holds, so the class's held rows go to the standing dispatcher)."""

        def work(tx: SharedTx, _: Operation | None) -> ClassControls:
            new = replace(tx.controls(action), **changes, updated_by=operator, updated_at=now)
            tx.save_controls(new, at=now)
            if release:
                tx.release_holds(action)
            if reset_signals:
                # The window that tripped the breaker must not trip it again at once; the
                # evidence stays in the audit log.
                tx.write("DELETE FROM control_signals WHERE action = ?", (action,))
            tx.audit(
                kind,
                {"action": action, "operator": operator, **detail, **credential_marker(operator)},
                now,
            )
            return new

        return self._run(work, f"{kind} {action}", Hold(exclusive_class=action))

    def set_kill(
        self, action: str, on: bool, *, operator: str, reason: str | None, now: float
    ) -> ClassControls:
        return self._change_controls(
            action,
            operator=operator,
            now=now,
            kind="kill_switch_on" if on else "kill_switch_off",
            detail={"reason": reason},
            release=not on,
            killed=on,
            kill_reason=reason if on else None,
        )

    def reset_breaker(
        self, action: str, *, operator: str, reason: str | None, now: float
    ) -> ClassControls:
        return self._change_controls(
            action,
            operator=operator,
            now=now,
            kind="breaker_reset",
            detail={"reason": reason},
            reset_signals=True,
            release=True,
            breaker_open=False,
            breaker_reason=None,
        )

    def set_shadow(self, action: str, on: bool, *, operator: str, now: float) -> ClassControls:
        return self._change_controls(
            action,
            operator=operator,
            now=now,
            kind="shadow_on" if on else "shadow_off",
            detail={},
            # A held row of a class in shadow mode is shadowed when retried, not held.
            release=on,
            shadow=on,
        )

    def trip_breaker(
        self,
        action: str,
        signals: Sequence[tuple[str, str]],
        *,
        now: float,
        trigger: str | None = None,
    ) -> bool:
        """Open ``action``'s breaker for ``signals`` (``(name, why)``), reversing the steps
        conditioned on it and recording its alert; False if it was open already."""

        def work(tx: SharedTx, _: Operation | None) -> bool:
            ctl = tx.controls(action)
            if ctl.breaker_open:
                return False
            g.trip_breaker(tx, ctl, list(signals), now=now, op_key=trigger)
            return True

        return self._run(work, f"trip breaker {action}", Hold(exclusive_class=action))

    def apply_authority_step(
        self,
        action: str,
        axis: str,
        new: object,
        *,
        evidence: Mapping[str, object],
        reverse_on: str | None,
        operator: str,
        now: float,
    ) -> AuthorityStep:
        return self._run(
            lambda tx, _: g.apply_step(
                tx,
                action,
                axis,
                new,
                evidence=evidence,
                reverse_on=reverse_on,
                operator=operator,
                now=now,
            ),
            f"authority step {action}",
            Hold(exclusive_class=action),
        )

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]:
        clause, args = where((("action =", action),))
        return [
            sql.step_from_row(r)
            for r in self._rows(
                f"SELECT {sql.STEP_COLUMNS} FROM authority_steps {clause} ORDER BY id",
                args,
                "authority_history",
            )
        ]

    def record_incumbent(
        self,
        correlation_id: str,
        action: str,
        fingerprint: str | None,
        effect: Mapping[str, object] | None,
        *,
        source: str,
        now: float,
    ) -> None:
        def work(tx: SharedTx, _: Operation | None) -> None:
            tx.write(
                sql.UPSERT_INCUMBENT,
                (
                    correlation_id,
                    action,
                    fingerprint,
                    dumps(effect) if effect is not None else None,
                    source,
                    now,
                ),
            )
            tx.audit(
                "incumbent_outcome",
                {
                    "correlation_id": correlation_id,
                    "action": action,
                    "fingerprint": fingerprint,
                    "source": source,
                },
                now,
            )

        self._run(work, "record_incumbent")

    def shadow_pairs(self, action: str | None = None) -> list[ShadowPair]:
        query = (
            sql.SHADOW_PAIRS.format(w="WHERE s.action = ?", a="AND i.action = ?")
            if action
            else sql.SHADOW_PAIRS.format(w="", a="")
        )
        return [
            sql.shadow_pair_from_row(r)
            for r in self._rows(query, (action, action) if action else (), "shadow_pairs")
        ]

    # --- approvals ------------------------------------------------------------------------

    def approval_request(self, scope: str, operation_id: str) -> ApprovalRequest | None:
        rows = self._rows(sql.SELECT_REQUEST, (scope, operation_id), "approval_request")
        if not rows:
            return None
        r = rows[0]
        return ApprovalRequest(
            scope, operation_id, r[0], int(r[1]), float(r[2]), tuple(json.loads(r[3])), bool(r[4])
        )

    def list_approvals(self, scope: str, operation_id: str) -> list[ApprovalRecord]:
        return [
            _approval(r)
            for r in self._rows(
                "SELECT approver, verdict, fingerprint, reason, at, roles, precondition, "
                "precondition_at FROM approvals WHERE scope = ? AND operation_id = ? "
                "ORDER BY at, approver",
                (scope, operation_id),
                "list_approvals",
            )
        ]

    def decide_approval(
        self,
        scope: str,
        operation_id: str,
        *,
        approver: str,
        fingerprint: str,
        approve: bool,
        reason: str | None,
        now: float,
        roles: Collection[str] = (),
        mint_as: str | None = None,
    ) -> ApprovalOutcome:
        """One answer; ``roles``: the approver roles the approver's verified credential
        asserts, kept with the approval for the check before dispatch. ``mint_as``: the
        operation id a proposal handle's completing approval hands it over to (_handover)."""
        claimed = json.dumps(sorted(set(roles))) if roles else None

        def work(tx: SharedTx, row: Operation | None) -> ApprovalOutcome:
            req = tx.rows(sql.SELECT_REQUEST, (scope, operation_id))
            row, required, expires_at = j.check_approval(
                row,
                req[0] if req else None,
                scope=scope,
                operation_id=operation_id,
                approver=approver,
                fingerprint=fingerprint,
            )
            answered = tx.rows(
                "SELECT approver, verdict FROM approvals WHERE scope = ? AND operation_id = ?",
                (scope, operation_id),
            )
            if any(who == approver for who, _ in answered):
                raise DuplicateApprover(
                    f"{approver!r} already answered for {operation_id!r}; "
                    "approvers must be distinct"
                )
            if now >= expires_at:
                expired = j.move_locked(
                    tx,
                    row,
                    State.DENIED,
                    now,
                    "approval expired",
                    {"by": approver, "reason": "approval expired"},
                )
                return ApprovalOutcome(expired, 0, required, expired=True)
            verdict = "approve" if approve else "refuse"
            tx.write(
                "INSERT INTO approvals (scope, operation_id, approver, verdict, fingerprint, "
                "reason, at, roles) VALUES (?,?,?,?,?,?,?,?)",
                (scope, operation_id, approver, verdict, fingerprint, reason, now, claimed),
            )
            tx.audit(
                "approval",
                {
                    "approver": approver,
                    "verdict": verdict,
                    "fingerprint": fingerprint,
                    "reason": reason,
                    **({"roles": json.loads(claimed)} if claimed else {}),
                    **credential_marker(approver),
                },
                now,
                scope,
                operation_id,
            )
            count = sum(1 for _, v in answered if v == "approve") + int(approve)
            if not approve:
                row = j.move_locked(
                    tx,
                    row,
                    State.DENIED,
                    now,
                    f"refused by {approver}",
                    {"by": approver, "reason": reason},
                )
            elif count >= required:
                # The proposer submitted it to be sent: completing the approvals releases it
                # to the standing dispatcher, recorded on the row and in its audit entry.
                release = bool(req and req[0][4])
                done = {"approvals": count, "required": required, "released": release}
                if is_proposal_handle(operation_id):
                    # A minted-id class's proposal: its operation id is minted now.
                    if mint_as is None or not is_minted_id(mint_as):
                        raise NotAwaitingApproval(
                            f"{operation_id!r} is a proposal handle: completing its approvals "
                            "mints its operation id (Operator.approve gives one)"
                        )
                    minted = hand_over(tx, row, mint_as, now, done, release)
                    return ApprovalOutcome(minted, count, required, released=release)
                row = j.move_locked(tx, row, State.VALIDATED, now, None, done)
                if release:
                    tx.write(
                        "UPDATE operations SET released_at = ? "
                        "WHERE scope = ? AND operation_id = ?",
                        (now, scope, operation_id),
                    )
                return ApprovalOutcome(row, count, required, released=release)
            return ApprovalOutcome(row, count, required)

        return self._run(
            work,
            f"approval {scope}:{operation_id}",
            Hold(key=(scope, operation_id), row=(scope, operation_id)),
        )

    def bind_approval_precondition(
        self,
        scope: str,
        operation_id: str,
        *,
        approver: str,
        fingerprint: str | None,
        detail: Mapping[str, object],
        now: float,
    ) -> bool:
        """Record on ``approver``'s approval of this round the precondition it was given
        against (``fingerprint`` None: the read failed), with a ``precondition_bound`` audit
        entry in the same transaction; False if there is no such approval (a new round began
        meanwhile: nothing to bind)."""

        def work(tx: SharedTx, _: Operation | None) -> bool:
            bound = tx.rows(
                "UPDATE approvals SET precondition = ?, precondition_at = ? WHERE scope = ? "
                "AND operation_id = ? AND approver = ? AND verdict = 'approve' RETURNING 1",
                (fingerprint, now, scope, operation_id, approver),
            )
            if not bound:
                return False
            tx.audit(
                "precondition_bound",
                {**detail, "approver": approver, "fingerprint": fingerprint},
                now,
                scope,
                operation_id,
            )
            return True

        return self._run(work, f"bind precondition {scope}:{operation_id}")

    def expire_approvals(self, *, now: float) -> list[Operation]:
        """Deny every ``awaiting_approval`` row whose approval window has closed."""
        keys = self._rows(
            "SELECT r.scope, r.operation_id FROM approval_requests r JOIN operations o "
            "ON o.scope = r.scope AND o.operation_id = r.operation_id "
            "WHERE o.state = 'awaiting_approval' AND r.expires_at <= ?",
            (now,),
            "expire_approvals",
        )

        def work(tx: SharedTx, row: Operation | None) -> Operation | None:
            if row is None or row.state is not State.AWAITING_APPROVAL:
                return None  # answered or expired by someone else meanwhile
            return j.move_locked(
                tx,
                row,
                State.DENIED,
                now,
                "approval expired",
                {"by": "system:expiry", "reason": "approval expired"},
            )

        out: list[Operation] = []
        for scope, op in keys:
            denied = self._run(work, f"expire {scope}:{op}", Hold(key=(scope, op), row=(scope, op)))
            if denied is not None:
                out.append(denied)
        return out

    # --- alerts -------------------------------------------------------------------------

    def record_alert(self, alert: Alert) -> bool:
        return self._run(
            lambda tx, _: tx.record_alert(
                alert.kind, alert.subject, alert.action, alert.message, alert.detail, alert.at
            ),
            "record_alert",
        )

    def list_alerts(self, limit: int = 1000) -> list[Alert]:
        return self.list_alerts_in(None, limit=limit)

    def list_alerts_in(self, scope: str | None = None, *, limit: int = 1000) -> list[Alert]:
        clause, args = scoped("subject", scope)
        return [
            sql.alert_from_row(r)
            for r in self._rows(
                f"SELECT {sql.ALERT_COLUMNS} FROM alerts {clause} ORDER BY id LIMIT ?",
                (*args, limit),
                "list_alerts",
            )
        ]
