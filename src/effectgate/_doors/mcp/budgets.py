"""The budgets over MCP (docs/budgets.md): harness-facing tools on the agent MCP server.

A harness (a token with role ``harness``) sees these tools beside the action classes; an
agent's token never sees them, and calling one without the harness capability is refused
(``forbidden``), so a model cannot reserve, admit or settle for itself. Each tool works
in the caller's scope, with the same strict wire models as the HTTP routes (nothing coerced,
unknown fields refused) and the same store calls:

* ``budget_reserve``: admit a reservation under a plan (``{plan_id, ...request}``);
* ``budget_admit_run``: admit a run under an open leaf (``{plan_id, reservation_id, run_id}``);
* ``budget_check``: may work go on under a reservation (``{plan_id, reservation_id}``);
* ``budget_settle``: settle a reservation (``{plan_id, settlement}``) or the leaf a run was
  admitted under from the run's stored usage (``{run_id}``);
* ``budget_usage``: a plan's account as a tree (``{plan_id}``) or a run's budget, its leaf and
  its dispatched value (``{run_id}``).

A refusal is an ``isError`` result naming the stable code (``budget_exceeded`` with its
dimension, ``reservation_conflict``, ...), as every MCP refusal is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import mcp_types as types
from pydantic import BaseModel, ValidationError

from effectgate._doors._shared.budget_wire import ReservationIn, SettlementIn, StrictModel
from effectgate._service import Principal, Service
from effectgate.errors import IntentError, ReservationNotFound

__all__ = ["BUDGET_TOOLS", "BUDGET_TOOL_NAMES", "budget_call"]

M = TypeVar("M", bound=BaseModel)
_ID: Final = {"type": "string", "maxLength": 128}


def _object(props: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(props),
        "required": required,
        "additionalProperties": False,
    }


_RESERVE = ReservationIn.model_json_schema()
_RESERVE["properties"] = {"plan_id": _ID, **_RESERVE["properties"]}
_RESERVE["required"] = ["plan_id", *_RESERVE.get("required", [])]

BUDGET_TOOLS: Final = (
    types.Tool(
        name="budget_reserve",
        description="Reserve capacity under a plan's shared account (harness only). The same "
        "reservation_id and request again is a replay.",
        input_schema=_RESERVE,
    ),
    types.Tool(
        name="budget_admit_run",
        description="Admit a run under an open leaf reservation: the run's budget becomes the "
        "leaf's allocation (harness only).",
        input_schema=_object(
            {"plan_id": _ID, "reservation_id": _ID, "run_id": _ID},
            ["plan_id", "reservation_id", "run_id"],
        ),
    ),
    types.Tool(
        name="budget_check",
        description="Check that work may go on under a reservation (grants nothing).",
        input_schema=_object(
            {"plan_id": _ID, "reservation_id": _ID}, ["plan_id", "reservation_id"]
        ),
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="budget_settle",
        description="Settle a reservation ({plan_id, settlement}) or the leaf a run was "
        "admitted under, from the run's stored usage ({run_id}). Final.",
        input_schema=_object(
            {"plan_id": _ID, "settlement": SettlementIn.model_json_schema(), "run_id": _ID}, []
        ),
    ),
    types.Tool(
        name="budget_usage",
        description="A plan's account as a tree with used, reserved and remaining per "
        "dimension ({plan_id}), or a run's budget and dispatched value ({run_id}).",
        input_schema=_object({"plan_id": _ID, "run_id": _ID}, []),
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ),
)
BUDGET_TOOL_NAMES: Final = frozenset(t.name for t in BUDGET_TOOLS)


class _PlanLeaf(StrictModel):
    plan_id: str
    reservation_id: str


class _AdmitRun(_PlanLeaf):
    run_id: str


class _Settle(StrictModel):
    plan_id: str | None = None
    settlement: SettlementIn | None = None
    run_id: str | None = None


class _Usage(StrictModel):
    plan_id: str | None = None
    run_id: str | None = None


def _parse(model: type[M], args: Mapping[str, Any]) -> M:
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise IntentError(f"{where}: {first['msg']}", field=where, reason=first["type"]) from None


def _one_of(a: object, b: object, names: str) -> None:
    if (a is None) == (b is None):
        raise IntentError(f"give exactly one of {names}", field=names.split(" or ")[0])


def budget_call(
    service: Service, who: Principal, name: str, args: Mapping[str, Any]
) -> dict[str, Any]:
    """Run one budget tool for ``who`` (already holding the harness capability) in its scope."""
    store, now, scope = service.store, service.clock(), who.scope
    calls: dict[str, Callable[[], dict[str, Any]]] = {}

    def reserve() -> dict[str, Any]:
        rest = dict(args)
        plan_id = rest.pop("plan_id", None)
        if not isinstance(plan_id, str):
            raise IntentError("plan_id must be a string", field="plan_id", reason="missing")
        request = _parse(ReservationIn, rest).value(plan_id)
        got, new = store.reserve(scope, request, now=now, actor=who.name)
        return {**got.to_dict(), "new": new}

    def admit_run() -> dict[str, Any]:
        a = _parse(_AdmitRun, args)
        link, new = store.admit_run(
            scope, a.run_id, a.plan_id, a.reservation_id, now=now, actor=who.name
        )
        return {**link.to_dict(), "new": new}

    def check() -> dict[str, Any]:
        a = _parse(_PlanLeaf, args)
        store.check_reservation(scope, a.plan_id, a.reservation_id, now=now)
        return {"plan_id": a.plan_id, "reservation_id": a.reservation_id, "open": True}

    def settle() -> dict[str, Any]:
        a = _parse(_Settle, args)
        _one_of(a.run_id, a.settlement, "run_id or settlement")
        if a.run_id is not None:
            if a.plan_id is not None:
                raise IntentError("a run names its own plan: give run_id alone", field="plan_id")
            got, new = store.settle_run(scope, a.run_id, now=now, actor=who.name)
        else:
            if a.plan_id is None or a.settlement is None:
                raise IntentError("a settlement needs its plan_id", field="plan_id")
            got, new = store.settle(scope, a.plan_id, a.settlement.value(), now=now, actor=who.name)
        return {**got.to_dict(), "new": new}

    def usage() -> dict[str, Any]:
        a = _parse(_Usage, args)
        _one_of(a.plan_id, a.run_id, "plan_id or run_id")
        if a.plan_id is not None:
            return store.plan_account(scope, a.plan_id).to_dict()
        run_id = a.run_id or ""
        state = store.run_budget(scope, run_id)
        if state is None:
            raise ReservationNotFound(f"run {run_id!r} has no budget")
        link = store.run_link(scope, run_id)
        return {
            **state.to_dict(),
            "reservation": None if link is None else link.to_dict(),
            "dispatched_value_micros": store.run_dispatched_value(scope, run_id),
        }

    calls.update(
        budget_reserve=reserve,
        budget_admit_run=admit_run,
        budget_check=check,
        budget_settle=settle,
        budget_usage=usage,
    )
    return calls[name]()
