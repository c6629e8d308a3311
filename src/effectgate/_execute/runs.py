"""The harness's side of run calls: record, complete, list, the call context, and the sealer.

A harness is trusted code: it records each model-provider or tool call *before* making it
(:meth:`RunJournal.record`) and its local return after (:meth:`RunJournal.complete`). An
operation proposed while a tool call runs is bound to it: pass ``run_call=`` to
:meth:`effectgate.Gate.submit`, or run the tool inside :meth:`RunJournal.call_context` and the
gate reads the reference from there. Nothing here is an MCP tool: the model never records,
completes or seals anything.

A seal (:class:`RunSealer`) is authorised by a host hook (or, over HTTP, an operator's
credential), runs inside an optional host fence and has a deadline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from effectgate._core.controls import DispatchGuard
from effectgate._core.runs import (
    RunCall,
    RunCallRecord,
    RunCallRef,
    RunCompletion,
    RunSeal,
    check_seal_request,
)
from effectgate._core.states import State
from effectgate.errors import ConfigError, InvalidRunCall, RunSealDeadline
from effectgate.store.base import Journal, NewOperation
from effectgate.store.roles import Store

__all__ = [
    "RunJournal",
    "RunSealer",
    "SealRequest",
    "current_run_call",
    "journal_for",
    "run_call_context",
]

_CURRENT: ContextVar[RunCallRef | None] = ContextVar("effectgate_run_call", default=None)

#: The longest a seal may take, authorisation and fence included (seed 004's bound).
MAX_SEAL_SECONDS = 30.0


def current_run_call() -> RunCallRef | None:
    """The run call the current context runs in, if a harness set one."""
    return _CURRENT.get()


@contextlib.contextmanager
def run_call_context(ref: RunCallRef) -> Iterator[RunCallRef]:
    """Correlation for code running inside a call: :meth:`Gate.submit` binds to ``ref``.

    It grants nothing: the store still admits only against the exact unfinished call.
    """
    if not isinstance(ref, RunCallRef):
        raise TypeError("run_call_context takes a RunCallRef")
    token = _CURRENT.set(ref)
    try:
        yield ref
    finally:
        _CURRENT.reset(token)


class _Journal(Protocol):
    def __call__(
        self,
        new: NewOperation,
        path: Sequence[State],
        *,
        now: float,
        audit: Mapping[str, object] | None = ...,
        guard: DispatchGuard | None = ...,
    ) -> Journal: ...


def journal_for(store: Store, ref: RunCallRef | None) -> _Journal:
    """How :meth:`Gate.submit` journals: the plain journal, or admitted against ``ref``."""
    if ref is None:
        return store.journal
    if not isinstance(ref, RunCallRef):
        raise InvalidRunCall("run_call must be a RunCallRef", field="run_call")
    return partial(store.journal_bound, ref=ref)


class RunJournal:
    """What a harness embeds to journal its calls (one per process; thread-safe).

    ``actor``: the harness's principal name, recorded in every audit entry.
    """

    def __init__(
        self,
        store: Store,
        *,
        actor: str,
        scope: str = "default",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.actor, self.scope, self.clock = store, actor, scope, clock

    def record(self, call: RunCall) -> tuple[RunCallRecord, bool]:
        """Journal ``call`` before making it: True the first time; False for an identical
        replay (make the call only if you have no record of making it: a missing return is
        uncertain, never a licence to call again). Raises RunCallConflict, RunSealed."""
        return self.store.record_run_call(self.scope, call, now=self.clock(), actor=self.actor)

    def complete(self, ref: RunCallRef, completion: RunCompletion) -> tuple[RunCallRecord, bool]:
        """Record the call's local return (immutable; the identical one again is False)."""
        return self.store.complete_run_call(
            self.scope, ref, completion, now=self.clock(), actor=self.actor
        )

    def get(self, run_id: str, slot: str) -> RunCallRecord | None:
        return self.store.get_run_call(self.scope, run_id, slot)

    def calls(self, run_id: str, *, page: int = 500) -> Iterator[RunCallRecord]:
        """Every call of the run, page by page (bounded memory). A new scan may see calls
        recorded meanwhile; after the seal the membership is stable."""
        after: str | None = None
        while True:
            batch = self.store.list_run_calls(self.scope, run_id, after=after, limit=page)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].call.slot

    def call_context(self, ref: RunCallRef) -> contextlib.AbstractContextManager[RunCallRef]:
        """:func:`run_call_context` (a method so a harness needs one object)."""
        return run_call_context(ref)


@dataclass(frozen=True, slots=True)
class SealRequest:
    """What a seal's authoriser is asked about: this run, this actor, this reason."""

    scope: str
    run_id: str
    actor: str
    reason: str


class RunSealer:
    """Seal runs under a host's authority.

    ``authorize(request)`` must raise (any :class:`~effectgate.errors.EffectgateError`, e.g.
    PermissionDenied) to refuse; there is no default: a sealer without one is a config error.
    ``fence(request)``: an optional context manager held across the store write (the host's
    authority must stay current until the seal commits). ``deadline``: seconds from the start
    of :meth:`seal` by which the write must begin (at most 30); past it nothing is written and
    :class:`RunSealDeadline` is raised.
    """

    def __init__(
        self,
        store: Store,
        *,
        authorize: Callable[[SealRequest], None],
        fence: Callable[[SealRequest], contextlib.AbstractContextManager[object]] | None = None,
        deadline: float = MAX_SEAL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(authorize):
            raise ConfigError("a RunSealer needs an authorize hook: seals are never implicit")
        if not 0 < deadline <= MAX_SEAL_SECONDS:
            raise ConfigError(f"a seal's deadline is from 0 to {MAX_SEAL_SECONDS} seconds")
        self.store, self.authorize, self.fence = store, authorize, fence
        self.deadline, self.clock = deadline, clock

    def seal(self, run_id: str, *, actor: str, reason: str, scope: str = "default") -> RunSeal:
        """Seal ``run_id`` (idempotent: an existing seal is returned as stored)."""
        check_seal_request(scope, run_id, actor, reason)
        request = SealRequest(scope, run_id, actor, reason)
        by = self.clock() + self.deadline
        self.authorize(request)
        with self.fence(request) if self.fence is not None else contextlib.nullcontext():
            now = self.clock()
            if now > by:
                raise RunSealDeadline(
                    f"sealing run {run_id!r} passed its {self.deadline:g}s deadline before "
                    "the write: nothing was sealed"
                )
            seal, _ = self.store.seal_run(scope, run_id, actor=actor, reason=reason, now=now)
        return seal
