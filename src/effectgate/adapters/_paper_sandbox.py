"""The paper venue's sandbox: a dry run that returns a verdict and never applies an effect.

Three key modes, so users can rehearse both incidents of seed 000 before going live:

* ``honest``: validates under the key it is given, every time (each dry run renews the
  verdict for the lifetime).
* ``naive``: mints its own key with the attempt counter in it: the given key on the first
  attempt (the happy path, where the keys "match by accident"), ``KEY~aN`` on attempt ``N``.
* ``evicting``: honest while its verdict lives; once the lifetime passes it forgets the verdict
  and its key, and a later dry run of the same operation mints a new key (``KEY~eN`` for
  generation ``N``).

Verdicts: ``DENY`` for an effect the venue would refuse (the same checks as a real submit),
``RETRYABLE_TIMEOUT`` for an injected timeout (:meth:`PaperSandbox.time_out_next`), else
``ALLOW``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from effectgate.adapters._paper_venue import EffectValue, PaperVenue

__all__ = ["PaperSandbox", "SandboxAnswer", "SandboxMode", "dry_run_reply"]


class SandboxMode(StrEnum):
    HONEST = "honest"
    NAIVE = "naive"
    EVICTING = "evicting"


@dataclass(frozen=True, slots=True)
class SandboxAnswer:
    """One dry run's answer: verdict, reason, the key the sandbox used, seconds left."""

    verdict: str
    reason: str
    sandbox_key: str
    subject: str
    expires_in: float


@dataclass(slots=True)
class _Cached:
    verdict: str
    reason: str
    sandbox_key: str
    expires_at: float


class PaperSandbox:
    """A thread-safe dry-run endpoint beside a :class:`PaperVenue` (never applies anything)."""

    def __init__(
        self,
        venue: PaperVenue,
        *,
        mode: SandboxMode | str = SandboxMode.HONEST,
        lifetime: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lifetime > 0:
            raise ValueError("lifetime must be positive")
        self.venue = venue
        self.mode = SandboxMode(mode)
        self.lifetime = float(lifetime)
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._generation: dict[str, int] = {}
        self._timeouts = 0
        self._dry_runs = 0

    def dry_run(
        self, operation_key: str, action: str, effect: Mapping[str, EffectValue], *, attempt: int
    ) -> SandboxAnswer:
        """Validate without applying; see the module docstring for the key modes."""
        with self._lock:
            self._dry_runs += 1
            now = self._clock()
            if self._timeouts > 0:
                self._timeouts -= 1
                return SandboxAnswer(
                    "RETRYABLE_TIMEOUT", "sandbox timed out", operation_key, operation_key, 0.0
                )
            cached = self._cache.get(operation_key)
            if cached is not None and cached.expires_at <= now:
                del self._cache[operation_key]  # evicted: its key is forgotten with it
                self._generation[operation_key] = self._generation.get(operation_key, 1) + 1
            # Every dry run validates afresh and renews the verdict; only the key differs by mode.
            refusal = self.venue.refusal(effect)
            verdict, reason = ("DENY", refusal) if refusal else ("ALLOW", "venue would accept")
            cached = _Cached(
                verdict, reason, self._key(operation_key, attempt), now + self.lifetime
            )
            self._cache[operation_key] = cached
            return SandboxAnswer(
                cached.verdict,
                cached.reason,
                cached.sandbox_key,
                operation_key,
                max(0.0, cached.expires_at - now),
            )

    def _key(self, operation_key: str, attempt: int) -> str:
        if self.mode is SandboxMode.NAIVE:
            return operation_key if attempt <= 1 else f"{operation_key}~a{attempt}"
        if self.mode is SandboxMode.EVICTING:
            generation = self._generation.get(operation_key, 1)
            return operation_key if generation <= 1 else f"{operation_key}~e{generation}"
        return operation_key

    # -- test hooks -----------------------------------------------------------------------

    def time_out_next(self, n: int) -> None:
        """Test hook: the next ``n`` dry runs answer ``RETRYABLE_TIMEOUT``."""
        if n < 0:
            raise ValueError("n must be non-negative")
        with self._lock:
            self._timeouts = n

    @property
    def dry_runs(self) -> int:
        """Test hook: every dry run asked for."""
        with self._lock:
            return self._dry_runs


def dry_run_reply(sandbox: PaperSandbox, key: str, body: bytes) -> tuple[int, dict[str, object]]:
    """``POST /v1/dry-runs``: ``(status, reply)`` for a body ``{"action", "effect", "attempt"}``."""
    try:
        doc = json.loads(body, parse_float=_refuse, parse_constant=_refuse)
    except (ValueError, UnicodeDecodeError):
        return 400, {"error": "invalid_body"}
    if not isinstance(doc, dict) or set(doc) != {"action", "effect", "attempt"}:
        return 400, {"error": "invalid_body"}
    action, effect, attempt = doc["action"], doc["effect"], doc["attempt"]
    if (
        not isinstance(action, str)
        or not isinstance(effect, dict)
        or not all(isinstance(v, str | int | bool) for v in effect.values())
        or isinstance(attempt, bool)
        or not isinstance(attempt, int)
        or attempt < 1
    ):
        return 400, {"error": "invalid_body"}
    answer = sandbox.dry_run(key, action, effect, attempt=attempt)
    return 200, {
        "verdict": answer.verdict,
        "reason": answer.reason,
        "sandbox_key": answer.sandbox_key,
        "subject": answer.subject,
        "expires_in": answer.expires_in,
    }


def _refuse(text: str) -> object:
    raise ValueError(f"not allowed in an effect: {text}")
