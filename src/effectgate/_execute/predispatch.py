"""The pre-dispatch pipeline's shapes (the shared contract of issues 14, 15 and 18).

Issue 15 owns this module and the pipeline that runs its stages; this branch holds only the
shapes, so that the authority checks (:mod:`effectgate._execute.authority`) can be written
against them and wired at merge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from effectgate._core.intent import ActionClass
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["DispatchContext", "Refusal", "Stage"]


@dataclass(frozen=True, slots=True)
class Refusal:
    move: Literal["reject", "reapprove"]  # validated -> rejected | validated -> awaiting_approval
    code: str  # stable error/outcome code, e.g. "grant_revoked"
    reason: str  # one printable line for the audit and the caller


@dataclass(frozen=True, slots=True)
class DispatchContext:  # what a stage may read; stages never write
    entry: Operation  # the validated row about to be dispatched
    action_class: ActionClass
    store: Store
    now: float
    dispatcher: str | None  # principal/process dispatching (None: the gate itself)


Stage = Callable[[DispatchContext], Refusal | None]  # runs BEFORE the dispatch transaction
