"""Bearer tokens to principals (name, role, tenant scope), and per-principal rate limits.

Tokens live in the ledger (the store's principals role, ``effectgate token create``): each
request looks its token's SHA-256 up there, with no cache, so a revoked token is refused by
every replica from its next request on. The config file's ``[tokens]`` (SHA-256 digests) are
still accepted, deprecated: they cannot be revoked without editing the file and restarting.
Whatever authenticates a caller hands back a :class:`Principal`; nothing past this module
looks at the credential.
"""

from __future__ import annotations

import getpass
import hmac
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from effectgate._core.principals import Principal, Role
from effectgate._service._config import RateLimit, TokenConfig
from effectgate._service._identity import JwtVerifier, looks_like_jwt
from effectgate.errors import PrincipalExists, RateLimited, Unauthenticated
from effectgate.store._principals import MAX_TOKEN_CHARS, token_digest
from effectgate.store.base import OS_PREFIX
from effectgate.store.roles import Principals

__all__ = ["Principal", "RateLimiter", "TokenBook", "os_actor"]


def os_actor() -> str:
    """``os:<user>``: who acts when a command holds the store's credentials but no token.

    The user name is what the OS says, nothing more (whoever can open the ledger can write
    anything in it); the ``os:`` prefix, which no principal may take, says so in the audit log.
    """
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a bare container)
        user = "unknown"
    return OS_PREFIX + (re.sub(r"[^A-Za-z0-9._@+-]", "_", user)[:100] or "unknown")


class TokenBook:
    """Authenticates bearer tokens: the ledger's principals, then the config's (deprecated)."""

    def __init__(
        self,
        tokens: Iterable[TokenConfig],
        store: Principals | None = None,
        *,
        verifier: JwtVerifier | None = None,
    ) -> None:
        self._by_digest = {t.sha256: Principal(t.name, Role(t.role), t.scope) for t in tokens}
        self._config_names = frozenset(p.name for p in self._by_digest.values())
        self._store = store
        #: Verified identities (docs/authority.md): a JWT is checked here, never stored.
        self.verifier = verifier

    def __len__(self) -> int:
        """How many config-file tokens there are (the ledger's are counted by the store)."""
        return len(self._by_digest)

    def from_header(self, authorization: str | None) -> Principal:
        """The principal for an ``Authorization: Bearer <token>`` header, or Unauthenticated."""
        if not authorization:
            raise Unauthenticated("send Authorization: Bearer <token>")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthenticated("send Authorization: Bearer <token>")
        return self.from_token(token.strip())

    def from_token(self, token: str) -> Principal:
        """The principal holding ``token``; it reads the store (blocking: call it off the
        event loop)."""
        if self.verifier is not None and looks_like_jwt(token):
            return self.verifier.verify(token)
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise Unauthenticated("unknown token")
        digest = token_digest(token)
        for known, principal in self._by_digest.items():
            # Constant time per comparison; the loop length is the (public) number of tokens.
            if hmac.compare_digest(known, digest):
                return principal
        found = self._store.principal_for_token(token) if self._store is not None else None
        if found is None:
            # Unknown and revoked alike: the answer says nothing about which.
            raise Unauthenticated("unknown token")
        return found

    def refuse_config_name(self, name: str) -> None:
        """A ledger principal may not take a config token's name: the name is the identity
        the audit log and the self-approval rule go by, so it must be one caller's."""
        if name in self._config_names:
            raise PrincipalExists(
                f"a token in the config file is named {name!r}; choose another name", field="name"
            )


class RateLimiter:
    """Token buckets per principal name, in this process (see docs/service.md, multi-worker).

    ``overrides``: a limit per principal name (the config's per-token ``rate_limit``).
    """

    def __init__(
        self,
        default: RateLimit,
        clock: Callable[[], float] = time.monotonic,
        overrides: Mapping[str, RateLimit] | None = None,
    ) -> None:
        self._default = default
        self._overrides = dict(overrides or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, last refill)

    def check(self, principal: Principal) -> None:
        limit = self._overrides.get(principal.name, self._default)
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(principal.name, (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + (now - last) * limit.per_second)
            if tokens < 1.0:
                self._buckets[principal.name] = (tokens, now)
                wait = (1.0 - tokens) / limit.per_second if limit.per_second > 0 else 60.0
                raise RateLimited(
                    f"rate limit of {limit.per_second:g}/s (burst {limit.burst}) exceeded",
                    retry_after=wait,
                )
            self._buckets[principal.name] = (tokens - 1.0, now)
