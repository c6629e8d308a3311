"""The PostgreSQL hot path on the wire: named prepared statements sent through libpq directly.

The journal and the receipt are two fixed statements run thousands of times a second. Through
psycopg's cursors each execute cost ~35 us of client CPU (a cursor object, query conversion, a
dumper per parameter, the prepare bookkeeping) and its pipeline another ~40 us; the same
messages sent with ``PGconn.send_query_prepared`` and read with psycopg's own non-blocking
generators (``conn.wait``, so interrupts and timeouts behave as on every other call) cost a
few. The protocol is unchanged: the same Parse/Bind/Execute messages, one Sync per trip, so a
trip is still ONE implicit transaction that the server commits at its Sync.

Each statement is parsed once per connection, in the same pipeline as its first execution (no
extra round trip). Parameters travel as text with the types named below; everything else is
left for the server to infer from the statement, as psycopg does for ``str``.

:func:`reusable` is the hook of the hot path's own connections
(:class:`~effectgate.store._conn_stack.ConnStack`, see ``PgConnections._hot``): a connection
goes back on the stack only when idle and healthy; after any error it is closed, so a
half-finished pipeline or a statement parsed in an aborted trip never reaches the next caller.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.waiting import Ready, Wait

from effectgate.errors import StoreError

__all__ = ["Prepared", "TripError", "reusable", "text_row", "trip"]

Conn = psycopg.Connection[Any]

_FLOAT8, _INT8, _INT4, _BOOL = 701, 20, 23, 16
#: Parameters that are not text: their types, so ``INSERT ... SELECT $n`` never sees ``unknown``.
_TYPES: Mapping[str, int] = {
    "now": _FLOAT8,
    "created_at": _FLOAT8,
    "updated_at": _FLOAT8,
    "submitted_at": _FLOAT8,
    "expires_at": _FLOAT8,
    "a_at": _FLOAT8,
    "value_micros": _INT8,
    "required": _INT4,
    "lane": _INT4,
    "dispatch": _BOOL,
    "approval": _BOOL,
    "release": _BOOL,
}
_NAMED = re.compile(r"%\((\w+)\)s")
_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_IDLE = pq.TransactionStatus.IDLE


class TripError(Exception):
    """A trip failed; ``error`` is psycopg's exception (with its SQLSTATE, if the server sent
    one) and ``conn`` the connection it failed on, for the caller's classification."""

    def __init__(self, error: psycopg.Error, conn: Conn) -> None:
        super().__init__(str(error))
        self.error, self.conn = error, conn


@dataclass(frozen=True)
class Prepared:
    """One statement of the hot path: its server-side name, its text with ``$n`` placeholders,
    and the parameter names (or, for ``%s`` statements, their count) in ``$n`` order."""

    name: bytes
    text: bytes
    names: tuple[str, ...]
    types: tuple[int, ...]

    @classmethod
    def named(cls, name: str, query: str) -> Prepared:
        """From a psycopg-style query with ``%(name)s`` placeholders (a name may repeat)."""
        order: list[str] = []

        def number(m: re.Match[str]) -> str:
            if m.group(1) not in order:
                order.append(m.group(1))
            return f"${order.index(m.group(1)) + 1}"

        text = _NAMED.sub(number, query)
        if "%s" in text:
            raise StoreError(f"statement {name} mixes named and positional placeholders")
        return cls(
            name.encode(), text.encode(), tuple(order), tuple(_TYPES.get(n, 0) for n in order)
        )

    @classmethod
    def positional(cls, name: str, query: str) -> Prepared:
        """From a query with ``%s`` placeholders, all text."""
        parts = query.split("%s")
        text = parts[0] + "".join(f"${i}{p}" for i, p in enumerate(parts[1:], 1))
        count = len(parts) - 1
        return cls(name.encode(), text.encode(), tuple(str(i) for i in range(count)), (0,) * count)

    def encode(self, params: Mapping[str, Any] | Sequence[Any]) -> list[bytes | None]:
        if isinstance(params, Mapping):
            values: Sequence[Any] = [params[n] for n in self.names]
        else:
            values = params
            if len(values) != len(self.names):
                raise StoreError(f"statement {self.name!r}: {len(values)} parameters")
        # One lookup by exact type; a subclass takes its nearest base's form (_text).
        return [_TEXT.get(type(v), _text)(v) for v in values]


#: The text form of each parameter type. bool is an int subclass, so a type is looked up along
#: its MRO (:func:`_text`): bool finds its own entry before int's.
_TEXT: dict[type, Callable[[Any], bytes | None]] = {
    str: str.encode,
    type(None): lambda _: None,
    bool: lambda v: b"t" if v else b"f",
    int: lambda v: str(v).encode(),
    float: lambda v: repr(v).encode(),
}


def _text(value: object) -> bytes | None:
    """A parameter whose exact type has no entry in :data:`_TEXT`: its nearest base's form."""
    for base in type(value).__mro__:
        encode = _TEXT.get(base)
        if encode is not None:
            return encode(value)
    raise StoreError(f"hot-path parameter of type {type(value).__name__} has no text form")


#: Statement names each connection has parsed, by the connection's id: an entry goes when its
#: connection is collected (weakref.finalize), before anything else can take that id.
_parsed: dict[int, set[bytes]] = {}


def _parsed_by(conn: Conn) -> set[bytes]:
    known = _parsed.get(id(conn))
    if known is None:
        known = _parsed[id(conn)] = set()
        weakref.finalize(conn, _parsed.pop, id(conn), None)
    return known


def trip(conn: Conn, statements: Sequence[tuple[Prepared, Any]]) -> list[pq.abc.PGresult]:
    """Send ``statements`` as one pipeline with one Sync (one implicit transaction, one round
    trip) and return their results, in order. Raise :class:`TripError` on any failure:
    the server aborted the implicit transaction (nothing written) or the connection failed
    (the outcome is unknown); the caller classifies it and must not reuse ``conn``.
    """
    pg = conn.pgconn
    known = _parsed_by(conn)
    new = list({p.name: p for p, _ in statements if p.name not in known}.values())  # each once
    try:
        pg.enter_pipeline_mode()
        for p in new:
            pg.send_prepare(p.name, p.text, p.types)
        for p, params in statements:
            pg.send_query_prepared(p.name, p.encode(params))
        pg.pipeline_sync()
        results = conn.wait(_exchange(pg))
        pg.exit_pipeline_mode()
    except psycopg.Error as exc:
        raise TripError(exc, conn) from exc
    # One result per Parse and per statement (an error or, after one, PIPELINE_ABORTED).
    if len(results) != len(new) + len(statements):
        raise TripError(psycopg.OperationalError(f"{len(results)} results in the pipeline"), conn)
    for res in results:
        if res.status not in _OK:
            error = psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
            raise TripError(error, conn)
    known.update(p.name for p in new)
    return results[len(new) :]


def _exchange(pg: pq.abc.PGconn) -> Generator[Wait, Ready | int, list[pq.abc.PGresult]]:
    """Flush the pipeline, then read every result up to its Sync: one ``conn.wait`` per trip
    (psycopg's generators take one per statement, each a poll of its own)."""
    while pg.flush() != 0:
        ready = yield Wait.RW
        if ready & Ready.R:
            pg.consume_input()
    results: list[pq.abc.PGresult] = []
    while True:
        while pg.is_busy():
            ready = yield Wait.R
            if ready:
                pg.consume_input()
        res = pg.get_result()
        if res is None:  # the end of one statement's results
            continue
        if res.status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        results.append(res)


def text_row(res: pq.abc.PGresult, row: int) -> tuple[str | None, ...]:
    """Row ``row`` of a text result, each value ``str`` or None (NULL)."""
    return tuple(
        None if (v := res.get_value(row, c)) is None else v.decode() for c in range(res.nfields)
    )


def reusable(conn: Conn) -> bool:
    """A hot connection given back may serve the next caller: open, idle, out of pipeline
    mode (the hook of :class:`~effectgate.store._conn_stack.ConnStack`)."""
    return (
        not conn.closed
        and conn.pgconn.transaction_status == _IDLE
        and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
    )
