"""Who may act and under which authority: principals, grants, governed policy versions and the
replay nonces of signed channels. Imports only ``store.base`` and the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from effectgate._core.governed_policy import ActivePolicy, PolicyProposal
    from effectgate._core.grants import Grant, GrantSpec
    from effectgate._core.principals import IssuedToken, Principal, PrincipalRecord

__all__ = ["ChannelNonces", "Grants", "PolicyVersions", "Principals"]


@runtime_checkable
class Principals(Protocol):
    """Who may call: principals (name, role, tenant scope) and their tokens, by digest only.

    Authentication reads the store on every request, so a revocation holds at once in every
    replica. Each change is audited in its own transaction.
    """

    def create_principal(
        self,
        name: str,
        role: str,
        scope: str,
        *,
        created_by: str,
        now: float,
        replace: bool = False,
    ) -> IssuedToken:
        """A new principal and its token (the plaintext is in the result, once, and nowhere
        else). A live principal of that name is refused unless ``replace`` (which revokes it
        in the same transaction)."""

    def revoke_principal(self, name: str, *, revoked_by: str, now: float) -> PrincipalRecord:
        """Revoke the live principal ``name``; raises PrincipalNotFound when there is none."""

    def list_principals(self, *, include_revoked: bool = False) -> list[PrincipalRecord]: ...

    def principal_for_token(self, token: str) -> Principal | None:
        """The live principal holding ``token``, or None."""


@runtime_checkable
class Grants(Protocol):
    """Delegated authority (docs/authority.md): grants, delegations contained in their parent
    on every axis, transitive revocation. Each change is audited in its own transaction."""

    def create_grant(
        self, holder: str, spec: GrantSpec, *, created_by: str, now: float
    ) -> Grant: ...

    def delegate_grant(
        self, parent_id: str, holder: str, spec: GrantSpec, *, by: str, now: float
    ) -> Grant:
        """Raises GrantWider naming the axis when ``spec`` is wider than the parent."""

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
        """Revoke by grant, holder or creator, and everything delegated beneath."""

    def get_grant(self, grant_id: str) -> Grant: ...

    def list_grants(
        self, *, holder: str | None = None, include_revoked: bool = False
    ) -> list[Grant]: ...

    def live_grants_for(self, holder: str, now: float) -> list[Grant]:
        """Grants that count now: the grant and every ancestor unrevoked and unexpired."""

    def dispatched_micros(self, holder: str, actions: frozenset[str], since: float) -> int:
        """Value dispatched since ``since`` of operations ``holder`` proposed in ``actions``."""


@runtime_checkable
class PolicyVersions(Protocol):
    """Governed policy (docs/authority.md): versions by hash, proposals approved by a principal
    other than their author, the one active version every replica follows."""

    def propose_policy(
        self, document: str, policy_hash: str, *, author: str, now: float, note: str = ""
    ) -> PolicyProposal: ...

    def load_policy(
        self, document: str, policy_hash: str, *, by: str, now: float, note: str = ""
    ) -> PolicyProposal:
        """Apply at once, recorded and audited (where approval is not required)."""

    def approve_policy(self, proposal_id: str, *, approver: str, now: float) -> PolicyProposal:
        """Apply an open proposal; never by its author; only over the base it was made on."""

    def active_policy(self) -> ActivePolicy | None: ...

    def reject_policy(
        self, proposal_id: str, *, by: str, now: float, reason: str = ""
    ) -> PolicyProposal: ...

    def get_policy_proposal(self, proposal_id: str) -> PolicyProposal: ...

    def list_policy_proposals(self, *, limit: int = 100) -> list[PolicyProposal]: ...


@runtime_checkable
class ChannelNonces(Protocol):
    """Replay protection for signed callbacks (docs/authority.md), shared by every replica."""

    def claim_nonce(self, channel: str, nonce: str, *, now: float, forget_before: float) -> bool:
        """True the first time ``(channel, nonce)`` is seen; False for a replay (audited)."""

    def claim_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        now: float,
        lease: float,
    ) -> bool:
        """Whether ``holder`` may announce this approval round on ``channel`` now."""

    def finish_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        delivered: bool,
        detail: Mapping[str, object],
        now: float,
    ) -> None:
        """Record an announcement's outcome, audited; delivered rounds are never sent again."""
