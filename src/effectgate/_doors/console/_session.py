"""Console sessions: a token exchanged once for a server-side session, and CSRF tokens.

The browser holds only a random session id (cookie ``eg_console``: HttpOnly, SameSite=Strict,
Path=/console, Secure over HTTPS); the server keys its sessions by the id's sha256, so a memory
dump of the table yields no usable cookie. The token stays in the session (server memory only)
and is authenticated again on every request: a revoked principal is logged out at its next click.
Every state-changing request carries the session's CSRF token in a form field (synchronizer
token), compared in constant time; the login form has its own pre-session double-submit token.

Sessions live in the process that made them: after a restart, or on another replica, the
operator logs in again (docs/console.md).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from effectgate._core.principals import Principal

__all__ = ["COOKIE", "PRE_COOKIE", "LoginThrottle", "Session", "Sessions"]

COOKIE: Final = "eg_console"
#: Before login: the double-submit value the login form must echo.
PRE_COOKIE: Final = "eg_console_login"
IDLE: Final = 30 * 60.0
ABSOLUTE: Final = 12 * 3600.0
MAX_SESSIONS: Final = 1000


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    """Constant-time equality of two short strings."""
    return hmac.compare_digest(a.encode(), b.encode())


@dataclass
class Session:
    principal: Principal
    token: str
    csrf: str
    created: float
    seen: float
    flash: list[str] = field(default_factory=list)


class Sessions:
    """The live sessions of this process. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_digest: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, principal: Principal, token: str) -> tuple[str, Session]:
        """A new session; returns the cookie value (shown once) and the session."""
        now = self._clock()
        sid = secrets.token_urlsafe(32)
        session = Session(principal, token, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._expire(now)
            if len(self._by_digest) >= MAX_SESSIONS:  # the oldest goes first
                oldest = min(self._by_digest, key=lambda k: self._by_digest[k].seen)
                del self._by_digest[oldest]
            self._by_digest[_digest(sid)] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = self._clock()
        with self._lock:
            self._expire(now)
            session = self._by_digest.get(_digest(sid))
            if session is not None:
                session.seen = now
            return session

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._by_digest.pop(_digest(sid), None)

    def _expire(self, now: float) -> None:
        dead = [
            k
            for k, s in self._by_digest.items()
            if now - s.seen > IDLE or now - s.created > ABSOLUTE
        ]
        for k in dead:
            del self._by_digest[k]


class LoginThrottle:
    """At most ``limit`` failed logins per client address in ``window`` seconds."""

    def __init__(
        self, limit: int = 10, window: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._fails: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, client: str) -> bool:
        now = self._clock()
        with self._lock:
            recent = [t for t in self._fails.get(client, []) if now - t < self.window]
            self._fails[client] = recent
            return len(recent) >= self.limit

    def failed(self, client: str) -> None:
        with self._lock:
            if len(self._fails) > 10_000:  # bounded memory under a spray of addresses
                self._fails.clear()
            self._fails.setdefault(client, []).append(self._clock())
