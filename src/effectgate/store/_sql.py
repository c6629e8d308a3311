"""SQL both dialects run as written, and the row decoders: each exists once.

Statements use ``?`` placeholders; the PostgreSQL store translates them in one place
(:func:`effectgate.store._postgres_tx.pg_sql`). Booleans are passed as Python ``bool`` (SQLite
stores 0/1, PostgreSQL ``boolean``) and read back through ``bool()``; aggregates use ``FILTER``
and ``CASE``, which both dialects know.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from effectgate._core.chain import ChainEntry
from effectgate._core.controls import Alert, AuthorityStep, ClassControls, Envelope, ShadowPair
from effectgate._core.states import State
from effectgate.store.base import Divergence, LedgerEntry, Operation

__all__ = [
    "CHAIN_COLUMNS",
    "CONTROL_COLUMNS",
    "ENTRY_COLUMNS",
    "INDEXED_ENTRY",
    "OP_COLUMNS",
    "ROW_NAMED_ENTRY",
    "STEP_COLUMNS",
    "alert_from_row",
    "chain_entry_from_row",
    "controls_from_row",
    "divergence_from_row",
    "entry_from_row",
    "op_entries",
    "op_entries_args",
    "operation_from_row",
    "shadow_pair_from_row",
    "step_from_row",
]

OP_COLUMNS = (
    "scope, operation_id, action, fingerprint, state, intent, effect, tier, reason, "
    "policy_version, venue_id, detail, created_at, updated_at, submitted_at, version"
)
ENTRY_COLUMNS = "op_key, action, state, venue_id, submitted_at, updated_at"
CONTROL_COLUMNS = (
    "killed, kill_reason, breaker_open, breaker_reason, shadow, envelope, "
    "envelope_version, updated_by, updated_at"
)
STEP_COLUMNS = (
    "id, action, axis, old, new, evidence, reverse_on, operator, at, kind, reverses, active"
)
CHAIN_COLUMNS = "seq, lane, at, scope, operation_id, kind, detail, prev_hash, hash"


#: The rule that splits one operation's entries (migration ``row_audit_columns``), over
#: aliases ``a`` (audit_log) and ``o`` (operations): an entry in the index, or one its row names.
#: Every reader and the verifier use these two, so no value of ``in_row`` (NULL included)
#: can leave an entry in neither half.
INDEXED_ENTRY = "a.in_row IS NOT TRUE"
ROW_NAMED_ENTRY = (
    "a.in_row IS TRUE AND a.scope = o.scope AND a.operation_id = o.operation_id "
    "AND a.seq IN (o.journal_seq, o.receipt_seq)"
)


def op_entries(columns: str, extra: str = "") -> str:
    """One operation's audit entries, unordered: those ``audit_by_operation`` holds and those
    its operations row names (``journal_seq``, ``receipt_seq``: migration ``row_audit_columns``).

    ``columns``: audit_log columns, bare; ``extra``: more conditions on the entry (`` AND ...``
    over alias ``a``). Arguments: :func:`op_entries_args`. The halves are
    :data:`INDEXED_ENTRY` and :data:`ROW_NAMED_ENTRY`; the second also checks the entry is the
    operation's (a seq alone could name another entry once a cut-off tail's seqs were reused).
    Ordered by a caller that wants it, e.g. ``op_entries(...) + " ORDER BY seq"``.
    """
    cols = ", ".join(f"a.{c.strip()}" for c in columns.split(","))
    return (
        f"SELECT {cols} FROM audit_log a WHERE a.scope = ? AND a.operation_id = ? "
        f"AND {INDEXED_ENTRY}{extra} UNION ALL "
        f"SELECT {cols} FROM operations o JOIN audit_log a ON {ROW_NAMED_ENTRY} "
        f"WHERE o.scope = ? AND o.operation_id = ?{extra}"
    )


def op_entries_args(scope: str, operation_id: str, extra: Sequence[Any] = ()) -> list[Any]:
    """The arguments of :func:`op_entries` (``extra``: those of its ``extra`` conditions)."""
    return [scope, operation_id, *extra, scope, operation_id, *extra]


DIVERGENCE_COLUMNS = "kind, op_key, venue_ids, ledger_state, first_seen"
ALERT_COLUMNS = "kind, subject, action, message, detail, at"

# A batch move's compare-and-set (Store.transition_many): the row moves only from ``expected``.
CAS_MOVE = (
    "UPDATE operations SET state = ?, updated_at = ?, version = version + 1, "
    "venue_id = coalesce(?, venue_id), detail = coalesce(?, "
    "CASE WHEN substr(detail, 1, 5) = 'held:' THEN NULL ELSE detail END), lease_owner = NULL, "
    "lease_until = NULL WHERE scope = ? AND operation_id = ? AND state = ? RETURNING 1"
)
SELECT_OP = f"SELECT {OP_COLUMNS} FROM operations WHERE scope = ? AND operation_id = ?"
SELECT_CONTROLS = f"SELECT {CONTROL_COLUMNS} FROM class_controls WHERE action = ?"
SELECT_REQUEST = (
    "SELECT fingerprint, required, expires_at, proposers, dispatch_on_approval "
    "FROM approval_requests WHERE scope = ? AND operation_id = ?"
)
INSERT_REQUEST = (
    "INSERT INTO approval_requests (scope, operation_id, fingerprint, required, expires_at, "
    "proposers, dispatch_on_approval) VALUES (?,?,?,?,?,?,?)"
)
HELD = "state = 'validated' AND detail LIKE 'held:%'"
# A hold, recorded on the row: why, when the dispatcher may retry on its own (NULL: after an
# operator's release), since when it is held (the first hold counts), and the class's release
# generation it waits to be passed. A dispatcher's lease ends with its attempt, so the next
# release is not kept waiting for it.
MARK_HELD = (
    "UPDATE operations SET detail = ?, updated_at = ?, released_at = ?, "
    "lease_owner = NULL, lease_until = NULL, "
    "held_since = coalesce(held_since, ?), held_gen = (SELECT coalesce(max(release_gen), 0) "
    "FROM class_controls c WHERE c.action = operations.action) "
    "WHERE scope = ? AND operation_id = ?"
)
# The validated rows the standing dispatcher owes a dispatch, oldest release first, that no
# live lease holds: released (approvals, a hold time lifts), or held before the class's last
# release. Rows held before migration 5 have no generation and count as released once.
# ``{lock}``: what a dialect adds so concurrent claims skip each other's rows.
CLAIM_RELEASED = (
    "WITH claim AS MATERIALIZED (SELECT op_key FROM operations o WHERE state = 'validated' "
    "AND (lease_until IS NULL OR lease_until < ?) AND (released_at <= ? OR ("
    "detail LIKE 'held:%' AND coalesce(held_gen, -1) < coalesce((SELECT max(c.release_gen) "
    "FROM class_controls c WHERE c.action = o.action), 0))) "
    "ORDER BY coalesce(released_at, held_since, updated_at), op_key LIMIT ?{lock}) "
    "UPDATE operations SET lease_owner = ?, lease_until = ? "
    "WHERE op_key IN (SELECT op_key FROM claim) AND state = 'validated' "
    "RETURNING scope, operation_id"
)
SAVE_CONTROLS = (
    f"INSERT INTO class_controls (action, {CONTROL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (action) DO UPDATE SET killed = excluded.killed, "
    "kill_reason = excluded.kill_reason, breaker_open = excluded.breaker_open, "
    "breaker_reason = excluded.breaker_reason, shadow = excluded.shadow, "
    "envelope = excluded.envelope, envelope_version = excluded.envelope_version, "
    "updated_by = excluded.updated_by, updated_at = excluded.updated_at"
)
# ``fingerprint`` holds what the repeat signal counts by: the row's fingerprint, or the
# class's repeat key over its effect (near-identical effects share one).
INSERT_SIGNAL = (
    "INSERT INTO control_signals (action, at, op_key, fingerprint, value_micros, "
    "rejected, new_target) VALUES (?,?,?,?,?,?,?)"
)
SIGNAL_STATS = (
    "SELECT count(*), count(*) FILTER (WHERE rejected), coalesce(sum(value_micros), 0), "
    "count(*) FILTER (WHERE new_target), count(DISTINCT op_key) FILTER (WHERE fingerprint = ?) "
    "FROM control_signals WHERE action = ? AND at >= ?"
)
DISPATCH_USAGE = (
    "SELECT count(*), coalesce(sum(value_micros), 0) FROM dispatch_log WHERE action = ? AND at >= ?"
)
INSERT_DISPATCH = "INSERT INTO dispatch_log (action, at, op_key, value_micros) VALUES (?,?,?,?)"
INSERT_STEP = (
    "INSERT INTO authority_steps (action, axis, old, new, evidence, reverse_on, "
    "operator, at, kind, reverses, active) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
    "RETURNING id"
)
INSERT_ALERT = (
    f"INSERT INTO alerts ({ALERT_COLUMNS}) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1"
)
INSERT_DIVERGENCE = (
    f"INSERT INTO divergences ({DIVERGENCE_COLUMNS}) VALUES (?,?,?,?,?) "
    "ON CONFLICT DO NOTHING RETURNING 1"
)
# What the shadow report compares: every proposal recorded in shadow mode (shadowed, or one the
# agent would not have acted on) beside the incumbent's outcome under its correlation id, then
# the incumbent outcomes no proposal matched.
SHADOW_PAIRS = (
    "SELECT s.correlation_id, s.action, s.scope, s.operation_id, s.fingerprint, s.request, "
    "i.fingerprint, i.effect, i.correlation_id IS NOT NULL, s.outcome, s.model, "
    "s.harness_version, s.at, i.at FROM shadow_records s "
    "LEFT JOIN incumbent_outcomes i ON i.correlation_id = s.correlation_id {w} UNION ALL "
    "SELECT i.correlation_id, i.action, NULL, NULL, NULL, NULL, i.fingerprint, i.effect, TRUE, "
    "NULL, NULL, NULL, NULL, i.at "
    "FROM incumbent_outcomes i WHERE NOT EXISTS (SELECT 1 FROM shadow_records s "
    "WHERE s.correlation_id = i.correlation_id) {a} ORDER BY 1"
)
# A proposal's record: the first one keeps its correlation id, time and provenance; a row that
# waited for approval and was then shadowed becomes what it finally did.
UPSERT_SHADOW = (
    "INSERT INTO shadow_records (scope, operation_id, action, correlation_id, fingerprint, "
    "request, at, outcome, model, harness_version) VALUES (?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (scope, operation_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
    "request = excluded.request, outcome = excluded.outcome"
)
UPSERT_INCUMBENT = (
    "INSERT INTO incumbent_outcomes VALUES (?,?,?,?,?,?) ON CONFLICT (correlation_id) DO UPDATE "
    "SET action = excluded.action, fingerprint = excluded.fingerprint, "
    "effect = excluded.effect, source = excluded.source, at = excluded.at"
)


def operation_from_row(row: Sequence[Any]) -> Operation:
    return Operation(
        scope=row[0],
        operation_id=row[1],
        action=row[2],
        fingerprint=row[3],
        state=State(row[4]),
        intent=json.loads(row[5]),
        effect=json.loads(row[6]),
        tier=row[7],
        reason=row[8],
        policy_version=row[9],
        venue_id=row[10],
        detail=row[11],
        created_at=row[12],
        updated_at=row[13],
        submitted_at=row[14],
        version=row[15],
    )


def entry_from_row(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(
        op_key=row[0],
        action=row[1],
        state=State(row[2]),
        venue_id=row[3],
        submitted_at=row[4],
        updated_at=row[5],
    )


def controls_from_row(action: str, row: Sequence[Any] | None) -> ClassControls:
    """A class's controls from its CONTROL_COLUMNS row; the defaults when it has none.

    Every journal reads them, and they rarely change: the same row gives back the same
    (immutable) object, built once, instead of a new one and an envelope parsed from JSON.
    """
    key = (action, row if row is None or type(row) is tuple else tuple(row))
    ctl = _CONTROLS_SEEN.get(key)
    if ctl is None:
        if len(_CONTROLS_SEEN) >= _CONTROLS_KEPT:
            _CONTROLS_SEEN.clear()  # bounded: a new generation of rows starts over
        ctl = _CONTROLS_SEEN[key] = _controls(action, row)
    return ctl


#: Controls rows seen lately, and how many are kept (classes x recent control changes).
_CONTROLS_SEEN: dict[tuple[str, tuple[Any, ...] | None], ClassControls] = {}
_CONTROLS_KEPT = 256


def _controls(action: str, row: Sequence[Any] | None) -> ClassControls:
    if row is None:
        return ClassControls(action=action)
    return ClassControls(
        action=action,
        killed=bool(row[0]),
        kill_reason=row[1],
        breaker_open=bool(row[2]),
        breaker_reason=row[3],
        shadow=bool(row[4]),
        envelope=Envelope.from_json(json.loads(row[5]), version=int(row[6])),
        updated_by=row[7],
        updated_at=row[8],
    )


def step_from_row(r: Sequence[Any]) -> AuthorityStep:
    return AuthorityStep(
        id=int(r[0]),
        action=r[1],
        axis=r[2],
        old=json.loads(r[3]),
        new=json.loads(r[4]),
        evidence=json.loads(r[5]),
        reverse_on=r[6],
        operator=r[7],
        at=r[8],
        kind=r[9],
        reverses=int(r[10]) if r[10] is not None else None,
        active=bool(r[11]),
    )


def divergence_from_row(r: Sequence[Any]) -> Divergence:
    return Divergence(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4])


def alert_from_row(r: Sequence[Any]) -> Alert:
    return Alert(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5])


def chain_entry_from_row(r: Sequence[Any]) -> ChainEntry:
    return ChainEntry(int(r[0]), int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7] or "", r[8] or "")


def shadow_pair_from_row(r: Sequence[Any]) -> ShadowPair:
    request = json.loads(r[5]) if r[5] else None
    return ShadowPair(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        request,
        r[6],
        json.loads(r[7]) if r[7] else None,
        bool(r[8]),
        # Rows recorded before migration 6 were all shadowed.
        outcome=r[9] or ("shadowed" if request is not None else None),
        model=r[10],
        harness_version=r[11],
        proposed_at=r[12],
        incumbent_at=r[13],
    )
