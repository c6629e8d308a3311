"""The store's contract, one protocol per role, grouped by role in this package's modules;
:class:`Store` is all of them. It imports only the store's records (``store.base``) and the core.

The groups: :mod:`.ledger` (writes, reads, the sweep, request keys), :mod:`.controls`
(controls, releases, approvals, speculation, quarantine), :mod:`.evidence` (audit log, alerts,
retention),
:mod:`.identity` (principals, grants, policy versions, channel nonces) and :mod:`.runs` (runs,
snapshots, continuations, budgets). Every name is re-exported here: import from
``effectgate.store.roles``.

Every method is its own transaction unless stated. A capability that holds state adds a role:
a protocol here, one implementation over the dialect hooks (:mod:`effectgate.store._ledger`
shows the pattern: SQL written once with ``?`` placeholders, run through ``_rows`` for reads
and ``_run`` for one write transaction), DDL in each dialect's migrations, and the same
contract tests on both stores. Only connections and transactions, DDL, the hot path's
statements, locks and leases, and error classification are written per dialect.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from effectgate.store.roles.controls import (
    Approvals,
    Controls,
    ModelWindows,
    Quarantine,
    Rehearsals,
    Releases,
    Speculations,
)
from effectgate.store.roles.evidence import Alerts, AuditLog, Retention
from effectgate.store.roles.identity import ChannelNonces, Grants, PolicyVersions, Principals
from effectgate.store.roles.ledger import LedgerReads, LedgerWrites, RequestKeys, Sweep
from effectgate.store.roles.runs import Budgets, Continuations, Runs, RunSnapshots

__all__ = [
    "Alerts",
    "Approvals",
    "AuditLog",
    "Budgets",
    "ChannelNonces",
    "Controls",
    "Grants",
    "LedgerReads",
    "LedgerWrites",
    "ModelWindows",
    "PolicyVersions",
    "Principals",
    "Quarantine",
    "Rehearsals",
    "Releases",
    "RequestKeys",
    "Retention",
    "RunSnapshots",
    "Runs",
    "Speculations",
    "Store",
    "Sweep",
]


@runtime_checkable
class Store(
    LedgerWrites,
    LedgerReads,
    Sweep,
    Controls,
    Releases,
    Approvals,
    AuditLog,
    Alerts,
    Principals,
    Speculations,
    Quarantine,
    Runs,
    Continuations,
    RunSnapshots,
    Retention,
    Budgets,
    Grants,
    PolicyVersions,
    ChannelNonces,
    RequestKeys,
    Rehearsals,
    ModelWindows,
    Protocol,
):
    """Every role: what :func:`effectgate.store.open_store` returns."""

    def migrate(self) -> None:
        """Apply pending schema migrations (idempotent, safe from several processes)."""

    def schema_version(self) -> int: ...

    def close(self) -> None: ...
