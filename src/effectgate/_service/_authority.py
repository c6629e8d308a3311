"""The service's authority wiring: the approval hooks and the pre-dispatch stages it owes.

:func:`wire_authority` gives the operator its approver roles and the precondition binding;
:func:`authority_stages` returns the stages the gate's pipeline runs before each dispatch
(docs/continuations.md): the grant authoriser first, then the checks about a row's approvals;
:func:`wire_authority` installs them on the service's gate.

Each takes an :class:`AuthorityHost`, the few parts of the service it reads, not the service
itself, so this module does not import :mod:`effectgate._service._runtime`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from effectgate._execute.authority import (
    approver_revocation_check,
    approver_role_check,
    grant_authoriser,
)
from effectgate._execute.break_glass import BreakGlassUses
from effectgate._execute.preconditions import bind_precondition, precondition_check
from effectgate._execute.predispatch import Stage
from effectgate._service._channels import ApprovalWebhook
from effectgate._service._policy_gov import PolicyFollower

if TYPE_CHECKING:
    from effectgate._execute.adapter import Adapter
    from effectgate._execute.alerts import AlertSink
    from effectgate._execute.executor import Gate
    from effectgate._execute.operator import Operator
    from effectgate._service._config import ServiceConfig
    from effectgate._service._identity import RevocationFeed
    from effectgate.store.roles import Store

__all__ = [
    "AuthorityHost",
    "authority_stages",
    "revoked_check",
    "start_announcers",
    "wire_authority",
]


class AuthorityHost(Protocol):
    """What the authority wiring reads of the service (the runtime's ``Service`` is one): its
    config, store, adapters, clock, alerts, gate, operator and revocation feed. The gate's
    pipeline and the operator's hooks are set through it."""

    @property
    def config(self) -> ServiceConfig: ...
    @property
    def store(self) -> Store: ...
    @property
    def adapters(self) -> Mapping[str, Adapter]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def alerts(self) -> AlertSink: ...
    @property
    def gate(self) -> Gate: ...
    @property
    def operator(self) -> Operator: ...
    @property
    def revocations(self) -> RevocationFeed | None: ...


def start_announcers(service: AuthorityHost) -> list[ApprovalWebhook]:
    """One announcing webhook per channel with a ``url`` (the service closes them)."""
    hooks = [
        ApprovalWebhook(channel, service.store)
        for channel in service.config.channels.values()
        if channel.url is not None
    ]
    for hook in hooks:
        hook.start()
    return hooks


def wire_authority(service: AuthorityHost) -> PolicyFollower | None:
    """Approver roles and precondition binding on the operator; the policy follower (started,
    when ``governed_policy``), which the service stops on close."""
    authority = service.config.authority
    service.operator.approver_roles = authority.approver_roles
    uses = BreakGlassUses(service.alerts)
    authorise, approved = authority_stages(service, uses)
    # The gate's pipeline (docs/continuations.md) runs them before every dispatch; a use of a
    # break-glass grant is audited in the dispatch transaction and alerted after its commit.
    pipeline = service.gate.pipeline
    service.gate.pipeline = replace(
        pipeline,
        authorise=authorise,
        approved=approved,
        in_tx=(*pipeline.in_tx, uses.in_tx) if authorise is not None else pipeline.in_tx,
        after_commit=(*pipeline.after_commit, uses.after_commit)
        if authorise is not None
        else pipeline.after_commit,
    )
    follower: PolicyFollower | None = None
    if authority.governed_policy:
        follower = PolicyFollower(service.store, service.gate, service.config.registry)
        follower.refresh()
        follower.start(authority.policy_poll)

    def bind(scope: str, operation_id: str, approver: str) -> None:
        bind_precondition(
            service.store,
            service.adapters,
            service.config.registry,
            scope,
            operation_id,
            approver=approver,
            now=service.clock(),
        )

    service.operator.on_approved = bind
    return follower


def revoked_check(service: AuthorityHost) -> Callable[[str], bool]:
    """Whether a principal is revoked now: named by the revocation feed, or a ledger principal
    whose every token is revoked (read at use time, so a revocation holds at once)."""
    feed = service.revocations

    def revoked(name: str) -> bool:
        if feed is not None and feed.revoked(name):
            return True
        rows = [p for p in service.store.list_principals(include_revoked=True) if p.name == name]
        return bool(rows) and not any(p.live for p in rows)

    return revoked


def authority_stages(
    service: AuthorityHost, uses: BreakGlassUses | None = None
) -> tuple[Stage | None, tuple[Stage, ...]]:
    """``(authorise, approved)`` for the gate's pipeline: the grant authoriser when grants are
    on (else None: policy and controls decide), noting break-glass cover in ``uses``, then the
    checks about a row's approvals (approver revoked, approver's role, the bound
    precondition)."""
    authority = service.config.authority
    revoked = revoked_check(service)
    authorise = (
        grant_authoriser(environment=authority.environment, revoked=revoked, uses=uses)
        if authority.grants
        else None
    )
    approved: list[Stage] = [approver_revocation_check(revoked)]
    if authority.approver_roles is not None:
        approved.append(approver_role_check(authority.approver_roles))
    approved.append(precondition_check(service.adapters, service.config.registry))
    return authorise, tuple(approved)
