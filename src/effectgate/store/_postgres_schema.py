"""The PostgreSQL ledger's schema: its migrations (never edit an applied one; append)."""

from __future__ import annotations

from effectgate._core.chain import GENESIS
from effectgate._core.states import State
from effectgate.store._schema import (
    Types,
    chain_columns,
    controls_tables,
    ledger_tables,
    shared_migrations,
)

__all__ = ["LANES", "MIGRATIONS", "TYPES"]

#: Audit lanes (fixed: an entry's lane is part of its hash).
LANES = 16

TYPES = Types(
    text="text",
    real="double precision",
    int="integer",
    bigint="bigint",
    bool="boolean",
    false="false",
    serial="bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    clustered="",
    key='text COLLATE "C"',
    state_check=f" CHECK (state IN ({', '.join(repr(s.value) for s in State)}))",
    drop_dispatch_id="ALTER TABLE dispatch_log DROP COLUMN id",
    applied_at="timestamptz NOT NULL DEFAULT now()",
    now="now()",
)

MIGRATION_CONTROLS = (
    chain_columns(TYPES)
    + f"INSERT INTO audit_heads SELECT g, 0, '{GENESIS}' FROM generate_series(0, {LANES - 1}) g;"
    + controls_tables(TYPES)
)


# One ordered list for this dialect; index + 1 is the schema version. Never edit an applied
# entry: append a new one. ``op_key`` is compared with venue keys in the sweep's merge-join, so it
# uses the "C" collation: index order is byte order, which is Python's str order.
MIGRATIONS: list[str] = [
    ledger_tables(TYPES)
    + """;
    CREATE INDEX operations_state_updated ON operations (state, updated_at)
    """,
    # 2: operational controls and the hash-chained audit log.
    MIGRATION_CONTROLS,
    *shared_migrations(TYPES),  # 3 on: the same in both dialects (store/_schema.py)
]
