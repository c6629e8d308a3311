"""The grants role: delegated authority, written once over :class:`StoreHooks`.

A grant is one row; a delegation is a row naming its parent. Containment is decided by the
pure core (:func:`effectgate._core.grants.check_contained`) inside the delegation's transaction,
against the parent as that transaction reads it. Revocation is transitive (every grant beneath
a revoked one is revoked in the same transaction), and a grant counts at use time only while its
whole chain up to the root is live (:meth:`GrantRoles.live_grants_for`), so a delegation that
raced its parent's revocation never counts. Every change is a chained audit entry in its own
transaction; a break-glass grant also raises an alert.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from effectgate._core.grants import ANY, MAX_HOPS, Grant, GrantSpec, check_contained
from effectgate.errors import ControlError, GrantNotFound, GrantWider
from effectgate.store._hooks import StoreHooks
from effectgate.store._principals import check_actor
from effectgate.store._tx import SharedTx
from effectgate.store._value_record import principal_value
from effectgate.store.base import IDENTITY_PATTERN, Operation, credential_marker

__all__ = ["GrantRoles", "live_children"]

_COLUMNS = (
    "grant_id, holder, spec, created_by, created_at, parent_id, depth, revoked_at, revoked_by"
)


def _spec_from(text: str) -> GrantSpec:
    d: dict[str, Any] = json.loads(text)
    return GrantSpec(
        actions=frozenset(d["actions"]),
        targets=frozenset(d["targets"]),
        environments=frozenset(d["environments"]),
        scope=str(d["scope"]),
        expires_at=float(d["expires_at"]),
        max_value=None if d["max_value"] is None else Decimal(d["max_value"]),
        budget=None if d["budget"] is None else Decimal(d["budget"]),
        hops=int(d["hops"]),
        break_glass=bool(d["break_glass"]),
    )


def _grant(r: Sequence[Any]) -> Grant:
    return Grant(
        grant_id=str(r[0]),
        holder=str(r[1]),
        spec=_spec_from(str(r[2])),
        created_by=str(r[3]),
        created_at=float(r[4]),
        parent_id=None if r[5] is None else str(r[5]),
        depth=int(r[6]),
        revoked_at=None if r[7] is None else float(r[7]),
        revoked_by=None if r[8] is None else str(r[8]),
    )


def _holder(name: object) -> str:
    if not isinstance(name, str) or not IDENTITY_PATTERN.fullmatch(name):
        raise ControlError(f"{name!r} must match {IDENTITY_PATTERN.pattern}", field="holder")
    return name


def live_children(tx: SharedTx, grant_ids: Sequence[str]) -> list[str]:
    """The unrevoked grants delegated directly beneath ``grant_ids``: the next step of a
    transitive revocation."""
    marks = ",".join("?" * len(grant_ids))
    return [
        str(r[0])
        for r in tx.rows(
            f"SELECT grant_id FROM grants WHERE parent_id IN ({marks}) AND revoked_at IS NULL",
            tuple(grant_ids),
        )
    ]


class GrantRoles(StoreHooks):
    """Grants: create, delegate, revoke (transitively), read, and the value dispatched."""

    def create_grant(self, holder: str, spec: GrantSpec, *, created_by: str, now: float) -> Grant:
        """A root grant (an operator's act). A break-glass grant is audited and alerted."""
        grant = Grant(_new_id(), _holder(holder), spec, check_actor(created_by), now)
        if spec.expires_at <= now:
            raise ControlError("the grant would be born expired", field="expires_at")

        def work(tx: SharedTx, _: Operation | None) -> Grant:
            self._insert(tx, grant, "grant_created")
            if spec.break_glass:
                detail = {
                    "grant_id": grant.grant_id,
                    "holder": grant.holder,
                    "by": grant.created_by,
                }
                tx.audit("grant_break_glass", detail, now)
                tx.record_alert(
                    "break-glass",
                    f"grant:{grant.grant_id}",
                    None,
                    f"break-glass grant {grant.grant_id} to {grant.holder} by "
                    f"{grant.created_by}, until {spec.expires_at:.0f}",
                    detail,
                    now,
                )
            return grant

        return self._run(work, f"create grant for {holder}")

    def delegate_grant(
        self, parent_id: str, holder: str, spec: GrantSpec, *, by: str, now: float
    ) -> Grant:
        """A grant beneath ``parent_id``, made by its holder, contained on every axis."""
        holder = _holder(holder)
        by = check_actor(by)

        def work(tx: SharedTx, _: Operation | None) -> Grant:
            parent = self._get_in(tx, parent_id)
            if parent.holder != by:
                raise GrantWider(
                    f"only {parent.holder!r}, the holder of grant {parent_id}, may delegate it",
                    field="holder",
                )
            check_contained(parent, spec, now=now)
            if parent.depth + 1 > MAX_HOPS:
                raise GrantWider(f"a chain has at most {MAX_HOPS} hops", field="hops")
            grant = Grant(_new_id(), holder, spec, by, now, parent.grant_id, parent.depth + 1)
            self._insert(tx, grant, "grant_delegated")
            return grant

        return self._run(work, f"delegate grant {parent_id} to {holder}")

    def revoke_grants(
        self,
        *,
        by: str,
        now: float,
        grant_id: str | None = None,
        holder: str | None = None,
        created_by: str | None = None,
        reason: str = "",
    ) -> list[Grant]:
        """Revoke the live grants named (by id, by holder or by creator) and, transitively,
        every grant beneath them. :class:`GrantNotFound` when nothing live matched."""
        who = check_actor(by)
        picks = [(c, v) for c, v in (("grant_id", grant_id), ("holder", holder),
                                     ("created_by", created_by)) if v is not None]  # fmt: skip
        if len(picks) != 1:
            raise ControlError("name exactly one of grant, holder, creator", field="revoke")
        column, value = picks[0]

        def work(tx: SharedTx, _: Operation | None) -> list[Grant]:
            seeds = [
                str(r[0])
                for r in tx.rows(
                    f"SELECT grant_id FROM grants WHERE {column} = ? AND revoked_at IS NULL",
                    (value,),
                )
            ]
            if not seeds:
                raise GrantNotFound(f"no live grant has {column} {value!r}", field=column)
            done: list[Grant] = []
            frontier = seeds
            while frontier:
                marks = ",".join("?" * len(frontier))
                rows = tx.rows(
                    f"UPDATE grants SET revoked_at = ?, revoked_by = ? WHERE grant_id IN "
                    f"({marks}) AND revoked_at IS NULL RETURNING {_COLUMNS}",
                    (now, who, *frontier),
                )
                done.extend(_grant(r) for r in rows)
                frontier = live_children(tx, frontier)
            tx.audit(
                "grants_revoked",
                {
                    column: value,
                    "grant_ids": sorted(g.grant_id for g in done),
                    "reason": reason,
                    "by": who,
                    **credential_marker(who),
                },
                now,
            )
            return done

        return self._run(work, f"revoke grants by {column}")

    def get_grant(self, grant_id: str) -> Grant:
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,), "get_grant"
        )
        if not rows:
            raise GrantNotFound(f"no grant {grant_id!r}", field="grant_id")
        return _grant(rows[0])

    def list_grants(
        self, *, holder: str | None = None, include_revoked: bool = False
    ) -> list[Grant]:
        terms = [] if include_revoked else ["revoked_at IS NULL"]
        args: list[Any] = []
        if holder is not None:
            terms.append("holder = ?")
            args.append(holder)
        where = f"WHERE {' AND '.join(terms)} " if terms else ""
        return [
            _grant(r)
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM grants {where}ORDER BY created_at, depth, grant_id",
                args,
                "list_grants",
            )
        ]

    def live_grants_for(self, holder: str, now: float) -> list[Grant]:
        """The holder's grants that count now: unexpired, unrevoked, and every ancestor too."""
        out = []
        for grant in self.list_grants(holder=holder):
            chain_live = grant.live(now)
            parent = grant.parent_id
            while chain_live and parent is not None:
                above = self.get_grant(parent)
                chain_live = above.live(now)
                parent = above.parent_id
            if chain_live:
                out.append(grant)
        return out

    def dispatched_micros(self, holder: str, actions: frozenset[str], since: float) -> int:
        """Value dispatched since ``since`` of operations ``holder`` proposed, in ``actions``.

        Reads the one record of dispatched value (store/_value_record.py), which the
        envelope's exposure window and a plan's value dimension read too; the proposer comes
        from the journal entry the gate wrote from the authenticated credential.
        """
        return principal_value(self._rows, holder, None if ANY in actions else actions, since)

    # --- helpers -------------------------------------------------------------------------

    @staticmethod
    def _get_in(tx: SharedTx, grant_id: str) -> Grant:
        rows = tx.rows(f"SELECT {_COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,))
        if not rows:
            raise GrantNotFound(f"no grant {grant_id!r}", field="grant_id")
        return _grant(rows[0])

    @staticmethod
    def _insert(tx: SharedTx, grant: Grant, kind: str) -> None:
        spec = grant.spec
        tx.rows(
            "INSERT INTO grants (grant_id, holder, spec, created_by, created_at, parent_id, "
            "depth, expires_at, break_glass) VALUES (?,?,?,?,?,?,?,?,?) RETURNING 1",
            (
                grant.grant_id,
                grant.holder,
                json.dumps(spec.to_dict(), sort_keys=True),
                grant.created_by,
                grant.created_at,
                grant.parent_id,
                grant.depth,
                spec.expires_at,
                spec.break_glass,
            ),
        )
        tx.audit(
            kind,
            {**grant.to_dict(), "by": grant.created_by, **credential_marker(grant.created_by)},
            grant.created_at,
        )


def _new_id() -> str:
    return "gr_" + secrets.token_hex(8)
