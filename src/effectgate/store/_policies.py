"""The policy versions role: governed policy changes, written once over :class:`StoreHooks`.

A policy document is stored once per hash (``policy_versions``); a change is a proposal
(``policy_proposals``) that takes effect only when a principal other than its author approves
it, and only if the active policy is still the one it was proposed against; or, where approval
is not required, by an explicit, audited load. ``policy_active`` holds the one active version:
every replica reads it, so an approved change reaches them all without a restart.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from effectgate._core.governed_policy import ActivePolicy, PolicyProposal
from effectgate.errors import ControlError, SelfApproval
from effectgate.store._hooks import StoreHooks
from effectgate.store._principals import check_actor
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker

__all__ = ["PolicyRoles"]

_COLUMNS = (
    "p.proposal_id, p.policy_hash, v.document, p.base_hash, p.author, p.created_at, p.state, "
    "p.decided_by, p.decided_at, p.note"
)
_FROM = "policy_proposals p JOIN policy_versions v ON v.policy_hash = p.policy_hash"


def _find(tx: SharedTx, proposal_id: str) -> PolicyProposal:
    found = tx.rows(f"SELECT {_COLUMNS} FROM {_FROM} WHERE p.proposal_id = ?", (proposal_id,))
    if not found:
        raise ControlError(f"no policy proposal {proposal_id!r}", field="proposal")
    return _proposal(found[0])


def _proposal(r: Sequence[Any]) -> PolicyProposal:
    return PolicyProposal(
        str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]), str(r[4]),
        float(r[5]), str(r[6]), None if r[7] is None else str(r[7]),
        None if r[8] is None else float(r[8]), str(r[9] or ""),
    )  # fmt: skip


class PolicyRoles(StoreHooks):
    """Policy versions: propose, approve (by another principal), load, read the active one."""

    def propose_policy(
        self, document: str, policy_hash: str, *, author: str, now: float, note: str = ""
    ) -> PolicyProposal:
        who = check_actor(author)

        def work(tx: SharedTx, _: Operation | None) -> PolicyProposal:
            return self._propose_in(tx, document, policy_hash, who, now, note, "open")

        return self._run(work, "propose policy")

    def load_policy(
        self, document: str, policy_hash: str, *, by: str, now: float, note: str = ""
    ) -> PolicyProposal:
        """Apply a policy at once, as a recorded, audited change (where approval is not
        required): a proposal by ``by``, applied by ``by``."""
        who = check_actor(by)

        def work(tx: SharedTx, _: Operation | None) -> PolicyProposal:
            p = self._propose_in(tx, document, policy_hash, who, now, note, "loaded")
            self._activate_in(tx, p, who, now)
            return p

        return self._run(work, "load policy")

    def approve_policy(self, proposal_id: str, *, approver: str, now: float) -> PolicyProposal:
        """Apply an open proposal. Refused: its author approving (:class:`SelfApproval`), a
        proposal not open, or one whose base is no longer the active policy."""
        who = check_actor(approver)

        def work(tx: SharedTx, _: Operation | None) -> PolicyProposal:
            p = _find(tx, proposal_id)
            if p.author == who:
                raise SelfApproval(f"{who!r} proposed {proposal_id}; another principal approves")
            if p.state != "open":
                raise ControlError(f"proposal {proposal_id} is {p.state}", field="proposal")
            active = tx.rows("SELECT policy_hash FROM policy_active WHERE slot = 1", ())
            current = str(active[0][0]) if active else None
            if current != p.base_hash:
                raise ControlError(
                    f"proposal {proposal_id} was made against {p.base_hash}, and the active "
                    f"policy is now {current}: review the diff again and propose anew",
                    field="proposal",
                )
            tx.rows(
                "UPDATE policy_proposals SET state = 'applied', decided_by = ?, decided_at = ? "
                "WHERE proposal_id = ? RETURNING 1",
                (who, now, proposal_id),
            )
            self._activate_in(tx, p, who, now)
            return PolicyProposal(
                p.proposal_id, p.policy_hash, p.document, p.base_hash, p.author, p.created_at,
                "applied", who, now, p.note,
            )  # fmt: skip

        return self._run(work, f"approve policy {proposal_id}")

    def reject_policy(
        self, proposal_id: str, *, by: str, now: float, reason: str = ""
    ) -> PolicyProposal:
        """Close an open proposal without applying it (its author may withdraw it; anyone
        else may refuse it), audited as ``policy_rejected``."""
        who = check_actor(by)

        def work(tx: SharedTx, _: Operation | None) -> PolicyProposal:
            p = _find(tx, proposal_id)
            # The state is compared in the UPDATE too: a concurrent approve wins or loses whole.
            moved = tx.rows(
                "UPDATE policy_proposals SET state = 'rejected', decided_by = ?, decided_at = ? "
                "WHERE proposal_id = ? AND state = 'open' RETURNING 1",
                (who, now, proposal_id),
            )
            if not moved:
                raise ControlError(f"proposal {proposal_id} is {p.state}", field="proposal")
            tx.audit(
                "policy_rejected",
                {"proposal_id": proposal_id, "policy_hash": p.policy_hash, "author": p.author,
                 "by": who, "reason": reason[:500], **credential_marker(who)},
                now,
            )  # fmt: skip
            return PolicyProposal(
                p.proposal_id, p.policy_hash, p.document, p.base_hash, p.author, p.created_at,
                "rejected", who, now, p.note,
            )  # fmt: skip

        return self._run(work, f"reject policy {proposal_id}")

    def active_policy(self) -> ActivePolicy | None:
        rows = self._rows(
            "SELECT a.policy_hash, v.document, a.activated_at, a.activated_by, a.proposal_id "
            "FROM policy_active a JOIN policy_versions v ON v.policy_hash = a.policy_hash "
            "WHERE a.slot = 1",
            (),
            "active_policy",
        )
        if not rows:
            return None
        r = rows[0]
        return ActivePolicy(str(r[0]), str(r[1]), float(r[2]), str(r[3]), str(r[4]))

    def get_policy_proposal(self, proposal_id: str) -> PolicyProposal:
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE p.proposal_id = ?", (proposal_id,), "proposal"
        )
        if not rows:
            raise ControlError(f"no policy proposal {proposal_id!r}", field="proposal")
        return _proposal(rows[0])

    def list_policy_proposals(self, *, limit: int = 100) -> list[PolicyProposal]:
        return [
            _proposal(r)
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM {_FROM} ORDER BY p.created_at DESC, p.proposal_id LIMIT ?",
                (limit,),
                "list_policy_proposals",
            )
        ]

    # --- helpers -------------------------------------------------------------------------

    @staticmethod
    def _propose_in(
        tx: SharedTx, document: str, policy_hash: str, who: str, now: float, note: str, state: str
    ) -> PolicyProposal:
        tx.rows(
            "INSERT INTO policy_versions (policy_hash, document, created_at, created_by) "
            "VALUES (?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
            (policy_hash, document, now, who),
        )
        active = tx.rows("SELECT policy_hash FROM policy_active WHERE slot = 1", ())
        base = str(active[0][0]) if active else None
        p = PolicyProposal(
            "pp_" + secrets.token_hex(8), policy_hash, document, base, who, now, state,
            who if state == "loaded" else None, now if state == "loaded" else None, note[:500],
        )  # fmt: skip
        tx.rows(
            "INSERT INTO policy_proposals (proposal_id, policy_hash, base_hash, author, "
            "created_at, state, decided_by, decided_at, note) VALUES (?,?,?,?,?,?,?,?,?) "
            "RETURNING 1",
            (p.proposal_id, policy_hash, base, who, now, state, p.decided_by, p.decided_at,
             p.note),
        )  # fmt: skip
        tx.audit(
            "policy_proposed" if state == "open" else "policy_loaded",
            {"proposal_id": p.proposal_id, "policy_hash": policy_hash, "base_hash": base,
             "by": who, **credential_marker(who)},
            now,
        )  # fmt: skip
        return p

    @staticmethod
    def _activate_in(tx: SharedTx, p: PolicyProposal, who: str, now: float) -> None:
        tx.rows(
            "INSERT INTO policy_active (slot, policy_hash, activated_at, activated_by, "
            "proposal_id) VALUES (1,?,?,?,?) ON CONFLICT (slot) DO UPDATE SET "
            "policy_hash = excluded.policy_hash, activated_at = excluded.activated_at, "
            "activated_by = excluded.activated_by, proposal_id = excluded.proposal_id "
            "RETURNING 1",
            (p.policy_hash, now, who, p.proposal_id),
        )
        tx.audit(
            "policy_activated",
            {"proposal_id": p.proposal_id, "policy_hash": p.policy_hash, "author": p.author,
             "by": who, **credential_marker(who)},
            now,
        )  # fmt: skip
