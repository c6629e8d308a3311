"""The SQLite ledger's schema: its migrations and the chained audit insert.

Dialect-specific by nature (types, ``WITHOUT ROWID``, the chain function registered on the
connection); everything that reads or writes these tables is written once, in
:mod:`effectgate.store._ledger` and :mod:`effectgate.store._tx`.
"""

from __future__ import annotations

import sqlite3

from effectgate._core.chain import GENESIS, chain_hash, content_digest
from effectgate.errors import StoreError
from effectgate.store import _schema
from effectgate.store._schema import (
    Types,
    chain_columns,
    controls_tables,
    ledger_tables,
    shared_migrations,
)

__all__ = [
    "MIGRATIONS",
    "ChainLink",
    "advance_head",
    "append_entry",
    "migrate",
    "register_chain_function",
]

_TYPES = Types(
    text="TEXT",
    real="REAL",
    int="INTEGER",
    bigint="INTEGER",
    bool="INTEGER",
    false="0",
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",
    clustered=" WITHOUT ROWID",
    key="TEXT",
    # The same predicate as the readers' first half (store/_sql.py op_entries), so the planner
    # uses the partial index for it.
    row_named_index="DROP INDEX audit_by_operation; CREATE INDEX audit_by_operation "
    "ON audit_log (scope, operation_id, seq) WHERE in_row IS NOT TRUE",
)

# The head of lane 0 is inserted by the backfill (migrate).
MIGRATION_CONTROLS = chain_columns(_TYPES) + controls_tables(_TYPES)

#: The SQL function the chained insert calls: ``sha256(prev_hash || digest)`` in Python
#: (:func:`effectgate._core.chain.chain_hash`), registered on every store connection.
CHAIN_FUNCTION = "effectgate_chain_hash"

# One statement per entry: it reads the chain's last entry (the tail of the rowid B-tree, the
# page this insert writes anyway), links the entry to it (the digest is computed beforehand, the
# link by CHAIN_FUNCTION), inserts it; its seq is the cursor's lastrowid and its hash what
# CHAIN_FUNCTION just computed (ChainLink), no RETURNING table needed. BEGIN IMMEDIATE holds
# the write lock, so no other writer can append between the read and the insert. The tail is
# read by scalar subqueries of one VALUES row (one snapshot): cheaper than joining a
# materialised subquery, which the engine builds as a temporary table for every entry. The seq
# is left to SQLite: a rowid table without AUTOINCREMENT gives a new row the largest rowid + 1,
# exactly the tail's seq + 1 (1 in an empty log), without reading the tail for it.
_TAIL = "(SELECT {} FROM audit_log ORDER BY seq DESC LIMIT 1)"
_CHAINED_INSERT = (
    "INSERT INTO audit_log "
    "(seq, at, scope, operation_id, kind, detail, in_row, lane, prev_hash, hash) "
    "VALUES (NULL, ?, ?, ?, ?, ?, ?, 0, "
    f"coalesce({_TAIL.format('hash')}, ?), "
    f"{CHAIN_FUNCTION}(coalesce({_TAIL.format('hash')}, ?), ?))"
)
# The shared upsert of lane 0's head, never moving it back.
_ADVANCE_HEAD = f"{_schema.SET_HEAD} WHERE excluded.seq > audit_heads.seq"

# Kept for migration 3, which created it; migration 4 drops it (see MIGRATION_ANCHORS).
MIGRATION_HEAD_TRIGGER = """
CREATE TRIGGER audit_head_advance AFTER INSERT ON audit_log BEGIN
    INSERT INTO audit_heads (lane, seq, hash) VALUES (NEW.lane, NEW.seq, NEW.hash)
    ON CONFLICT (lane) DO UPDATE SET seq = excluded.seq, hash = excluded.hash
    WHERE excluded.seq > audit_heads.seq;
END
"""

# 4: the recorded head that catches a cut-off tail moves out of the hot path. A journal or
# receipt transaction records its entry's (seq, hash) in the operations row it writes anyway,
# instead of rewriting the audit_heads row: one page less per commit (each page costs a WAL
# frame under synchronous=FULL). Every other entry still advances audit_heads. The recorded
# head is the later of the two (SQLiteStore.audit_heads); cutting entries off the tail removes
# the entry one of them names, which verification reports.
MIGRATION_ANCHORS = """
ALTER TABLE operations ADD COLUMN audit_seq INTEGER;
ALTER TABLE operations ADD COLUMN audit_hash TEXT;
DROP TRIGGER IF EXISTS audit_head_advance
"""


class ChainLink:
    """CHAIN_FUNCTION on one connection, remembering the link it computed last: right after a
    chained insert, the hash of the entry it wrote. A connection runs one statement at a time."""

    __slots__ = ("hash",)

    def __init__(self) -> None:
        self.hash = ""

    def __call__(self, prev_hash: str, digest: str) -> str:
        self.hash = entry_hash = chain_hash(prev_hash, digest)
        return entry_hash


def register_chain_function(conn: sqlite3.Connection) -> ChainLink:
    link = ChainLink()
    conn.create_function(CHAIN_FUNCTION, 2, link, deterministic=True)
    return link


def append_entry(
    cur: sqlite3.Cursor,
    link: ChainLink,
    at: float,
    scope: str | None,
    operation_id: str | None,
    kind: str,
    text: str,
    *,
    in_row: bool,
) -> tuple[int, str]:
    """Append one audit entry, its detail already encoded as ``text``, linked to the chain's
    last one in the caller's transaction; its ``(seq, hash)``.

    ``link``: the chain function registered on ``cur``'s connection
    (:func:`register_chain_function`). The caller records the head (:func:`advance_head`, or
    the operations row it writes). ``in_row``: the caller records the seq in the operation's
    row, which is then how readers find it (not ``audit_by_operation``).
    """
    digest = content_digest(0, at, scope, operation_id, kind, text)
    link.hash = ""
    cur.execute(
        _CHAINED_INSERT, (at, scope, operation_id, kind, text, in_row, GENESIS, GENESIS, digest)
    )
    seq, entry_hash = cur.lastrowid, link.hash
    if not seq or not entry_hash:
        raise StoreError("the chained audit insert did not report its entry")
    return seq, entry_hash


def advance_head(conn: sqlite3.Connection | sqlite3.Cursor, seq: int, entry_hash: str) -> None:
    """Record ``(seq, hash)`` as the chain's head, unless a later one is recorded already."""
    conn.execute(_ADVANCE_HEAD, (seq, entry_hash))


MIGRATIONS: list[str] = [
    ledger_tables(_TYPES)
    + """;
    CREATE TABLE locks (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at REAL NOT NULL)
    """,
    # 2: operational controls and the hash-chained audit log (store/sqlite_controls.py).
    MIGRATION_CONTROLS,
    # 3: no AUTOINCREMENT on the two tables the hot path appends to. Their keys are assigned
    # by us (audit seq = chain head + 1) or never referenced (dispatch_log.id), and
    # AUTOINCREMENT rewrote a `sqlite_sequence` row (one more page per commit) on every insert.
    # SQLite cannot drop it in place: rebuild, copy, swap, re-index. (The audit head trigger
    # is created right after, in _AFTER_MIGRATION.)
    """
    CREATE TABLE audit_log_v3 (
        seq INTEGER PRIMARY KEY,
        at REAL NOT NULL, scope TEXT, operation_id TEXT,
        kind TEXT NOT NULL, detail TEXT NOT NULL,
        lane INTEGER NOT NULL DEFAULT 0, prev_hash TEXT, hash TEXT
    );
    INSERT INTO audit_log_v3 (seq, at, scope, operation_id, kind, detail, lane, prev_hash, hash)
        SELECT seq, at, scope, operation_id, kind, detail, lane, prev_hash, hash FROM audit_log;
    DROP TABLE audit_log;
    ALTER TABLE audit_log_v3 RENAME TO audit_log;
    CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
    -- dispatch_log is only ever read by (action, at) window: clustered on that key, one
    -- B-tree instead of a table plus an index (one page less per journal commit). A row is
    -- dispatched once, so (action, at, op_key) is unique.
    CREATE TABLE dispatch_log_v3 (
        action TEXT NOT NULL, at REAL NOT NULL, op_key TEXT NOT NULL, value_micros INTEGER,
        PRIMARY KEY (action, at, op_key)
    ) WITHOUT ROWID;
    INSERT OR IGNORE INTO dispatch_log_v3 SELECT action, at, op_key, value_micros
        FROM dispatch_log;
    DROP TABLE dispatch_log;
    ALTER TABLE dispatch_log_v3 RENAME TO dispatch_log
    """,
    # 4: journal and receipt entries are anchored in their operations row, not audit_heads
    # (store/sqlite_controls.py, MIGRATION_ANCHORS).
    MIGRATION_ANCHORS,
    *shared_migrations(_TYPES),  # 5 on: the same in both dialects (store/_schema.py)
]


def _head_trigger(conn: sqlite3.Connection) -> None:
    # Migration 3, continued: its body holds ';', so it is not part of the ';'-split script.
    conn.execute(MIGRATION_HEAD_TRIGGER)


def migrate(conn: sqlite3.Connection) -> None:
    """Apply pending migrations in the caller's write transaction."""
    _schema.migrate(
        conn.execute, conn.execute, MIGRATIONS, _TYPES, {3: lambda: _head_trigger(conn)}
    )
