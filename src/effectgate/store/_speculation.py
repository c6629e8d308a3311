"""The speculation role: dual-key speculation records, proposal arrivals and declared key
mappings (seed 000), written once over :class:`StoreHooks`.

Every record carries both keys (the ledger key the sandbox was given and the key it says it
used), the row's fingerprint and the attempt, and its audit entry, written in the same
transaction, names both keys: the two phases of one operation are read from one stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from effectgate._core.speculation import SpeculationRecord, SpeculationVerdict
from effectgate._core.states import State
from effectgate.errors import OperationNotFound, StaleState
from effectgate.store import _sql as sql
from effectgate.store._hooks import Hold, StoreHooks
from effectgate.store._journal import move_locked
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation, dumps

__all__ = ["SpeculationRoles"]

_COLUMNS = (
    "scope, operation_id, seq, ledger_key, sandbox_key, subject, fingerprint, verdict, "
    "reason, expires_at, attempt, evidence, at"
)


def _record(r: Sequence[Any]) -> SpeculationRecord:
    return SpeculationRecord(
        scope=str(r[0]),
        operation_id=str(r[1]),
        seq=int(r[2]),
        operation_key=str(r[3]),
        sandbox_key=None if r[4] is None else str(r[4]),
        subject=None if r[5] is None else str(r[5]),
        fingerprint=str(r[6]),
        verdict=SpeculationVerdict(r[7]),
        reason=str(r[8]),
        expires_at=float(r[9]),
        attempt=int(r[10]),
        evidence=json.loads(r[11]),
        at=float(r[12]),
    )


class SpeculationRoles(StoreHooks):
    """Speculation records, arrivals and key mappings."""

    def note_arrival(self, scope: str, operation_id: str, *, now: float) -> int:
        """Count one more arrival of the proposal under this operation id; the new count
        (the seed's attempt number: audit only, never part of a key)."""

        def work(tx: SharedTx, _: Operation | None) -> int:
            rows = tx.rows(
                "INSERT INTO speculation_state (scope, operation_id, arrivals, updated_at) "
                "VALUES (?,?,1,?) ON CONFLICT (scope, operation_id) DO UPDATE SET "
                "arrivals = speculation_state.arrivals + 1, updated_at = excluded.updated_at "
                "RETURNING arrivals",
                (scope, operation_id, now),
            )
            count = int(rows[0][0])
            tx.audit("proposal_arrived", {"attempt": count}, now, scope, operation_id)
            return count

        return self._run(work, f"arrival {scope}:{operation_id}", Hold(key=(scope, operation_id)))

    def record_speculation(
        self, record: SpeculationRecord, *, now: float, reject: bool = False
    ) -> tuple[SpeculationRecord, Operation | None]:
        """Store one speculation (its ``seq`` assigned here) with its audit entry.

        ``reject``: in the same transaction, the ``validated`` row moves to ``rejected`` with
        the sandbox's reason (a DENY verdict). Returns the record and the row if it moved.
        """
        scope, operation_id = record.scope, record.operation_id

        def work(tx: SharedTx, row: Operation | None) -> tuple[SpeculationRecord, Operation | None]:
            if row is None:
                raise OperationNotFound(f"no operation {operation_id!r} in scope {scope!r}")
            last = tx.rows(
                "SELECT max(seq) FROM speculations WHERE scope = ? AND operation_id = ?",
                (scope, operation_id),
            )
            seq = int(last[0][0] or 0) + 1 if last else 1
            stored = SpeculationRecord(
                scope=scope,
                operation_id=operation_id,
                operation_key=record.operation_key,
                fingerprint=record.fingerprint,
                sandbox_key=record.sandbox_key,
                verdict=record.verdict,
                reason=record.reason,
                expires_at=record.expires_at,
                attempt=record.attempt,
                seq=seq,
                subject=record.subject,
                at=now,
                evidence=dict(record.evidence),
            )
            tx.audit("speculation", stored.to_dict(), now, scope, operation_id)
            tx.write(
                f"INSERT INTO speculations ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    scope,
                    operation_id,
                    seq,
                    stored.operation_key,
                    stored.sandbox_key,
                    stored.subject,
                    stored.fingerprint,
                    stored.verdict.value,
                    stored.reason,
                    stored.expires_at,
                    stored.attempt,
                    dumps(dict(stored.evidence)),
                    now,
                ),
            )
            moved: Operation | None = None
            if reject:
                if row.state is not State.VALIDATED:
                    raise StaleState(f"operation {operation_id!r} is {row.state.value!r}")
                moved = move_locked(
                    tx,
                    row,
                    State.REJECTED,
                    now,
                    f"sandbox denied: {record.reason}",
                    {
                        "by": "speculation",
                        "ledger_key": record.operation_key,
                        "sandbox_key": record.sandbox_key,
                        "seq": seq,
                    },
                )
                # The reason names what decided: the policy allowed it, the sandbox refused.
                why = f"sandbox denied: {record.reason}"
                tx.write(
                    "UPDATE operations SET reason = ? WHERE scope = ? AND operation_id = ?",
                    (why, scope, operation_id),
                )
                moved = replace(moved, reason=why)
            return stored, moved

        return self._run(
            work,
            f"speculation {scope}:{operation_id}",
            Hold(key=(scope, operation_id), row=(scope, operation_id)),
        )

    def mark_speculation_stalled(
        self, scope: str, operation_id: str, detail: str, *, now: float
    ) -> Operation | None:
        """The bound on re-speculation ran out: ``detail`` on the still ``validated`` row and
        an audit entry (no silent pending). None when the row is no longer ``validated``."""

        def work(tx: SharedTx, _: Operation | None) -> Operation | None:
            rows = tx.rows(
                "UPDATE operations SET detail = ?, updated_at = ? WHERE scope = ? AND "
                f"operation_id = ? AND state = 'validated' RETURNING {sql.OP_COLUMNS}",
                (detail, now, scope, operation_id),
            )
            if not rows:
                return None
            tx.audit("speculation_stalled", {"detail": detail}, now, scope, operation_id)
            return sql.operation_from_row(rows[0])

        return self._run(work, f"stalled {scope}:{operation_id}", Hold(key=(scope, operation_id)))

    def speculations(self, scope: str, operation_id: str) -> list[SpeculationRecord]:
        """Every speculation of the operation, oldest first."""
        return [
            _record(r)
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM speculations WHERE scope = ? AND operation_id = ? "
                "ORDER BY seq",
                (scope, operation_id),
                "speculations",
            )
        ]

    def latest_speculation(self, scope: str, operation_id: str) -> SpeculationRecord | None:
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM speculations WHERE scope = ? AND operation_id = ? "
            "ORDER BY seq DESC LIMIT 1",
            (scope, operation_id),
            "latest_speculation",
        )
        return _record(rows[0]) if rows else None

    def speculation_state(self, scope: str, operation_id: str) -> tuple[int, str | None]:
        """``(arrivals, declared sandbox key mapping or None)``."""
        rows = self._rows(
            "SELECT arrivals, key_mapping FROM speculation_state "
            "WHERE scope = ? AND operation_id = ?",
            (scope, operation_id),
            "speculation_state",
        )
        if not rows:
            return 0, None
        return int(rows[0][0]), None if rows[0][1] is None else str(rows[0][1])

    def declare_key_mapping(
        self, scope: str, operation_id: str, ledger_key: str, sandbox_key: str, *, now: float
    ) -> str:
        """Declare ``ledger_key -> sandbox_key`` for a sandbox-authoritative class, once: the
        mapping then stored (an earlier declaration stands; the caller compares)."""

        def work(tx: SharedTx, _: Operation | None) -> str:
            rows = tx.rows(
                "INSERT INTO speculation_state (scope, operation_id, arrivals, updated_at, "
                "key_mapping, mapped_at) VALUES (?,?,0,?,?,?) ON CONFLICT (scope, operation_id) "
                "DO UPDATE SET key_mapping = coalesce(speculation_state.key_mapping, "
                "excluded.key_mapping), mapped_at = coalesce(speculation_state.mapped_at, "
                "excluded.mapped_at) RETURNING key_mapping, mapped_at",
                (scope, operation_id, now, sandbox_key, now),
            )
            stored = str(rows[0][0])
            if stored == sandbox_key and float(rows[0][1]) == now:
                tx.audit(
                    "key_mapping_declared",
                    {"ledger_key": ledger_key, "sandbox_key": sandbox_key},
                    now,
                    scope,
                    operation_id,
                )
            return stored

        return self._run(
            work, f"key mapping {scope}:{operation_id}", Hold(key=(scope, operation_id))
        )
