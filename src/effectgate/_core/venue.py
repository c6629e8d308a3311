"""What an action class's venue promises: the venue contract block (pure, no I/O).

One block per action class, declared in ``[classes.NAME.venue]`` (or in Python) and read by
everything that depends on the venue's behaviour: the reconciler (its read view), the
speculation path (the sandbox's key promises), ``check`` and ``ops show`` (whether
exactly-once may be claimed). The visibility horizon and the key retention stay on
:class:`~effectgate._core.intent.ActionClass` itself, where the hardening issue made them
required. A promise left undeclared is the weakest one: effectgate never assumes a venue
honours a key or a sandbox keeps one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from effectgate.errors import RegistryError

__all__ = ["LISTING_MODES", "REVISION_NAMES", "KeyHonour", "ReadView", "VenueContract"]

#: How a venue can be enumerated (the adapter's ``listing``; see docs/adapters.md).
LISTING_MODES = ("key_order", "time_window", "probe")

#: The contracts a class may pin a revision of (seed 004's effect requirement):
#: ``idempotency``, the venue's stable-operation-key contract (what ``honours_key`` relies on);
#: ``reconcile``, the read the reconciler and the continuation service trust (``read_view``).
REVISION_NAMES = ("idempotency", "reconcile")
#: A revision names one fixed version; these name whichever is current, so they pin nothing.
_FLOATING = frozenset({"latest", "current", "head", "main", "master", "stable", "any", "*"})
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@/-]{0,127}")


def _pin(pairs: object) -> tuple[tuple[str, str], ...]:
    """``revisions`` as sorted ``(name, revision)`` pairs; :class:`RegistryError` naming an
    unknown contract, a malformed or floating revision, or two revisions of one contract."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else pairs
    if not isinstance(items, list | tuple):
        raise RegistryError("venue: revisions must be (contract, revision) pairs")
    pinned: dict[str, str] = {}
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise RegistryError(f"venue: revision {item!r} is not a (contract, revision) pair")
        name, revision = item
        if name not in REVISION_NAMES:
            raise RegistryError(
                f"venue: unknown contract revision {name!r} (known: {', '.join(REVISION_NAMES)})"
            )
        if isinstance(revision, str) and revision.lower() in _FLOATING:
            raise RegistryError(
                f"venue: {name}_revision {revision!r} is ambiguous: it names whichever "
                "revision is current; pin a fixed one"
            )
        if not isinstance(revision, str) or not _REVISION.fullmatch(revision):
            raise RegistryError(
                f"venue: {name}_revision {revision!r} is not a revision (letters, digits and "
                "._:+@/- , at most 128)"
            )
        if pinned.get(name, revision) != revision:
            raise RegistryError(
                f"venue: ambiguous {name}_revision: both {pinned[name]!r} and {revision!r}"
            )
        pinned[name] = revision
    return tuple(sorted(pinned.items()))


class KeyHonour(StrEnum):
    """Whether the venue deduplicates a request by the operation key it carries."""

    HONOURED = "true"
    IGNORED = "false"
    UNKNOWN = "unknown"


class ReadView(StrEnum):
    """What reading the venue can settle.

    ``none``: nothing (an uncertain row goes to the operator's queue past the horizon);
    ``lagging``: reads may miss writes younger than the visibility horizon;
    ``authoritative``: a read past the horizon is the truth (absence proves non-execution).
    """

    NONE = "none"
    LAGGING = "lagging"
    AUTHORITATIVE = "authoritative"


@dataclass(frozen=True, slots=True)
class VenueContract:
    """The promises of one action class's venue, and of its sandbox where it has one."""

    honours_key: KeyHonour = KeyHonour.UNKNOWN
    read_view: ReadView = ReadView.LAGGING
    #: The sandbox runs a dry run under the key effectgate gives it (speculation issue).
    sandbox_uses_given_key: bool = False
    #: Seconds the sandbox keeps the keys it mints and their verdicts; None: not declared.
    sandbox_key_persistence: float | None = None
    #: Contract revisions pinned at registration, as ``(name, revision)`` pairs (names from
    #: :data:`REVISION_NAMES`; a mapping is accepted). Normalised, sorted and frozen here.
    revisions: tuple[tuple[str, str], ...] = ()
    #: The conformance kit report that verified these claims (a path), if any.
    conformance_report: str | None = None
    #: How the venue is listed, as the operator expects it; checked against the adapter's own
    #: declaration by ``check`` (None: whatever the adapter declares).
    listing: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "honours_key", KeyHonour(self.honours_key))
            object.__setattr__(self, "read_view", ReadView(self.read_view))
        except ValueError as exc:
            raise RegistryError(f"venue: {exc}") from None
        if not isinstance(self.sandbox_uses_given_key, bool):
            raise RegistryError("venue: sandbox_uses_given_key must be true or false")
        object.__setattr__(self, "revisions", _pin(self.revisions))
        pinned = dict(self.revisions)
        if "idempotency" in pinned and self.honours_key is KeyHonour.IGNORED:
            raise RegistryError(
                f"venue: idempotency_revision {pinned['idempotency']!r} pins a key contract the "
                "venue is declared not to keep (honours_key = false)"
            )
        if "reconcile" in pinned and self.read_view is ReadView.NONE:
            raise RegistryError(
                f"venue: reconcile_revision {pinned['reconcile']!r} pins a read the venue is "
                "declared not to have (read_view = none)"
            )
        if self.listing is not None and self.listing not in LISTING_MODES:
            raise RegistryError(f"venue: listing must be one of {', '.join(LISTING_MODES)}")
        keep = self.sandbox_key_persistence
        if keep is not None and (
            isinstance(keep, bool)
            or not isinstance(keep, int | float)
            or not math.isfinite(keep)
            or keep <= 0
        ):
            raise RegistryError("venue: sandbox_key_persistence must be a finite number > 0")

    def revision(self, name: str) -> str | None:
        """The pinned revision of contract ``name`` (None: not pinned)."""
        return dict(self.revisions).get(name)
