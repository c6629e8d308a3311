"""Recovery snapshots of sealed runs, written once over the hooks (roles.RunSnapshots).

A snapshot is read in one transaction that first locks the run's row, the guard every writer
of the run's calls, returns, receipts and bindings takes: the view is the journal at one
instant. Reads are bounded (one row past the bound tells an oversized journal, which is
refused, never truncated). Snapshots are kept by digest: a later one that disagrees (an effect
settled since, a late return) is stored beside the earlier, never over it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from effectgate._core import run_snapshot as snap
from effectgate._core.runs import check_run_id, check_scope
from effectgate.errors import RunNotFound, RunNotSealed
from effectgate.store._hooks import StoreHooks
from effectgate.store._runs import call_record, run_lane
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, credential_marker

__all__ = ["RunSnapshotRoles", "SnapshotInfo"]

_CALLS = (
    "SELECT scope, request, started_at, completion, completed_at, effects, record_digest "
    "FROM run_calls WHERE scope = ? AND run_id = ? ORDER BY slot LIMIT ?"
)
_RECEIPTS = (
    "SELECT slot, receipt_digest, receipt FROM provider_receipts WHERE scope = ? AND run_id = ? "
    "ORDER BY slot, receipt_digest LIMIT ?"
)
_EFFECTS = (
    "SELECT e.operation_id, e.slot, e.call_id, e.admitted_at, o.action, o.fingerprint, "
    "o.state, o.venue_id FROM run_effects e JOIN operations o ON o.scope = e.scope "
    "AND o.operation_id = e.operation_id WHERE e.scope = ? AND e.run_id = ? "
    "ORDER BY e.operation_id LIMIT ?"
)

SnapshotInfo = tuple[str, int, int, float, str]
"""``(digest, entries, size_bytes, created_at, created_by)`` of a stored snapshot."""


def _call_entry(r: Sequence[Any]) -> dict[str, object]:
    return {**call_record(r[:6]).to_dict(), "record_digest": str(r[6])}


class RunSnapshotRoles(StoreHooks):
    """Take, keep and read recovery snapshots of sealed runs."""

    def snapshot_run(
        self, scope: str, run_id: str, *, now: float, actor: str
    ) -> tuple[bytes, str, bool]:
        """The sealed run's snapshot: ``(document, digest, stored_now)``.

        :class:`RunNotFound`, :class:`RunNotSealed`, or
        :class:`~effectgate.errors.RunSnapshotTooLarge` past a bound (nothing stored).
        """
        scope, run_id = check_scope(scope), check_run_id(run_id)

        def work(tx: SharedTx, _: Operation | None) -> tuple[bytes, str, bool]:
            run = tx.rows(
                "UPDATE runs SET calls = calls WHERE scope = ? AND run_id = ? "
                "RETURNING sealed_at, sealed_by, seal_reason",
                (scope, run_id),
            )
            if not run:
                raise RunNotFound(f"no run {run_id!r} in scope {scope!r}")
            sealed_at, sealed_by, reason = run[0]
            if sealed_at is None:
                raise RunNotSealed(f"run {run_id!r} is not sealed: seal it first")
            seal = {
                "scope": scope,
                "run_id": run_id,
                "actor": sealed_by,
                "reason": reason,
                "sealed_at": f"{float(sealed_at):.6f}",
            }
            bound = snap.MAX_ENTRIES + 1
            calls = [_call_entry(r) for r in tx.rows(_CALLS, (scope, run_id, bound))]
            receipts = [
                {"slot": str(r[0]), "receipt_digest": str(r[1]), **_json(r[2])}
                for r in tx.rows(_RECEIPTS, (scope, run_id, bound - len(calls)))
            ]
            effects = [
                snap.effect_entry(
                    str(r[0]), str(r[1]), str(r[2]), float(r[3]), str(r[4]), str(r[5]),
                    str(r[6]), None if r[7] is None else str(r[7]),
                )
                for r in tx.rows(_EFFECTS, (scope, run_id, bound - len(calls) - len(receipts)))
            ]  # fmt: skip
            document, digest = snap.build(seal, calls, receipts, effects)
            entries = len(calls) + len(receipts) + len(effects)
            stored = tx.rows(
                "INSERT INTO run_snapshots (scope, run_id, digest, document, entries, "
                "size_bytes, created_at, created_by) VALUES (?,?,?,?,?,?,?,?) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (scope, run_id, digest, document.decode(), entries, len(document), now, actor),
            )
            if stored:
                tx.audit(
                    "run_snapshot",
                    {
                        "run_id": run_id,
                        "digest": digest,
                        "entries": entries,
                        "size_bytes": len(document),
                        "by": actor,
                        **credential_marker(actor),
                    },
                    now,
                    scope,
                )
            return document, digest, bool(stored)

        return self._run(work, f"snapshot run {run_id}", run_lane(scope, run_id))

    def list_run_snapshots(self, scope: str, run_id: str) -> list[SnapshotInfo]:
        """Every snapshot kept of a run, oldest first."""
        rows = self._rows(
            "SELECT digest, entries, size_bytes, created_at, created_by FROM run_snapshots "
            "WHERE scope = ? AND run_id = ? ORDER BY created_at, digest",
            (check_scope(scope), check_run_id(run_id)),
            "list_run_snapshots",
        )
        return [(str(r[0]), int(r[1]), int(r[2]), float(r[3]), str(r[4])) for r in rows]

    def get_run_snapshot(self, scope: str, run_id: str, digest: str) -> bytes | None:
        rows = self._rows(
            "SELECT document FROM run_snapshots WHERE scope = ? AND run_id = ? AND digest = ?",
            (check_scope(scope), check_run_id(run_id), digest),
            "get_run_snapshot",
        )
        return str(rows[0][0]).encode() if rows else None


def _json(text: object) -> dict[str, Any]:
    value = json.loads(str(text))
    if not isinstance(value, dict):  # unreachable: the store writes objects
        raise TypeError("a stored receipt is not an object")
    return value
