"""Mutations only the venue models (:mod:`effectgate._sim.actors.venues`) exercise: the paths
of production code that a key-ordered paper venue never reaches (the time-window listing, the
Message-ID an email venue is read back by). Each replaces one named production function."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from effectgate._sim.actor import Mutation

__all__ = ["VENUES"]

F = Callable[..., Any]


def _key_unread(original: F) -> F:
    # A Message-ID is no longer read back as the operation key it carries.
    def key_of_message_id(mid: str) -> str | None:
        return None

    return key_of_message_id


def _unsorted(original: F) -> F:
    # A time-window listing is merge-joined in the venue's own order, not sorted by key.
    def sorted_window(records: Iterable[Any], **kw: Any) -> Iterator[Any]:
        return iter(list(records))

    return sorted_window


VENUES: tuple[Mutation, ...] = (
    Mutation(
        "message_id_key_unread",
        "4,5 written_off_while_listed",
        "effectgate.adapters.email:key_of_message_id",
        _key_unread,
    ),
    Mutation(
        "window_listing_unsorted",
        "4,5 duplicates_reported",
        "effectgate._execute.reconciler:sorted_window",
        _unsorted,
    ),
)
