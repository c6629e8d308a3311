"""Who is calling, and what each role may do (pure, no I/O).

Authentication, whatever proves it (a bearer token today; a verified identity or a delegated
grant later), ends in a :class:`Principal`: a name, a role and a tenant scope. Nothing past
authentication looks at the credential. The name is what the audit log records as proposer,
operator or approver, and the only input of the self-approval rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from effectgate.errors import PermissionDenied

__all__ = ["ALL_SCOPES", "Capability", "IssuedToken", "Principal", "PrincipalRecord", "Role"]

#: The scope of an operator of every tenant (operators only).
ALL_SCOPES = "*"


class Role(StrEnum):
    """A principal's role; each grants a fixed set of capabilities (roles are disjoint)."""

    #: Proposes actions and reads its own scope's operations.
    AGENT = "agent"
    #: Trusted code that runs an agent: it records run calls (docs/runs.md) and may do what
    #: an agent does; listed apart so that its tokens can be told from agents'.
    HARNESS = "harness"
    #: Runs the controls, the admin API, approvals and principals; never proposes.
    OPERATOR = "operator"
    #: Answers approvals, and nothing else.
    APPROVER = "approver"


class Capability(StrEnum):
    PROPOSE = "propose"
    OPERATE = "operate"
    APPROVE = "approve"
    RECORD_RUNS = "record_runs"


_GRANTS: dict[Role, frozenset[Capability]] = {
    Role.AGENT: frozenset({Capability.PROPOSE}),
    Role.HARNESS: frozenset({Capability.PROPOSE, Capability.RECORD_RUNS}),
    Role.OPERATOR: frozenset({Capability.OPERATE, Capability.APPROVE}),
    Role.APPROVER: frozenset({Capability.APPROVE}),
}

_WHAT = {
    Capability.PROPOSE: "propose actions or read agent operations",
    Capability.OPERATE: "use the operator API",
    Capability.APPROVE: "answer approvals",
    Capability.RECORD_RUNS: "record run calls (harness tokens only)",
}


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its name, its role and its tenant scope (``"*"``: every
    tenant, operators only)."""

    name: str
    role: Role
    scope: str
    #: Every role the credential carries (a verified identity may carry several; ``role`` is
    #: the first of them). Empty: ``role`` alone.
    roles: frozenset[Role] = frozenset()
    #: Named approver roles the credential itself asserts (a JWT claim, docs/authority.md),
    #: beside the config's membership lists.
    approver_roles: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Accept the role's name ("agent") as well as the member: callers build principals
        # from config text and database rows.
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "roles", frozenset({self.role, *(Role(r) for r in self.roles)}))
        object.__setattr__(self, "approver_roles", frozenset(self.approver_roles))

    def may(self, capability: Capability) -> bool:
        return any(capability in _GRANTS[r] for r in self.roles)

    def require(self, capability: Capability) -> None:
        """Raise :class:`PermissionDenied` unless the role grants ``capability``."""
        if not self.may(capability):
            held = ", ".join(sorted(r.value for r in self.roles))
            raise PermissionDenied(f"a token with role {held!r} may not {_WHAT[capability]}")


@dataclass(frozen=True, slots=True)
class PrincipalRecord:
    """A principal as the store lists it: never its token, only a short non-secret prefix."""

    name: str
    role: Role
    scope: str
    token_prefix: str
    created_at: float
    created_by: str
    revoked_at: float | None = None
    revoked_by: str | None = None

    @property
    def live(self) -> bool:
        return self.revoked_at is None

    @property
    def principal(self) -> Principal:
        return Principal(self.name, self.role, self.scope)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "role": self.role.value,
            "scope": self.scope,
            "token_prefix": self.token_prefix,
            "created_at": self.created_at,
            "created_by": self.created_by,
            "revoked_at": self.revoked_at,
            "revoked_by": self.revoked_by,
            "live": self.live,
        }


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new principal and its token: the plaintext exists here once and is never stored."""

    record: PrincipalRecord
    token: str = field(repr=False)
