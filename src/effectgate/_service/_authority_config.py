"""The authority part of the service config: verified identity and the grant axis.

::

    [identity]                                  # JWTs, beside the ledger's tokens
    issuer = "https://idp.example.com/"
    audience = "effectgate"
    jwks_url = "https://idp.example.com/.well-known/jwks.json"   # or: public_key_file = "idp.pem"
    token_type = "at+jwt"                       # the typ header a token must carry
    algorithms = ["RS256", "ES256"]             # asymmetric only
    leeway = 30                                 # seconds of clock skew
    role_claim = "role"                         # agent | harness | operator | approver:
                                                # one, a list, or a space-separated string
    tenant_claim = "tenant"
    approver_role_claim = "approver_roles"      # named approver roles (list or string)
    revocations = "https://idp.example.com/revoked.json"   # or a path; polled
    revocation_interval = 15

    [authority]
    grants = true                               # the grant axis: an action needs a grant too
    governed_policy = true                      # follow the store's active policy version
    policy_poll = 5                             # seconds between reads of it
    policy_approval = "required"                # or "optional": a load applies at once
    environment = "production"                  # what a grant's environments are matched to

    [authority.approver_roles]                  # who holds each approver role
    treasury = ["alice", "bob"]
    [authority.approvers]                       # which roles may approve each class
    submit_order = ["treasury"]

Without ``[identity]`` only ledger tokens authenticate; without ``grants = true`` the grant
axis is off (policy alone decides, as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effectgate._core.approver_roles import ApproverRoles
from effectgate._core.intent import Registry
from effectgate._service._identity import ASYMMETRIC, JwtSettings
from effectgate._service._toml import Section
from effectgate.errors import ControlError

__all__ = ["AuthorityConfig", "IdentityConfig", "authority_section", "identity_section"]


@dataclass(frozen=True)
class IdentityConfig:
    jwt: JwtSettings
    revocations: str | None = None
    revocation_interval: float = 15.0


@dataclass(frozen=True)
class AuthorityConfig:
    grants: bool = False
    environment: str = "production"
    approver_roles: ApproverRoles | None = None
    #: Follow the store's active policy version (polled every ``policy_poll`` seconds).
    governed_policy: bool = False
    policy_poll: float = 5.0
    #: Whether a policy change needs a second principal's approval (else a load is allowed).
    policy_approval_required: bool = True


def identity_section(sec: Section | None, base_dir: Path | None) -> IdentityConfig | None:
    if sec is None:
        return None
    issuer = sec.req_text("issuer")
    audience = sec.req_text("audience")
    jwks_url = sec.text("jwks_url", pattern=r"https?://\S+")
    key_file = sec.text("public_key_file")
    pem: str | None = None
    if key_file is not None:
        path = Path(key_file)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            pem = path.read_text(encoding="utf-8")
        except OSError as exc:
            sec.fail("public_key_file", f"cannot read {path}: {exc.strerror}")
    if (jwks_url is None) == (pem is None):
        sec.fail(None, "set exactly one of jwks_url and public_key_file")
    algorithms = sec.text_list("algorithms") or ["RS256", "ES256", "EdDSA"]
    bad = sorted(set(algorithms) - set(ASYMMETRIC))
    if bad:
        sec.fail("algorithms", f"{', '.join(bad)}: only {', '.join(ASYMMETRIC)} are accepted")
    leeway = sec.number("leeway", 30.0, exclusive=False)
    if leeway > 300:
        sec.fail("leeway", "at most 300 seconds")
    settings = JwtSettings(
        issuer=issuer,
        audience=audience,
        jwks_url=jwks_url,
        public_key_pem=pem,
        token_type=sec.text("token_type", "at+jwt") or "at+jwt",
        algorithms=tuple(algorithms),
        leeway=leeway,
        role_claim=sec.text("role_claim", "role") or "role",
        tenant_claim=sec.text("tenant_claim", "tenant") or "tenant",
        approver_role_claim=sec.text("approver_role_claim"),
    )
    revocations = sec.text("revocations")
    interval = sec.number("revocation_interval", 15.0)
    sec.done()
    return IdentityConfig(settings, revocations, interval)


def authority_section(sec: Section | None, registry: Registry) -> AuthorityConfig:
    if sec is None:
        return AuthorityConfig()
    grants = sec.flag("grants", False)
    environment = sec.text("environment", "production", pattern=r"[a-z0-9][a-z0-9_-]{0,63}")
    governed = sec.flag("governed_policy", False)
    poll = sec.number("policy_poll", 5.0)
    approval = sec.text("policy_approval", "required", choices=["required", "optional"])
    members: dict[str, frozenset[str]] = {}
    members_sec = sec.table("approver_roles")
    if members_sec is not None:
        for role in members_sec.names():
            names = members_sec.text_list(role)
            members[role] = frozenset(names or ())
        members_sec.done()
    by_class: dict[str, frozenset[str]] = {}
    classes_sec = sec.table("approvers")
    if classes_sec is not None:
        for action in classes_sec.names():
            if action not in registry:
                classes_sec.fail(action, f"no action class named {action!r}")
            by_class[action] = frozenset(classes_sec.text_list(action) or ())
        classes_sec.done()
    sec.done()
    try:
        roles = ApproverRoles(members, by_class) if (members or by_class) else None
    except ControlError as exc:
        sec.fail("approvers", exc.message)
    return AuthorityConfig(
        grants, environment or "production", roles, governed, poll, approval == "required"
    )
