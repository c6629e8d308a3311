"""The PostgreSQL ledger's schema: its migrations (never edit an applied one; append)."""

from __future__ import annotations

from typing import Any

import psycopg

from effectgate.audit import GENESIS, rechain
from effectgate.core.states import State

__all__ = ["AFTER_MIGRATION", "LANES", "MIGRATIONS"]

Conn = psycopg.Connection[Any]

#: Audit lanes (fixed: an entry's lane is part of its hash).
LANES = 16
_STATES = ", ".join(f"'{s.value}'" for s in State)

MIGRATION_CONTROLS = f"""
ALTER TABLE audit_log ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN prev_hash text;
ALTER TABLE audit_log ADD COLUMN hash text;
CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
CREATE TABLE audit_heads (lane integer PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL);
INSERT INTO audit_heads SELECT g, 0, '{GENESIS}' FROM generate_series(0, {LANES - 1}) g;
CREATE TABLE class_controls (
    action text PRIMARY KEY, killed boolean NOT NULL DEFAULT false, kill_reason text,
    breaker_open boolean NOT NULL DEFAULT false, breaker_reason text,
    shadow boolean NOT NULL DEFAULT false, envelope text NOT NULL DEFAULT '{{}}',
    envelope_version integer NOT NULL DEFAULT 0, updated_by text, updated_at double precision
);
CREATE TABLE control_signals (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    at double precision NOT NULL, op_key text NOT NULL, fingerprint text NOT NULL,
    value_micros bigint, rejected boolean NOT NULL, new_target boolean NOT NULL
);
CREATE INDEX control_signals_window ON control_signals (action, at);
CREATE INDEX control_signals_fingerprint ON control_signals (action, fingerprint, at);
CREATE TABLE known_targets (
    action text NOT NULL, target text NOT NULL, first_seen double precision NOT NULL,
    PRIMARY KEY (action, target)
);
CREATE TABLE dispatch_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    at double precision NOT NULL, op_key text NOT NULL, value_micros bigint
);
CREATE INDEX dispatch_log_window ON dispatch_log (action, at);
CREATE TABLE authority_steps (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action text NOT NULL,
    axis text NOT NULL, old text NOT NULL, new text NOT NULL, evidence text NOT NULL,
    reverse_on text NOT NULL, operator text NOT NULL, at double precision NOT NULL,
    kind text NOT NULL, reverses bigint, active boolean NOT NULL
);
CREATE INDEX authority_steps_by_action ON authority_steps (action, id);
CREATE TABLE approval_requests (
    scope text NOT NULL, operation_id text NOT NULL, fingerprint text NOT NULL,
    required integer NOT NULL, expires_at double precision NOT NULL, proposers text NOT NULL,
    PRIMARY KEY (scope, operation_id)
);
CREATE TABLE approvals (
    scope text NOT NULL, operation_id text NOT NULL, approver text NOT NULL,
    verdict text NOT NULL, fingerprint text NOT NULL, reason text,
    at double precision NOT NULL, PRIMARY KEY (scope, operation_id, approver)
);
CREATE TABLE shadow_records (
    scope text NOT NULL, operation_id text NOT NULL, action text NOT NULL,
    correlation_id text NOT NULL, fingerprint text NOT NULL, request text NOT NULL,
    at double precision NOT NULL, PRIMARY KEY (scope, operation_id)
);
CREATE INDEX shadow_by_correlation ON shadow_records (correlation_id);
CREATE TABLE incumbent_outcomes (
    correlation_id text PRIMARY KEY, action text NOT NULL, fingerprint text, effect text,
    source text NOT NULL, at double precision NOT NULL
);
CREATE TABLE alerts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
    subject text NOT NULL, action text, message text NOT NULL, detail text NOT NULL,
    at double precision NOT NULL, CONSTRAINT alerts_once UNIQUE (kind, subject)
)
"""


def backfill_chain(conn: Conn) -> None:
    """Chain entries written before the log was hash-chained (runs once, in the migration)."""
    rows = conn.execute("SELECT seq, at, scope, operation_id, kind, detail FROM audit_log "
                        "ORDER BY seq").fetchall()
    last: tuple[int, str] | None = None
    for seq, prev, entry_hash in rechain(rows):
        conn.execute("UPDATE audit_log SET prev_hash = %s, hash = %s WHERE seq = %s",
                     (prev, entry_hash, seq))
        last = (seq, entry_hash)
    if last is not None:
        conn.execute("UPDATE audit_heads SET seq = %s, hash = %s WHERE lane = 0", last)


# One ordered list for this dialect; index + 1 is the schema version. Never edit an applied
# entry: append a new one. ``op_key`` is compared with venue keys in the sweep's merge-join, so it
# uses the "C" collation: index order is byte order, which is Python's str order.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE operations (
        scope text NOT NULL,
        operation_id text NOT NULL,
        op_key text COLLATE "C" NOT NULL,
        action text NOT NULL,
        fingerprint text NOT NULL,
        state text NOT NULL CHECK (state IN ({_STATES})),
        intent text NOT NULL,
        effect text NOT NULL,
        tier text, reason text, policy_version text,
        venue_id text, detail text,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        submitted_at double precision,
        version integer NOT NULL DEFAULT 1,
        lease_owner text, lease_until double precision,
        PRIMARY KEY (scope, operation_id),
        CONSTRAINT operations_op_key_unique UNIQUE (op_key)
    );
    CREATE INDEX operations_uncertain ON operations (op_key) WHERE state = 'submitted';
    CREATE INDEX operations_state_updated ON operations (state, updated_at);
    CREATE TABLE audit_log (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at double precision NOT NULL, scope text, operation_id text,
        kind text NOT NULL, detail text NOT NULL
    );
    CREATE TABLE divergences (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind text NOT NULL, op_key text COLLATE "C" NOT NULL, venue_ids text NOT NULL,
        ledger_state text, first_seen double precision NOT NULL,
        CONSTRAINT divergences_once UNIQUE (kind, op_key, venue_ids)
    );
    """,
    # 2: operational controls and the hash-chained audit log.
    MIGRATION_CONTROLS,
]
# Python steps that run right after a migration, in its transaction.
AFTER_MIGRATION = {2: backfill_chain}
