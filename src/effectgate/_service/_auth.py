"""Bearer tokens to principals (role + tenant scope), and per-principal rate limits.

Tokens are compared by their SHA-256: the config holds digests only, a presented token is
hashed once and looked up. Roles are disjoint: an ``agent`` proposes and reads its own scope's
operations; an ``operator`` uses ``/v1/admin`` and can never propose.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from effectgate._service._config import RateLimit, TokenConfig
from effectgate.errors import PermissionDenied, RateLimited, Unauthenticated

__all__ = ["Principal", "RateLimiter", "TokenBook"]

_MAX_TOKEN_CHARS = 512


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's configured name, its role and its tenant scope."""

    name: str
    role: str
    scope: str
    rate_limit: RateLimit | None = None

    def require(self, role: str) -> None:
        if self.role != role:
            what = (
                "propose actions or read agent operations"
                if role == "agent"
                else "use the operator API"
            )
            raise PermissionDenied(f"a token with role {self.role!r} may not {what}")


class TokenBook:
    """The configured tokens, by digest."""

    def __init__(self, tokens: Iterable[TokenConfig]) -> None:
        self._by_digest = {
            t.sha256: Principal(t.name, t.role, t.scope, t.rate_limit) for t in tokens
        }

    def __len__(self) -> int:
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
        if not token or len(token) > _MAX_TOKEN_CHARS:
            raise Unauthenticated("unknown token")
        digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        for known, principal in self._by_digest.items():
            # Constant time per comparison; the loop length is the (public) number of tokens.
            if hmac.compare_digest(known, digest):
                return principal
        raise Unauthenticated("unknown token")


class RateLimiter:
    """Token buckets per principal name, in this process (see docs/service.md, multi-worker)."""

    def __init__(self, default: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self._default = default
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, last refill)

    def check(self, principal: Principal) -> None:
        limit = principal.rate_limit or self._default
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
