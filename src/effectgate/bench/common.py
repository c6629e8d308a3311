"""What every workload shares: the result type, the store target, commit counters, the gate.

A *target* is where the user asked the benchmark to run (``--store``). The benchmark never writes
into an existing ledger: on SQLite it creates fresh files in the directory of the given path (the
point is which disk and filesystem are measured) and removes them afterwards; on PostgreSQL it
creates a fresh schema per workload in the given database and drops it afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from effectgate._core.intent import Registry
from effectgate._core.policy import LimitPolicy, PolicySet
from effectgate._execute.adapter import Adapter
from effectgate._execute.executor import Gate
from effectgate.errors import ConfigError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.base import parse_store_url, with_schema
from effectgate.store.roles import Store

__all__ = [
    "INTENT_BODY",
    "Figure",
    "SQLiteCommitCounter",
    "Target",
    "bench_gate",
    "bench_policy",
    "percentile",
    "pg_available",
    "pg_commit_count",
    "summarise",
]

#: The B1 intent as the agent would send it: raw JSON bytes, parsed strictly on every action.
INTENT_BODY: bytes = json.dumps(EXAMPLE_ORDER).encode()


@dataclass
class Figure:
    """One printed line: effectgate's figure, the floor measured beside it, and notes."""

    workload: str
    variant: str
    unit: str
    effectgate: float | None
    floor: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    #: "higher" when more is better (throughput), "lower" when less is (seconds, bytes).
    better: str = "higher"

    @property
    def ratio(self) -> float | None:
        """effectgate / floor for throughput, floor / effectgate for times: >1 is never worse."""
        if self.effectgate is None or self.floor is None or not self.floor or not self.effectgate:
            return None
        if self.better == "higher":
            return self.effectgate / self.floor
        return self.floor / self.effectgate

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "variant": self.variant,
            "unit": self.unit,
            "effectgate": self.effectgate,
            "floor": self.floor,
            "ratio": self.ratio,
            "notes": self.notes,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summarise(latencies: Sequence[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds."""
    return {
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
    }


def bench_policy() -> PolicySet:
    """Allow the reference order class automatically (the ``validate`` tier, no approval)."""
    return PolicySet(
        {"submit_order": LimitPolicy(Decimal("1000000000")), "cancel_order": LimitPolicy()}
    )


def bench_gate(store: Store, adapter: Adapter, registry: Registry | None = None) -> Gate:
    reg = registry or default_registry(adapter=adapter.name)
    return Gate(store=store, registry=reg, adapters={adapter.name: adapter}, policy=bench_policy())


# --- commit counting: counted on the wire, never assumed -----------------------------------------

_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)
_BEGIN = re.compile(r"\s*BEGIN\b", re.IGNORECASE)
_END = re.compile(r"\s*(COMMIT|END)\b", re.IGNORECASE)
_ROLLBACK = re.compile(r"\s*ROLLBACK\b", re.IGNORECASE)


class SQLiteCommitCounter:
    """Counts write commits one SQLite connection performs, from the statements it runs.

    An explicit ``COMMIT``/``END`` is one commit; a write statement run outside an explicit
    transaction is an implicit (autocommit) one. Reads outside a transaction commit nothing.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.commits = 0
        self._in_tx = False
        self._conn = conn
        conn.set_trace_callback(self._trace)

    def _trace(self, sql: str) -> None:
        if _BEGIN.match(sql):
            self._in_tx = True
        elif _END.match(sql):
            self._in_tx = False
            self.commits += 1
        elif _ROLLBACK.match(sql):
            self._in_tx = False
        elif not self._in_tx and _WRITE.match(sql):
            self.commits += 1

    def stop(self) -> None:
        self._conn.set_trace_callback(None)

    @classmethod
    def on_store(cls, store: Store) -> SQLiteCommitCounter:
        conn = getattr(store, "_conn", None)
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigError(f"cannot count commits on {store!r}: no SQLite connection found")
        return cls(conn)


def pg_commit_count(url: str) -> int:
    """Transaction ids assigned so far in the cluster: the difference over a run is the number
    of write transactions committed or aborted in it (read-only ones get no id)."""
    import psycopg

    with psycopg.connect(_libpq_url(url), autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    if row is None:
        raise ConfigError("PostgreSQL returned no snapshot")
    return int(row[0])


def _libpq_url(url: str) -> str:
    """Drop effectgate's own query parameters (``schema``) before handing a URL to libpq."""
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("schema=")]
    return base + ("?" + "&".join(kept) if kept else "")


def pg_available() -> bool:
    """Whether this build has the PostgreSQL store."""
    try:
        import effectgate.store.postgres  # noqa: F401
    except ImportError:
        return False
    return True


# --- targets -------------------------------------------------------------------------------------


class Target:
    """Where the benchmark runs, and fresh ledgers on it that leave nothing behind."""

    def __init__(self, url: str | None) -> None:
        self._tmp: str | None = None
        if url is None:
            self._tmp = tempfile.mkdtemp(prefix="effectgate-bench-")
            url = f"sqlite:///{os.path.join(self._tmp, 'ledger.db')}"
        self.url = url
        self.dialect, rest = parse_store_url(url)
        if self.dialect == "sqlite":
            if rest == ":memory:":
                raise ConfigError(
                    "the benchmark measures durable commits: give a file path, "
                    "sqlite:///PATH, not an in-memory database"
                )
            self.directory = os.path.dirname(os.path.abspath(rest)) or "."
            if not os.path.isdir(self.directory):
                raise ConfigError(f"directory {self.directory!r} does not exist")
        else:
            if not pg_available():
                raise ConfigError(
                    "this build has no PostgreSQL store yet; run the benchmark on sqlite:///PATH"
                )
            self.directory = ""

    @property
    def label(self) -> str:
        return "SQLite" if self.dialect == "sqlite" else "PostgreSQL"

    @contextmanager
    def sqlite_file(self, name: str) -> Iterator[str]:
        """A path for a fresh SQLite ledger (with its -wal and -shm), removed afterwards."""
        if self.dialect != "sqlite":
            raise ConfigError("sqlite_file needs a SQLite target")
        work = tempfile.mkdtemp(prefix=f"eg-bench-{name}-", dir=self.directory)
        try:
            yield os.path.join(work, "ledger.db")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    @contextmanager
    def pg_schema(self, name: str) -> Iterator[str]:
        """A store URL on a fresh PostgreSQL schema, dropped afterwards."""
        if self.dialect != "postgresql":
            raise ConfigError("pg_schema needs a PostgreSQL target")
        from effectgate.store.postgres import drop_schema

        schema = f"eg_bench_{name}_{uuid.uuid4().hex[:8]}"
        try:
            yield with_schema(self.url, schema)
        finally:
            drop_schema(_libpq_url(self.url), schema)

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


#: The targets of issue 21 (ratio to the floor measured in the same run); docs/benchmarks.md.
TARGETS = {"B1": 0.7, "B2": 0.7, "B4": 0.5, "B5": 0.5}


def ratio_target(figure: Mapping[str, Any], cores: int | None) -> float | None:
    """The ratio target of one figure, or None where issue 21 sets none: B1 with durability
    off (its target is CPU above the raw loop), B2 past the core count, B5 other than HTTP at
    16 clients (MCP and 64 clients are reported)."""
    workload, variant = figure["workload"], figure.get("variant", "")
    if workload == "B1" and "synchronous=OFF" in variant:
        return None
    if workload == "B2":
        workers = figure.get("notes", {}).get("workers")
        if cores is not None and workers is not None and workers > cores:
            return None
    if workload == "B5" and variant != "HTTP, 16 clients":
        return None
    return TARGETS.get(workload)
