"""Where one seed's ledger lives, and the store each simulated process opens onto it.

A :class:`SimLedger` opens every store through :func:`effectgate.store.open_store` (the URL
handling and options of production), with its connections made faulty by
:mod:`effectgate._sim.ledger_faults`. ``crash`` closes every store it opened (the OS dropping
a dead process's connections); the next :meth:`SimLedger.connect` reopens from the ledger alone.

- SQLite: a file in a temporary folder; every process shares one store object (one write
  connection, as the processes' turns are serialised by the scheduler anyway), which keeps
  the many seeds a second cheap.
- PostgreSQL: a fresh schema per seed (created, migrated, dropped at the end); each simulated
  process opens its own :class:`~effectgate.store.postgres.PostgresStore` on it, with its own
  pool and connections, serialised by the scheduler so a seed replays exactly.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from effectgate._sim.ledger_faults import (
    PG_KINDS,
    SQLITE_KINDS,
    LedgerFaults,
    postgres_connections,
    sqlite_connections,
)
from effectgate._sim.ledgers import copy_fresh_ledger
from effectgate.store import open_store
from effectgate.store.base import parse_store_url, split_schema, with_schema
from effectgate.store.roles import Store

__all__ = ["SimLedger", "sim_ledger"]


class SimLedger:
    """One seed's ledger; :meth:`connect` gives a process its store (``create`` on first)."""

    faults: LedgerFaults

    def connect(self, process: str) -> Store:
        raise NotImplementedError

    def crash(self) -> None:
        """Every process died: close each store opened since the last crash."""
        raise NotImplementedError

    def close(self) -> None:
        """The seed is over: close everything and remove the ledger."""
        raise NotImplementedError

    def sibling(self, name: str) -> SimLedger:
        """Another empty ledger of the same kind for this seed, closed and removed with this
        one: for an actor whose changes are whole-ledger (a prune cuts every lane's prefix,
        whoever's rows are in it) and so must not run on the world's shared ledger."""
        raise NotImplementedError


class _SQLiteLedger(SimLedger):
    def __init__(self) -> None:
        self._siblings: list[SimLedger] = []
        self.faults = LedgerFaults(SQLITE_KINDS)
        self._folder = Path(tempfile.mkdtemp(prefix="effectgate-sim-"))
        self._path = self._folder / "ledger.db"
        self._url = f"sqlite:///{self._path}"
        self._store: Store | None = None
        self._created = False

    def connect(self, process: str) -> Store:
        if self._store is None:
            if not self._created:  # a copy of a migrated template: migrating is a tenth of a seed
                copy_fresh_ledger(self._path)
            with sqlite_connections(self.faults):
                # synchronous=OFF: a simulated crash is in-process, the OS keeps every write.
                self._store = open_store(self._url, synchronous="OFF")
            self._created = True
        return self._store

    def crash(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def close(self) -> None:
        for sibling in self._siblings:
            sibling.close()
        self.crash()
        shutil.rmtree(self._folder, ignore_errors=True)

    def sibling(self, name: str) -> SimLedger:
        ledger = _SQLiteLedger()
        self._siblings.append(ledger)
        return ledger


class _PostgresLedger(SimLedger):
    def __init__(self, url: str, seed: int, *, faulty: bool = True) -> None:
        conninfo, schema = split_schema(url)
        self._siblings: list[SimLedger] = []
        self._conninfo, self._prefix, self._seed = conninfo, schema or "eg_sim", seed
        # The pid keeps two runs on one database apart; it never reaches a history.
        self._schema = f"{self._prefix}_{os.getpid()}_{seed}"
        self._url = with_schema(conninfo, self._schema)
        self.faults = LedgerFaults(PG_KINDS)
        self._drop()  # a schema left by a killed run under the same pid and seed
        # A sibling's connections are made while the world's patch is on (faulty, but only a
        # fault the world arms fires, and it arms none during a sibling's steps): no second one.
        self._patch: AbstractContextManager[None] = (
            postgres_connections(self.faults) if faulty else nullcontext()
        )
        self._patch.__enter__()
        # The driver and the pool warn of every connection a fault dropped: here that is the
        # workload (as the effectgate logger's alarms are, see run_seed).
        self._logger = logging.getLogger("psycopg")
        self._level = self._logger.level
        self._logger.setLevel(logging.CRITICAL)
        self._stores: dict[str, Store] = {}
        self._created = False

    def connect(self, process: str) -> Store:
        store = self._stores.get(process)
        if store is None:
            # synchronous_commit=off: like SQLite's OFF here, a crash is in-process. The first
            # open of the seed migrated the schema: a reopen (a restart) needs no migration.
            first = not self._created
            store = open_store(self._url, create=first, migrate=first, synchronous_commit="off")
            self._created = True
            self._stores[process] = store
        return store

    def crash(self) -> None:
        stores, self._stores = self._stores, {}
        for store in stores.values():
            store.close()

    def sibling(self, name: str) -> SimLedger:
        url = with_schema(self._conninfo, f"{self._prefix}_{name}")
        ledger = _PostgresLedger(url, self._seed, faulty=False)
        self._siblings.append(ledger)
        return ledger

    def close(self) -> None:
        try:
            for sibling in self._siblings:
                sibling.close()
            self.crash()
            self._drop()
        finally:
            self._patch.__exit__(None, None, None)
            self._logger.setLevel(self._level)

    def _drop(self) -> None:
        from effectgate.store.postgres import drop_schema  # psycopg is an extra

        drop_schema(self._url, self._schema)


def sim_ledger(store: str | None, seed: int) -> SimLedger:
    """The ledger for one seed: a temporary SQLite file (``store`` None or ``sqlite``), or a
    fresh schema on the PostgreSQL server of ``store`` (``postgresql://...``, its ``schema=``
    the prefix of the seeds' schemas)."""
    if store is None or store == "sqlite":
        return _SQLiteLedger()
    dialect, _ = parse_store_url(store)
    if dialect != "postgresql":
        raise ValueError("the simulator's --store is 'sqlite' or a postgresql:// URL")
    return _PostgresLedger(store, seed)
