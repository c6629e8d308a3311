"""Simulated venues, each with the key contract of a kind of real one.

Every model keeps its ground truth (every effect it applied, in order, with the operation key
the boundary sent, which the simulator's checks read) apart from what its read view shows (what
its adapter can list). What differs is the key contract:

* :class:`WindowVenue` (Stripe-like): honours an idempotency key for a window of its clock
  (24 h); a repeat inside it answers the first effect, a repeat with other parameters is an
  error, a repeat after it makes a second effect.
* :class:`TokenVenue` (EC2-like): a client token, kept for good: the same token with the same
  parameters answers the first effect, with other parameters is an error
  (``IdempotentParameterMismatch``).
* :class:`MailVenue` (email-like): no key at all; each delivery is a message, found again only
  by the Message-ID header the sender set.
* :class:`KeylessVenue`: takes the key as a reference field and ignores it: each delivery is an
  effect.
* :class:`LaggingVenue`: honours the key, but its listing is eventually consistent: an effect
  shows only after a delay the simulation draws, inside or past the class's horizon.

Faults: :meth:`SimVenue.fail_next` loses the next delivery before it arrives or its reply after
it applied. Nothing here reads the wall clock: time is the world's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "KEY_WINDOW",
    "Effect",
    "KeylessVenue",
    "LaggingVenue",
    "MailVenue",
    "ParameterMismatch",
    "Refused",
    "SimVenue",
    "TokenVenue",
    "WindowVenue",
]

#: How long the Stripe-like venue keeps an idempotency key (Stripe documents at least 24 h).
KEY_WINDOW = 86_400.0
#: The account every model refuses (a provable refusal: nothing was applied).
CLOSED_ACCOUNT = "acct-closed"

Params = tuple[tuple[str, str], ...]


class Refused(Exception):
    """The venue refused the effect explicitly: nothing was applied."""


class ParameterMismatch(Exception):
    """A key (or token) the venue holds came back with other parameters: refused, and the
    sender cannot know whether its first request landed."""


@dataclass(frozen=True)
class Effect:
    """One effect, as the venue applied it. ``key`` is the operation key the boundary sent
    (ground truth); ``tag`` is what the venue stores that the adapter reads back (the key, a
    token's tag, a Message-ID)."""

    venue_id: str
    key: str
    tag: str
    params: Params
    created_at: float
    visible_at: float


def _params(effect: Mapping[str, object]) -> Params:
    return tuple(sorted((k, str(v)) for k, v in effect.items()))


class SimVenue:
    """The shared ground truth and read view; subclasses decide what a delivery does."""

    #: What the venue's ids start with (distinct per model, so a history names the venue).
    prefix = "S"

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.effects: list[Effect] = []
        self.deliveries = 0
        self.mismatches: list[str] = []  # keys (tags) a mismatch was answered for
        self.listings = 0  # read-view listings served (the simulator's "a sweep ran" mark)
        self._fail: str | None = None  # "before" | "after": the next delivery's fault

    def fail_next(self, where: str | None) -> None:
        """Lose the next delivery ``before`` it arrives or its reply ``after`` it applied."""
        if where not in (None, "before", "after"):
            raise ValueError(f"fail_next: {where!r} is not before, after or None")
        self._fail = where

    def deliver(self, key: str, tag: str, effect: Mapping[str, object]) -> Effect:
        """One request arriving: the effect it made or matched. Raises :class:`Refused`,
        :class:`ParameterMismatch`, or ``ConnectionError`` for an injected fault."""
        fault, self._fail = self._fail, None
        if fault == "before":
            raise ConnectionError("simulated: the request was lost before the venue")
        self.deliveries += 1
        try:
            made = self._deliver(key, tag, _params(effect))
        except (Refused, ParameterMismatch):
            if fault == "after":
                raise ConnectionError("simulated: the reply was lost") from None
            raise
        if fault == "after":
            raise ConnectionError("simulated: the reply was lost after the venue applied it")
        return made

    def _deliver(self, key: str, tag: str, params: Params) -> Effect:
        return self._new(key, tag, params)

    def _new(self, key: str, tag: str, params: Params, lag: float = 0.0) -> Effect:
        if dict(params).get("account") == CLOSED_ACCOUNT:
            raise Refused(f"account {CLOSED_ACCOUNT} is closed")
        now = self.clock()
        made = Effect(
            f"{self.prefix}-{len(self.effects) + 1:05d}", key, tag, params, now, now + lag
        )
        self.effects.append(made)
        return made

    def visible(self) -> list[Effect]:
        """What the read view shows now, in creation order."""
        now = self.clock()
        return [e for e in self.effects if e.visible_at <= now]

    def effects_for(self, key: str) -> list[Effect]:
        """Ground truth: every effect made under the boundary's operation ``key``."""
        return [e for e in self.effects if e.key == key]


class WindowVenue(SimVenue):
    """Stripe-like: an idempotency key is honoured for :data:`KEY_WINDOW` seconds."""

    prefix = "pi"

    def __init__(self, clock: Callable[[], float], window: float = KEY_WINDOW) -> None:
        super().__init__(clock)
        self.window = window
        self._keys: dict[str, tuple[Effect, float]] = {}  # key -> (first effect, when)

    def _deliver(self, key: str, tag: str, params: Params) -> Effect:
        held = self._keys.get(tag)
        now = self.clock()
        if held is not None and now - held[1] < self.window:
            if held[0].params != params:
                self.mismatches.append(tag)
                raise ParameterMismatch(f"key {tag} was used with other parameters")
            return held[0]
        made = self._new(key, tag, params)
        self._keys[tag] = (made, now)  # after the window the key is a new one
        return made


class TokenVenue(SimVenue):
    """EC2-like: a client token, kept for good; other parameters under it are an error."""

    prefix = "i"

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self._tokens: dict[str, Effect] = {}

    def _deliver(self, key: str, tag: str, params: Params) -> Effect:
        held = self._tokens.get(tag)
        if held is not None:
            if held.params != params:
                self.mismatches.append(tag)
                raise ParameterMismatch(f"IdempotentParameterMismatch: token {tag}")
            return held
        made = self._new(key, key, params)  # the instance is tagged with the operation key
        self._tokens[tag] = made
        return made


class MailVenue(SimVenue):
    """Email-like: no key; ``tag`` is the Message-ID the sender set, kept on the message."""

    prefix = "msg"


class KeylessVenue(SimVenue):
    """Takes the key as a reference and ignores it: every delivery is a new effect."""

    prefix = "k"


class LaggingVenue(SimVenue):
    """Honours the key for good; each effect becomes visible ``next_lag`` seconds after it was
    made (the simulation sets it before each delivery)."""

    prefix = "ec"

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.next_lag = 0.0
        self._keys: dict[str, Effect] = {}

    def _deliver(self, key: str, tag: str, params: Params) -> Effect:
        held = self._keys.get(tag)
        if held is not None:
            return held
        made = self._new(key, tag, params, lag=self.next_lag)
        self._keys[tag] = made
        return made
