"""The pre-dispatch pipeline's shared shapes (docs/design.md; issue 15 owns the pipeline).

Only the values stages and in-transaction checks exchange live here, so branches that plug
checks in (issues 14 and 18) share one definition.
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
