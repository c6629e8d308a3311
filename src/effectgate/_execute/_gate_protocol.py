"""The narrow views of the gate that its stages need, so no stage imports :mod:`.executor`.

:class:`effectgate.Gate` satisfies both structurally; the stages (``continuations``,
``speculation``, ``evaluate``) and the standing ``dispatcher`` type their ``gate`` parameter
with one of these instead of importing ``Gate``, which keeps the executor the only module that
depends on them and never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from effectgate._core.controls import Verdict
from effectgate._core.intent import Registry
from effectgate._execute.adapter import Adapter
from effectgate._execute.alerts import AlertSink
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["ContinuationGate", "DispatchingGate", "GateView", "SpeculationGate"]


class GateView(Protocol):
    """What every stage reads from the gate: its store, action classes, adapters and clock."""

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def clock(self) -> Callable[[], float]: ...


class ContinuationGate(GateView, Protocol):
    """What a continuation (retry, compensation) needs: journal through the gate, know who it is."""

    @property
    def process_id(self) -> str: ...

    def submit(
        self,
        action: str,
        operation_id: str,
        intent: Mapping[str, object],
        *,
        scope: str = ...,
        principal: str | None = ...,
    ) -> Operation: ...


class SpeculationGate(GateView, Protocol):
    """What speculation needs: the retry horizon's parts and where alerts go."""

    @property
    def dispatch_timeout(self) -> float: ...

    @property
    def in_flight_grace(self) -> float: ...

    @property
    def alerts(self) -> AlertSink | None: ...


class DispatchingGate(GateView, Protocol):
    """What the standing dispatcher needs: the gate's one dispatch path, with its verdict."""

    def _dispatch(
        self,
        scope: str,
        operation_id: str,
        correlation_id: str | None,
        dispatcher: str | None = ...,
    ) -> tuple[Operation, Verdict | None]: ...
