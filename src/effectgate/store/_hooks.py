"""The two hooks every shared store role is written over (see :mod:`effectgate.store._ledger`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from effectgate._core.frozen import quick_init
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, scope_key_range

__all__ = ["Hold", "StoreHooks", "Work", "scoped"]

T = TypeVar("T")
Work = Callable[[SharedTx, Operation | None], T]


@quick_init
@dataclass(frozen=True, slots=True)
class Hold:
    """What one write transaction holds, for the dialect to lock: the audit lane of ``key``
    (an operation; none: the operators' lane), a class's controls (``shared_class`` to read them,
    ``exclusive_class`` to change them) and an operation ``row``, read for the transaction."""

    key: tuple[str | None, str | None] = (None, None)
    shared_class: str | None = None
    exclusive_class: str | None = None
    row: tuple[str, str] | None = None


NO_HOLD = Hold()


class StoreHooks:
    """A read in autocommit and one write transaction: all a shared role needs of a dialect."""

    def _rows(
        self, query: str, args: Sequence[Any] = (), what: str = "read"
    ) -> list[Sequence[Any]]:
        raise NotImplementedError

    def _run(self, work: Work[T], what: str, hold: Hold = NO_HOLD) -> T:
        raise NotImplementedError

    def _hot_rows(self, query: str, args: Sequence[str], what: str) -> list[Sequence[Any]]:
        """A read that runs on every request (the token lookup), text parameters and text
        columns only: as :meth:`_rows` unless the dialect sends it cheaper (PostgreSQL: a
        prepared statement on a hot connection)."""
        return self._rows(query, args, what)


def scoped(column: str, scope: str | None) -> tuple[str, Sequence[Any]]:
    """A key-range filter on one scope's operation keys (see ``scope_key_range``)."""
    if scope is None:
        return "", ()
    low, high = scope_key_range(scope)
    return f"WHERE {column} >= ? AND {column} < ?", (low, high)
