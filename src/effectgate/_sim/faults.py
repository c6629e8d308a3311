"""Lost commits: a store wrapper whose next journal, dispatch or receipt raises
:class:`~effectgate.errors.CommitOutcomeUnknown`, having written (the reply was lost) or not
(the commit was). The pattern of ``tests/test_gate.py``'s lost-commit tests, made schedulable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from effectgate._core.states import State
from effectgate._execute.record import OUTCOME_UNKNOWN_ENTRY
from effectgate.errors import CommitOutcomeUnknown
from effectgate.store.roles import Store

__all__ = ["LOSABLE", "LossyStore"]

Losable = Literal["journal", "dispatch", "receipt"]
LOSABLE: tuple[Losable, ...] = ("journal", "dispatch", "receipt")

T = TypeVar("T")


class LossyStore:
    """Delegates to ``inner``; :meth:`arm` makes the next write of one kind indeterminate."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.armed: tuple[Losable, bool] | None = None

    def arm(self, what: Losable, *, wrote: bool) -> None:
        self.armed = (what, wrote)

    def _maybe_lose(self, what: Losable, write: Callable[[], T]) -> T:
        if self.armed is None or self.armed[0] != what:
            return write()
        wrote = self.armed[1]
        self.armed = None
        if wrote:
            write()
        raise CommitOutcomeUnknown(f"simulated: the {what} COMMIT's reply was lost")

    def journal(self, *args: Any, **kwargs: Any) -> Any:
        return self._maybe_lose("journal", lambda: self.inner.journal(*args, **kwargs))

    def dispatch(self, *args: Any, **kwargs: Any) -> Any:
        return self._maybe_lose("dispatch", lambda: self.inner.dispatch(*args, **kwargs))

    def transition(self, *args: Any, **kwargs: Any) -> Any:
        # The gate's receipt is submitted -> acknowledged | failed, its to-state positional.
        if len(args) > 3 and args[3] in (State.ACKNOWLEDGED, State.FAILED):
            return self._maybe_lose("receipt", lambda: self.inner.transition(*args, **kwargs))
        return self.inner.transition(*args, **kwargs)

    def append_audit(self, kind: str, *args: Any, **kwargs: Any) -> Any:
        if kind == OUTCOME_UNKNOWN_ENTRY:  # the "receipt" of a call that ended unknown
            return self._maybe_lose(
                "receipt", lambda: self.inner.append_audit(kind, *args, **kwargs)
            )
        return self.inner.append_audit(kind, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
