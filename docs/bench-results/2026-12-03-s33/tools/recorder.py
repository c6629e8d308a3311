"""Recording one B1 action on a SQLite store and replaying it: shared by the sitting scripts."""

import resource
import sqlite3
import time
from typing import Any

_PREFIX, _INDEX = "zq", 7
#: The operation id of the recorded action, swapped for each replayed action's own.
RECORDED_ID = f"{_PREFIX}{_INDEX}"


class Recorder:
    """A cursor that appends ``(sql, params)`` to ``into`` for each statement, then runs it;
    every other attribute is the real cursor's."""

    def __init__(self, cur: sqlite3.Cursor, into: list[tuple[str, tuple[Any, ...]]]) -> None:
        self.__dict__["_cur"], self.__dict__["_into"] = cur, into

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._into.append((sql, tuple(params)))
        return self._cur.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def record_action(store: Any, gate: Any) -> tuple[list[tuple[Any, str, tuple[Any, ...]]], float]:
    """The statements of one real B1 action (operation id :data:`RECORDED_ID`) as ``(cursor, sql,
    params)``, BEGIN and COMMIT on the transaction engine's cursor and the rest on the store's,
    and the time just before it ran (its timestamps are later). Reaches into private
    attributes (``_cur``, ``_gate.engine._cur``): a one-off measurement, not an API."""
    from effectgate.bench.b1 import _gate_loop

    recorded: list[tuple[str, tuple[Any, ...]]] = []
    body, engine = store._cur, store._gate.engine._cur
    store._cur, store._gate.engine._cur = Recorder(body, recorded), Recorder(engine, recorded)
    started = time.time()
    try:
        _gate_loop(gate, _PREFIX, _INDEX, 1, None)
    finally:
        store._cur, store._gate.engine._cur = body, engine
    statements = [
        (engine if sql.split()[0].upper() in ("BEGIN", "COMMIT") else body, sql, params)
        for sql, params in recorded
    ]
    return statements, started


def swap(value: Any, marker: str, op: str, started: float, now: float) -> Any:
    """A recorded parameter for another action: ``marker`` (the recorded operation id) in a
    text becomes ``op``, an instant after ``started`` (the recording's) becomes ``now``."""
    if isinstance(value, str) and marker in value:
        return value.replace(marker, op)
    if isinstance(value, float) and value > started - 1:
        return now
    return value


def for_actions(
    statements: list[tuple[Any, str, tuple[Any, ...]]],
    started: float,
    prefix: str,
    start: int,
    count: int,
) -> list[tuple[str, list[tuple[Any, str, tuple[Any, ...]]]]]:
    """The recorded statements once per action ``prefix + i`` (``i`` from ``start``), each
    with its own id and the time it was built: ``(operation id, statements)`` per action,
    ready to run with no other work (build them before the timed loop)."""
    out = []
    for i in range(start, start + count):
        op, now = f"{prefix}{i}", time.time()
        stmts = [
            (cur, sql, tuple(swap(p, RECORDED_ID, op, started, now) for p in params))
            for cur, sql, params in statements
        ]
        out.append((op, stmts))
    return out


def measure(fn: Any, n: int) -> tuple[float, float, float]:
    """Run ``fn`` (``n`` actions): wall, user and system microseconds per action."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return (
        wall / n * 1e6,
        (r1.ru_utime - r0.ru_utime) / n * 1e6,
        (r1.ru_stime - r0.ru_stime) / n * 1e6,
    )
