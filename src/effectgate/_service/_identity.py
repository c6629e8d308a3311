"""Verified identity: JWTs checked against a JWKS endpoint or a PEM key, and a revocation feed.

A JWT's signature (asymmetric algorithms only: never ``none``, never a shared secret), header
type (``typ``), issuer, audience and expiry are checked, with a bounded clock skew. The
principal's name is the ``sub`` claim; its roles (one or several), its tenant and, optionally,
its approver roles come from configured claims. Nothing
in a request body can set them. A :class:`RevocationFeed` (a file or an HTTP URL the service
polls) names revoked principals and token ids; a revoked one is refused from the next poll on,
with no restart, and the pre-dispatch checks (``execute/authority.py``) consult the same feed
at use time, so its grants and pending approvals stop counting too.

Needs the ``jwt`` extra (``pip install 'effectgate[jwt]'``: PyJWT with ``cryptography``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectgate._core.principals import ALL_SCOPES, Principal, Role
from effectgate.errors import ConfigError, ServiceUnavailable, Unauthenticated
from effectgate.store.base import IDENTITY_PATTERN, OS_PREFIX, SCOPE_PATTERN, SYSTEM_PREFIX

__all__ = ["JwtSettings", "JwtVerifier", "RevocationFeed", "looks_like_jwt"]

log = logging.getLogger("effectgate.identity")

#: Signature algorithms accepted: asymmetric only (a public key can never sign).
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
#: A JWT longer than this is refused before it is parsed.
MAX_JWT_CHARS = 8192


def looks_like_jwt(token: str) -> bool:
    """A compact JWS has three dot-separated parts; minted ledger tokens have none."""
    return token.count(".") == 2


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """Where keys come from and what a token must say (``[identity]`` in the config)."""

    issuer: str
    audience: str
    jwks_url: str | None = None
    public_key_pem: str | None = None
    #: The ``typ`` header a token must carry (RFC 9068 access tokens: ``at+jwt``).
    token_type: str = "at+jwt"  # noqa: S105 - a header value, no secret
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    #: Seconds of clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    leeway: float = 30.0
    #: The claim naming the principal's roles: one, a JSON list, or a space-separated string
    #: (as OAuth's ``scope``). Values that are not effectgate roles are ignored; at least
    #: one must be.
    role_claim: str = "role"
    tenant_claim: str = "tenant"
    #: The claim naming the approver roles (``[authority.approvers]``) the principal holds,
    #: in the same shapes; None: approver roles come from the config's lists only.
    approver_role_claim: str | None = None

    def __post_init__(self) -> None:
        if (self.jwks_url is None) == (self.public_key_pem is None):
            raise ConfigError("identity: set exactly one of jwks_url and public_key_file")
        bad = sorted(set(self.algorithms) - set(ASYMMETRIC))
        if bad or not self.algorithms:
            raise ConfigError(f"identity: algorithms must be among {', '.join(ASYMMETRIC)}")
        if not 0 <= self.leeway <= 300:
            raise ConfigError("identity: leeway must be 0..300 seconds")


class JwtVerifier:
    """Verifies a JWT and returns its :class:`Principal`, or raises :class:`Unauthenticated`."""

    def __init__(self, settings: JwtSettings, revocations: RevocationFeed | None = None) -> None:
        try:
            import jwt
        except ImportError:  # pragma: no cover - the extra is in [test]
            raise ConfigError(
                "identity: JWT verification needs PyJWT: pip install 'effectgate[jwt]'"
            ) from None
        self._jwt = jwt
        self.settings = settings
        self.revocations = revocations
        self._jwks = (
            jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=300, timeout=5)
            if settings.jwks_url
            else None
        )

    def _key(self, token: str) -> Any:
        if self._jwks is None:
            return self.settings.public_key_pem
        try:
            return self._jwks.get_signing_key_from_jwt(token).key
        except self._jwt.PyJWKClientConnectionError:
            raise ServiceUnavailable("the JWKS endpoint cannot be reached") from None
        except self._jwt.PyJWKClientError as exc:
            raise Unauthenticated(f"no signing key for this token: {exc}") from None

    def verify(self, token: str) -> Principal:
        jwt = self._jwt
        s = self.settings
        if len(token) > MAX_JWT_CHARS:
            raise Unauthenticated("token too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Unauthenticated("malformed token") from None
        typ = header.get("typ")
        if not isinstance(typ, str) or typ.lower() != s.token_type.lower():
            raise Unauthenticated(f"token type must be {s.token_type!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self._key(token),
                algorithms=list(s.algorithms),
                audience=s.audience,
                issuer=s.issuer,
                leeway=s.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token audience is not this service") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token issuer is not trusted") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("token signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"invalid token: {exc}") from None
        principal = self._principal(claims)
        if self.revocations is not None:
            jti = claims.get("jti")
            if self.revocations.revoked(principal.name) or (
                isinstance(jti, str) and self.revocations.token_revoked(jti)
            ):
                raise Unauthenticated("token revoked")
        return principal

    def _principal(self, claims: dict[str, Any]) -> Principal:
        s = self.settings
        sub = claims.get("sub")
        if (
            not isinstance(sub, str)
            or not IDENTITY_PATTERN.fullmatch(sub)
            or sub.startswith((SYSTEM_PREFIX, OS_PREFIX))
        ):
            raise Unauthenticated("token subject is not a valid principal name")
        names = _claim_values(claims.get(s.role_claim))
        roles = [Role(n) for n in names if n in _ROLE_NAMES]
        if not roles:
            raise Unauthenticated(f"token claim {s.role_claim!r} is not a role, nor holds one")
        tenant = claims.get(s.tenant_claim)
        # "*" is every tenant: an operator's scope only, never one that may also propose.
        everywhere = Role.OPERATOR in roles and not any(
            r in (Role.AGENT, Role.HARNESS) for r in roles
        )
        if not isinstance(tenant, str) or not (
            SCOPE_PATTERN.fullmatch(tenant) or (everywhere and tenant == ALL_SCOPES)
        ):
            raise Unauthenticated(f"token claim {s.tenant_claim!r} is not a tenant scope")
        approver_roles: frozenset[str] = frozenset()
        if s.approver_role_claim is not None:
            approver_roles = frozenset(_claim_values(claims.get(s.approver_role_claim)))
            if any(not IDENTITY_PATTERN.fullmatch(r) for r in approver_roles):
                raise Unauthenticated(
                    f"token claim {s.approver_role_claim!r} holds a malformed role name"
                )
        return Principal(sub, roles[0], tenant, frozenset(roles), approver_roles)


_ROLE_NAMES = frozenset(r.value for r in Role)


def _claim_values(value: object) -> list[str]:
    """A claim holding names: a string (space-separated, as OAuth's ``scope``), or a list of
    strings; anything else holds none."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    return []


class RevocationFeed:
    """Revoked principals and token ids, from a JSON document the service polls.

    The document: ``{"principals": ["name", ...], "token_ids": ["jti", ...]}``, at a local
    path or an ``http(s)://`` URL. :meth:`start` polls it every ``interval`` seconds in a
    daemon thread; :meth:`refresh` reads it now. A feed that has not been read successfully
    for ``stale_after`` seconds fails closed: every check raises :class:`ServiceUnavailable`
    rather than trusting a list that may be missing a revocation.
    """

    def __init__(
        self,
        source: str,
        *,
        interval: float = 15.0,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ConfigError("identity: revocation interval must be > 0")
        self.source = source
        self.interval = interval
        self.stale_after = stale_after if stale_after is not None else 10 * interval
        self._clock = clock
        self._lock = threading.Lock()
        self._principals: frozenset[str] = frozenset()
        self._token_ids: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fetch(self) -> bytes:
        if self.source.startswith(("http://", "https://")):
            with urllib.request.urlopen(self.source, timeout=5) as resp:  # noqa: S310
                body: bytes = resp.read(4 * 1024 * 1024)
                return body
        return Path(self.source).read_bytes()

    def refresh(self) -> None:
        """Read the feed now; a bad read keeps the last good list (and logs why)."""
        try:
            doc = json.loads(self._fetch())
            names = doc.get("principals", [])
            jtis = doc.get("token_ids", [])
            if not isinstance(names, list) or not isinstance(jtis, list):
                raise ValueError("principals and token_ids must be lists")
            principals = frozenset(str(n) for n in names)
            token_ids = frozenset(str(j) for j in jtis)
        except (OSError, ValueError, AttributeError) as exc:
            log.error("revocation feed %s unreadable: %s", self.source, exc)
            return
        with self._lock:
            self._principals, self._token_ids = principals, token_ids
            self._read_at = self._clock()

    def _fresh(self) -> None:
        with self._lock:
            at = self._read_at
        if at is None or self._clock() - at > self.stale_after:
            raise ServiceUnavailable("the revocation feed is stale: refusing verified identities")

    def revoked(self, name: str) -> bool:
        self._fresh()
        with self._lock:
            return name in self._principals

    def token_revoked(self, jti: str) -> bool:
        self._fresh()
        with self._lock:
            return jti in self._token_ids

    def start(self) -> None:
        self.refresh()
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="revocations", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()
