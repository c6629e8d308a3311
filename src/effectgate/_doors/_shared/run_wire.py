"""How a front door carries a run-call reference (HTTP header, MCP ``_meta``): parsed here once."""

from effectgate._core.runs import RunCallRef
from effectgate.errors import InvalidRunCall

__all__ = ["RUN_CALL_HEADER", "RUN_CALL_META_KEY", "parse_run_call"]

RUN_CALL_HEADER = "Effectgate-Run-Call"
RUN_CALL_META_KEY = "io.effectgate/run_call"


def parse_run_call(value: object) -> RunCallRef | None:
    """A run-call reference from a header (``RUN/SLOT/CALL``) or an MCP ``_meta`` object
    (``{"run_id", "slot", "call_id"}``); None when absent. Anything else is refused."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.strip().split("/")
        if len(parts) != 3:
            raise InvalidRunCall(f"{RUN_CALL_HEADER} must be RUN/SLOT/CALL", field="run_call")
        return RunCallRef(*parts)
    if isinstance(value, dict) and set(value) == {"run_id", "slot", "call_id"}:
        return RunCallRef(value["run_id"], value["slot"], value["call_id"])
    raise InvalidRunCall(
        "a run call is an object with exactly run_id, slot and call_id", field="run_call"
    )
