"""DDL both dialects share, written once over a dialect's type names.

A dialect passes its :class:`Types`; the text it gets back is what that dialect's migration
runs. Applied migrations are never edited. The migrations written since the store issue are
the same in both dialects: :func:`shared_migrations` lists them, and each dialect's list ends
with it. A new role appends its template there, and no dialect module changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from effectgate._core.chain import rechain
from effectgate.store.base import refuse_newer_schema

__all__ = [
    "SET_HEAD",
    "Types",
    "apply_migrations",
    "backfill_chain",
    "budgets_tables",
    "chain_columns",
    "channel_tables",
    "continuation_tables",
    "controls_tables",
    "dispatch_log_key",
    "grants_tables",
    "ledger_tables",
    "migrate",
    "model_window_end_columns",
    "model_window_tables",
    "policy_tables",
    "principals_tables",
    "proposal_handle_index",
    "rehearsal_tables",
    "release_columns",
    "request_key_tables",
    "retention_tables",
    "row_audit_columns",
    "runs_tables",
    "shadow_columns",
    "shared_migrations",
    "speculation_tables",
]


@dataclass(frozen=True, slots=True)
class Types:
    """A dialect's names for the column kinds the shared tables use."""

    text: str
    real: str
    int: str
    bigint: str
    bool: str
    false: str
    #: An integer primary key the database assigns.
    serial: str
    #: Appended to tables keyed by their primary key alone (SQLite: ``WITHOUT ROWID``).
    clustered: str
    #: Text compared in byte order (operation keys: the sweep merges them with venue keys).
    key: str
    #: A check on ``operations.state`` (empty where the dialect keeps none).
    state_check: str = ""
    #: Where the hot path names its audit entries in their row (SQLite): the statements that
    #: leave those entries out of the per-operation index (migration ``row_audit_columns``).
    row_named_index: str = ""
    #: Drops ``dispatch_log``'s own key where the dialect still has one (PostgreSQL): nothing
    #: reads it, and each dispatch wrote one index entry for it (migration ``dispatch_log_key``).
    drop_dispatch_id: str = ""
    #: ``schema_migrations.applied_at``'s column type, and the SQL for the instant a migration
    #: is recorded at (SQLite keeps a Julian day number, PostgreSQL a timestamp).
    applied_at: str = "REAL NOT NULL"
    now: str = "julianday('now')"


def ledger_tables(t: Types) -> str:
    """Migration 1's tables: the operations ledger, the audit log and the divergences."""
    return """
CREATE TABLE operations (
    scope {text} NOT NULL, operation_id {text} NOT NULL, op_key {key} NOT NULL UNIQUE,
    action {text} NOT NULL, fingerprint {text} NOT NULL, state {text} NOT NULL{state_check},
    intent {text} NOT NULL, effect {text} NOT NULL,
    tier {text}, reason {text}, policy_version {text}, venue_id {text}, detail {text},
    created_at {real} NOT NULL, updated_at {real} NOT NULL, submitted_at {real},
    version {int} NOT NULL DEFAULT 1, lease_owner {text}, lease_until {real},
    PRIMARY KEY (scope, operation_id)
){clustered};
CREATE INDEX operations_uncertain ON operations (op_key) WHERE state = 'submitted';
CREATE TABLE audit_log (
    seq {serial}, at {real} NOT NULL, scope {text}, operation_id {text},
    kind {text} NOT NULL, detail {text} NOT NULL
);
CREATE TABLE divergences (
    id {serial}, kind {text} NOT NULL, op_key {key} NOT NULL, venue_ids {text} NOT NULL,
    ledger_state {text}, first_seen {real} NOT NULL, UNIQUE (kind, op_key, venue_ids)
);
""".format(**asdict(t))


def chain_columns(t: Types) -> str:
    """Migration 2's first half: the audit log's chain columns, the per-operation index and
    the lanes' heads (a dialect seeds the heads it keeps after it; the tables follow in
    :func:`controls_tables`)."""
    return """
ALTER TABLE audit_log ADD COLUMN lane {int} NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN prev_hash {text};
ALTER TABLE audit_log ADD COLUMN hash {text};
CREATE INDEX audit_by_operation ON audit_log (scope, operation_id, seq);
CREATE TABLE audit_heads (lane {int} PRIMARY KEY, seq {bigint} NOT NULL, hash {text} NOT NULL);
""".format(**asdict(t))


def controls_tables(t: Types) -> str:
    """Migration 2's tables (controls, breaker windows, steps, approvals, shadow, alerts)."""
    return """
CREATE TABLE class_controls (
    action {text} PRIMARY KEY, killed {bool} NOT NULL DEFAULT {false}, kill_reason {text},
    breaker_open {bool} NOT NULL DEFAULT {false}, breaker_reason {text},
    shadow {bool} NOT NULL DEFAULT {false}, envelope {text} NOT NULL DEFAULT '{{}}',
    envelope_version {int} NOT NULL DEFAULT 0, updated_by {text}, updated_at {real}
);
CREATE TABLE control_signals (
    id {serial}, action {text} NOT NULL, at {real} NOT NULL,
    op_key {text} NOT NULL, fingerprint {text} NOT NULL, value_micros {bigint},
    rejected {bool} NOT NULL, new_target {bool} NOT NULL
);
CREATE INDEX control_signals_window ON control_signals (action, at);
CREATE INDEX control_signals_fingerprint ON control_signals (action, fingerprint, at);
CREATE TABLE known_targets (
    action {text} NOT NULL, target {text} NOT NULL, first_seen {real} NOT NULL,
    PRIMARY KEY (action, target)
){clustered};
CREATE TABLE dispatch_log (
    id {serial}, action {text} NOT NULL, at {real} NOT NULL,
    op_key {text} NOT NULL, value_micros {bigint}
);
CREATE INDEX dispatch_log_window ON dispatch_log (action, at);
CREATE TABLE authority_steps (
    id {serial}, action {text} NOT NULL, axis {text} NOT NULL,
    old {text} NOT NULL, new {text} NOT NULL, evidence {text} NOT NULL,
    reverse_on {text} NOT NULL, operator {text} NOT NULL, at {real} NOT NULL,
    kind {text} NOT NULL, reverses {bigint}, active {bool} NOT NULL
);
CREATE INDEX authority_steps_by_action ON authority_steps (action, id);
CREATE TABLE approval_requests (
    scope {text} NOT NULL, operation_id {text} NOT NULL, fingerprint {text} NOT NULL,
    required {int} NOT NULL, expires_at {real} NOT NULL, proposers {text} NOT NULL,
    PRIMARY KEY (scope, operation_id)
){clustered};
CREATE TABLE approvals (
    scope {text} NOT NULL, operation_id {text} NOT NULL, approver {text} NOT NULL,
    verdict {text} NOT NULL, fingerprint {text} NOT NULL, reason {text},
    at {real} NOT NULL, PRIMARY KEY (scope, operation_id, approver)
){clustered};
CREATE TABLE shadow_records (
    scope {text} NOT NULL, operation_id {text} NOT NULL, action {text} NOT NULL,
    correlation_id {text} NOT NULL, fingerprint {text} NOT NULL, request {text} NOT NULL,
    at {real} NOT NULL, PRIMARY KEY (scope, operation_id)
){clustered};
CREATE INDEX shadow_by_correlation ON shadow_records (correlation_id);
CREATE TABLE incumbent_outcomes (
    correlation_id {text} PRIMARY KEY, action {text} NOT NULL, fingerprint {text},
    effect {text}, source {text} NOT NULL, at {real} NOT NULL
);
CREATE TABLE alerts (
    id {serial}, kind {text} NOT NULL, subject {text} NOT NULL, action {text},
    message {text} NOT NULL, detail {text} NOT NULL, at {real} NOT NULL,
    UNIQUE (kind, subject)
)
""".format(**asdict(t))


def principals_tables(t: Types) -> str:
    """The principals role's table (store/_principals.py): one row per token ever issued.

    Only the token's SHA-256 is kept (the primary key: authentication is one lookup) and a short
    prefix for listings. A revoked row stays, for the record; one live row per name.
    """
    return """
CREATE TABLE principals (
    token_sha256 {text} PRIMARY KEY, token_prefix {text} NOT NULL,
    name {text} NOT NULL, role {text} NOT NULL, scope {text} NOT NULL,
    created_at {real} NOT NULL, created_by {text} NOT NULL,
    revoked_at {real}, revoked_by {text}
){clustered};
CREATE UNIQUE INDEX principals_live_name ON principals (name) WHERE revoked_at IS NULL
""".format(**asdict(t))


def release_columns(t: Types) -> str:
    """The standing dispatcher's columns: which ``validated`` rows a control released.

    ``operations.released_at``: from when the standing dispatcher owes the row a dispatch (set
    by completed approvals the proposer wanted sent, and by holds that time lifts); NULL: only
    its caller, or an operator's release, dispatches it. ``held_since``: when a hold began
    (the hold bound is measured from it). ``held_gen``: the class's ``release_gen`` when the
    row was last held; an operator change that can lift a hold (kill switch off, breaker
    reset, envelope step, shadow on) increments ``release_gen``, so the rows it releases are
    found without writing any of them in the operator's transaction.
    ``approval_requests.dispatch_on_approval``: the proposer asked for the row to be sent.
    """
    return """
ALTER TABLE operations ADD COLUMN released_at {real};
ALTER TABLE operations ADD COLUMN held_since {real};
ALTER TABLE operations ADD COLUMN held_gen {bigint};
ALTER TABLE class_controls ADD COLUMN release_gen {bigint} NOT NULL DEFAULT 0;
ALTER TABLE approval_requests ADD COLUMN dispatch_on_approval {bool} NOT NULL DEFAULT {false};
CREATE INDEX operations_validated ON operations (released_at) WHERE state = 'validated'
""".format(**asdict(t))


def shadow_columns(t: Types) -> str:
    """What the shadow report compares and groups by, per agent proposal.

    ``outcome``: ``shadowed`` (it would have been sent; NULL on rows recorded before), or
    ``rejected`` / ``awaiting_approval`` (the agent would not have acted; their ``request`` is
    JSON ``null``). ``model`` and ``harness_version``: the intent's ``proposed_by`` audit
    fields, for grouping the report only (nothing decides on them).
    """
    return """
ALTER TABLE shadow_records ADD COLUMN outcome {text};
ALTER TABLE shadow_records ADD COLUMN model {text};
ALTER TABLE shadow_records ADD COLUMN harness_version {text}
""".format(**asdict(t))


def runs_tables(t: Types) -> str:
    """The runs role's tables (store/_runs.py): digests and sizes, never prompts or results.

    ``runs``: one row per run, the row every admission and the seal lock (so none is admitted
    after a seal commits); ``run_calls``: one per (run, slot), immutable once completed;
    ``run_effects``: which call each bound operation was admitted against;
    ``provider_receipts`` and ``run_snapshots``: keyed by their digest, so records that
    disagree are kept side by side.
    """
    return """
CREATE TABLE runs (
    scope {text} NOT NULL, run_id {text} NOT NULL, created_at {real} NOT NULL,
    calls {bigint} NOT NULL DEFAULT 0, effects {bigint} NOT NULL DEFAULT 0,
    sealed_at {real}, sealed_by {text}, seal_reason {text},
    PRIMARY KEY (scope, run_id)
){clustered};
CREATE INDEX runs_open ON runs (created_at) WHERE sealed_at IS NULL;
CREATE TABLE run_calls (
    scope {text} NOT NULL, run_id {text} NOT NULL, slot {key} NOT NULL, call_id {text} NOT NULL,
    kind {text} NOT NULL, request {text} NOT NULL, record_digest {text} NOT NULL,
    deadline {real}, started_at {real} NOT NULL,
    completion {text}, completion_digest {text}, completed_at {real},
    effects {bigint} NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, run_id, slot)
){clustered};
CREATE INDEX run_calls_open ON run_calls (kind) WHERE completed_at IS NULL;
CREATE TABLE run_effects (
    scope {text} NOT NULL, operation_id {text} NOT NULL, run_id {text} NOT NULL,
    slot {key} NOT NULL, call_id {text} NOT NULL, admitted_at {real} NOT NULL,
    PRIMARY KEY (scope, operation_id)
){clustered};
CREATE INDEX run_effects_run ON run_effects (scope, run_id, operation_id);
CREATE TABLE provider_receipts (
    scope {text} NOT NULL, run_id {text} NOT NULL, slot {key} NOT NULL,
    receipt_digest {text} NOT NULL, receipt {text} NOT NULL, recorded_at {real} NOT NULL,
    recorded_by {text} NOT NULL,
    PRIMARY KEY (scope, run_id, slot, receipt_digest)
){clustered};
CREATE TABLE run_snapshots (
    scope {text} NOT NULL, run_id {text} NOT NULL, digest {text} NOT NULL,
    document {text} NOT NULL, entries {bigint} NOT NULL, size_bytes {bigint} NOT NULL,
    created_at {real} NOT NULL, created_by {text} NOT NULL,
    PRIMARY KEY (scope, run_id, digest)
){clustered}
""".format(**asdict(t))


def shared_migrations(t: Types) -> list[str]:
    """The migrations both dialects run in the same order after their own (append only).

    SQLite numbers them from 5, PostgreSQL from 3; a template's DDL is the same in both.
    """
    return [
        principals_tables(t),  # principals and their tokens (store/_principals.py)
        release_columns(t),  # rows a control released, for the standing dispatcher
        shadow_columns(t),  # what the shadow report compares and groups by
        speculation_tables(t),  # dual-key speculation records (store/_speculation.py)
        runs_tables(t),  # run-call journals, seals, bindings, receipts, snapshots (_runs.py)
        retention_tables(t),  # legal holds and audit checkpoints (store/_retention.py)
        continuation_tables(t),  # continuation links (store/_continuations.py)
        budgets_tables(t),  # run budgets, plan accounts, reservations (store/_budgets.py)
        grants_tables(t),  # delegated authority (store/_grants.py)
        policy_tables(t),  # governed policy versions (store/_policies.py)
        channel_tables(t),  # signed-callback nonces (store/_channels.py)
        value_record_columns(t),  # the shared record of dispatched value (_value_record.py)
        approval_binding_columns(t),  # what an approval was given with (store/_controls.py)
        announcement_tables(t),  # one announcement per channel and round (store/_channels.py)
        row_audit_columns(t),  # entries an operations row names, outside the per-operation index
        dispatch_log_key(t),  # no key nobody reads on the dispatch record
        request_key_tables(t),  # request keys bound to minted operation ids (_request_keys.py)
        rehearsal_tables(t),  # kill switch rehearsals (store/_rehearsals.py)
        model_window_tables(t),  # a comparison window per new proposer model (_model_windows.py)
        model_window_end_columns(t),  # how each window ended (store/_model_windows.py)
        proposal_handle_index(t),  # a proposal handed over at approval (store/_handover.py)
        pruned_operations_table(t),  # keys a prune removed (store/_prune.py)
    ]


def pruned_operations_table(t: Types) -> str:
    """What a prune keeps of each operation it removes (store/_prune.py): the key, the final
    state and the venue record it settled with. The venue may list that record for ever (a
    key-ordered listing does): the reconciler accounts it by this row instead of calling it an
    orphan, and a second record under the key is still a duplicate effect."""
    return """
CREATE TABLE pruned_operations (
    scope {text} NOT NULL, operation_id {text} NOT NULL, action {text} NOT NULL,
    state {text} NOT NULL, venue_id {text}, pruned_at {real} NOT NULL,
    PRIMARY KEY (scope, operation_id)
){clustered}
""".format(**asdict(t))


def value_record_columns(t: Types) -> str:
    """The one record of dispatched value (store/_value_record.py) and runs under a plan's
    reservations (store/_run_plans.py), issue 14.

    ``dispatch_log.run_scope/run_id``: the run whose value dimension reads the entry (NULL for
    every other dispatch: the partial index is never written for them). ``run_budgets``: the
    leaf reservation a run was admitted under (one run per leaf) and when that leaf settled.
    """
    return """
ALTER TABLE dispatch_log ADD COLUMN run_scope {text};
ALTER TABLE dispatch_log ADD COLUMN run_id {text};
CREATE INDEX dispatch_log_by_run ON dispatch_log (run_scope, run_id) WHERE run_id IS NOT NULL;
ALTER TABLE run_budgets ADD COLUMN plan_id {text};
ALTER TABLE run_budgets ADD COLUMN reservation_id {text};
ALTER TABLE run_budgets ADD COLUMN settled_at {real};
CREATE UNIQUE INDEX run_budgets_by_reservation ON run_budgets (scope, plan_id, reservation_id)
    WHERE reservation_id IS NOT NULL
""".format(**asdict(t))


def retention_tables(t: Types) -> str:
    """The retention role's tables (store/_retention.py, issue 20).

    ``legal_holds``: a hold on a scope (``operation_id`` NULL) or one operation; released holds
    stay, for the record. ``audit_checkpoints``: per pruned lane, the last removed entry
    ``(seq, hash)``, which the lane's first remaining entry must follow.
    """
    return """
CREATE TABLE legal_holds (
    hold_id {text} PRIMARY KEY, scope {text} NOT NULL, operation_id {text},
    placed_by {text} NOT NULL, reason {text} NOT NULL, placed_at {real} NOT NULL,
    released_at {real}, released_by {text}
);
CREATE TABLE audit_checkpoints (
    lane {int} PRIMARY KEY, seq {bigint} NOT NULL, hash {text} NOT NULL,
    pruned_at {real} NOT NULL
)
""".format(**asdict(t))


def budgets_tables(t: Types) -> str:
    """The budgets role's tables (store/_budgets.py, seed 004).

    ``run_budgets``: one run's fixed limits (JSON) and cumulative usage; ``plan_accounts``: one
    plan's fixed policy, the row every reservation and settlement of the plan locks first;
    ``budget_reservations``: immutable requests, and once settled the settlement, its charge
    and the receipt's digest.
    """
    return """
CREATE TABLE run_budgets (
    scope {text} NOT NULL, run_id {text} NOT NULL, limits {text} NOT NULL,
    steps {bigint} NOT NULL DEFAULT 0, tokens {bigint} NOT NULL DEFAULT 0,
    reported_tokens {bigint} NOT NULL DEFAULT 0, tool_calls {bigint} NOT NULL DEFAULT 0,
    estimated {int} NOT NULL DEFAULT 0, created_at {real} NOT NULL, updated_at {real} NOT NULL,
    PRIMARY KEY (scope, run_id)
){clustered};
CREATE TABLE plan_accounts (
    scope {text} NOT NULL, plan_id {text} NOT NULL, policy {text} NOT NULL,
    policy_digest {text} NOT NULL, reservations {bigint} NOT NULL DEFAULT 0,
    created_at {real} NOT NULL,
    PRIMARY KEY (scope, plan_id)
){clustered};
CREATE TABLE budget_reservations (
    scope {text} NOT NULL, plan_id {text} NOT NULL, reservation_id {text} NOT NULL,
    parent_id {text}, kind {text} NOT NULL, depth {int} NOT NULL, request {text} NOT NULL,
    request_digest {text} NOT NULL, created_at {real} NOT NULL,
    settlement {text}, settlement_digest {text}, charge {text}, settled_at {real},
    receipt_digest {text},
    PRIMARY KEY (scope, plan_id, reservation_id)
){clustered}
""".format(**asdict(t))


def speculation_tables(t: Types) -> str:
    """The speculation role's tables (store/_speculation.py, seed 000).

    ``speculations``: one row per dry run of an operation, both keys side by side (the ledger key
    it was given, the key the sandbox says it used), the identity it validated, its verdict and
    expiry, and the attempt (how many times the proposal had arrived; audit only).
    ``speculation_state``: per operation, how many times its proposal arrived and the sandbox
    key a sandbox-authoritative class declared as its mapping (set once).
    """
    return """
CREATE TABLE speculations (
    scope {text} NOT NULL, operation_id {text} NOT NULL, seq {int} NOT NULL,
    ledger_key {key} NOT NULL, sandbox_key {text}, subject {text},
    fingerprint {text} NOT NULL, verdict {text} NOT NULL, reason {text} NOT NULL,
    expires_at {real} NOT NULL, attempt {int} NOT NULL, evidence {text} NOT NULL,
    at {real} NOT NULL, PRIMARY KEY (scope, operation_id, seq)
){clustered};
CREATE TABLE speculation_state (
    scope {text} NOT NULL, operation_id {text} NOT NULL, arrivals {int} NOT NULL,
    updated_at {real} NOT NULL, key_mapping {text}, mapped_at {real},
    PRIMARY KEY (scope, operation_id)
){clustered}
""".format(**asdict(t))


def grants_tables(t: Types) -> str:
    """The grants role's table (store/_grants.py): one row per grant, a delegation naming its
    parent. ``spec``: the axes as JSON; ``expires_at`` and ``break_glass`` repeated as columns
    for listings. A revoked row stays, for the record."""
    return """
CREATE TABLE grants (
    grant_id {text} PRIMARY KEY, holder {text} NOT NULL, spec {text} NOT NULL,
    created_by {text} NOT NULL, created_at {real} NOT NULL, parent_id {text},
    depth {int} NOT NULL, expires_at {real} NOT NULL, break_glass {bool} NOT NULL,
    revoked_at {real}, revoked_by {text}
){clustered};
CREATE INDEX grants_holder ON grants (holder, created_at);
CREATE INDEX grants_parent ON grants (parent_id);
CREATE INDEX grants_created_by ON grants (created_by)
""".format(**asdict(t))


def policy_tables(t: Types) -> str:
    """The policy versions role's tables (store/_policies.py): each document once by hash,
    the proposals (open, applied, loaded) and the one active version (``slot`` 1)."""
    return """
CREATE TABLE policy_versions (
    policy_hash {text} PRIMARY KEY, document {text} NOT NULL,
    created_at {real} NOT NULL, created_by {text} NOT NULL
){clustered};
CREATE TABLE policy_proposals (
    proposal_id {text} PRIMARY KEY, policy_hash {text} NOT NULL, base_hash {text},
    author {text} NOT NULL, created_at {real} NOT NULL, state {text} NOT NULL,
    decided_by {text}, decided_at {real}, note {text}
){clustered};
CREATE TABLE policy_active (
    slot {int} PRIMARY KEY, policy_hash {text} NOT NULL, activated_at {real} NOT NULL,
    activated_by {text} NOT NULL, proposal_id {text} NOT NULL
){clustered}
""".format(**asdict(t))


def channel_tables(t: Types) -> str:
    """The channel nonces role's table (store/_channels.py): each callback nonce once."""
    return """
CREATE TABLE channel_nonces (
    channel {text} NOT NULL, nonce {text} NOT NULL, seen_at {real} NOT NULL,
    PRIMARY KEY (channel, nonce)
){clustered};
CREATE INDEX channel_nonces_seen ON channel_nonces (channel, seen_at)
""".format(**asdict(t))


def approval_binding_columns(t: Types) -> str:
    """What each approval was given with, read by the pre-dispatch stages (docs/authority.md).

    ``roles``: the approver roles the approver's verified credential asserted (JSON list; NULL:
    none). ``precondition_at``: when the precondition was read for this approval (NULL: none
    was bound); ``precondition``: its fingerprint (NULL with a time: the read failed). A new
    approval round deletes the round's approvals, and their bindings with them.
    """
    return """
ALTER TABLE approvals ADD COLUMN roles {text};
ALTER TABLE approvals ADD COLUMN precondition {text};
ALTER TABLE approvals ADD COLUMN precondition_at {real}
""".format(**asdict(t))


def announcement_tables(t: Types) -> str:
    """Which approval request each channel announced (store/_channels.py): one row per channel,
    operation and approval round (``round``: the round's expiry, which every new round sets
    anew). ``holder``/``lease_until``: the replica announcing it now; ``announced_at``: set once
    the tool accepted it, after which no replica announces that round again."""
    return """
CREATE TABLE channel_announcements (
    channel {text} NOT NULL, scope {text} NOT NULL, operation_id {text} NOT NULL,
    round {real} NOT NULL, holder {text} NOT NULL, lease_until {real} NOT NULL,
    announced_at {real},
    PRIMARY KEY (channel, scope, operation_id, round)
){clustered}
""".format(**asdict(t))


def row_audit_columns(t: Types) -> str:
    """Audit entries an operations row names itself, kept out of ``audit_by_operation``.

    Every journal and receipt commit wrote one entry into the per-operation index, a page of
    its own in each commit (on SQLite, a WAL frame the fsync waits for). A dialect whose hot
    path can name the entry's seq in the row it writes anyway (SQLite) stores it in
    ``journal_seq`` or ``receipt_seq`` and sets the entry's ``in_row``; its index
    (``Types.row_named_index``) then holds only the others. Elsewhere nothing is ``in_row``
    and the full index stays: rebuilding it would buy nothing and, on a large log, hold the
    table's lock past a statement timeout. Readers of an operation's entries take both halves
    (store/_sql.py, ``op_entries``), split by ``in_row IS TRUE`` so that no value of the flag,
    NULL included, can drop an entry from both. Existing entries keep ``in_row`` false.
    """
    return """
ALTER TABLE audit_log ADD COLUMN in_row {bool} NOT NULL DEFAULT {false};
ALTER TABLE operations ADD COLUMN journal_seq {bigint};
ALTER TABLE operations ADD COLUMN receipt_seq {bigint};
{row_named_index}
""".format(**asdict(t))


def dispatch_log_key(t: Types) -> str:
    """The dispatch record keeps no key of its own. It is read by ``(action, at)`` windows, by
    run and by the operation key it names, never by a key of its own: SQLite dropped its
    ``id`` at migration 3 (clustered on ``(action, at, op_key)``); PostgreSQL drops it here
    (``Types.drop_dispatch_id``), one index entry less for every dispatch."""
    return t.drop_dispatch_id


#: Records ``(seq, hash)`` as lane 0's head, whether a dialect seeded the row or not.
SET_HEAD = (
    "INSERT INTO audit_heads (lane, seq, hash) VALUES (0, ?, ?) "
    "ON CONFLICT (lane) DO UPDATE SET seq = excluded.seq, hash = excluded.hash"
)


def backfill_chain(execute: Callable[..., Any]) -> None:
    """Chain entries written before the log was hash-chained (migration 2, once), and record
    the last one as lane 0's head. ``execute(query, args)`` runs one statement with ``?``
    placeholders.
    """
    rows = execute(
        "SELECT seq, at, scope, operation_id, kind, detail FROM audit_log ORDER BY seq"
    ).fetchall()
    last: tuple[int, str] | None = None
    for seq, prev, entry_hash in rechain(rows):
        execute(
            "UPDATE audit_log SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, entry_hash, seq)
        )
        last = (seq, entry_hash)
    if last is not None:
        execute(SET_HEAD, last)


def apply_migrations(
    applied: set[int],
    migrations: Sequence[str],
    ddl: Callable[[str], object],
    after: Mapping[int, Callable[[], None]],
    record: Callable[[int], object],
) -> None:
    """Run each migration not yet ``applied``, in order, in the caller's transaction:
    its ``;``-separated statements, its Python step, then its record."""
    refuse_newer_schema(applied, len(migrations))
    for version, script in enumerate(migrations, start=1):
        if version in applied:
            continue
        for statement in filter(str.strip, script.split(";")):
            ddl(statement)
        step = after.get(version)
        if step is not None:
            step()
        record(version)


def migrate(
    execute: Callable[..., Any],
    ddl: Callable[[str], object],
    migrations: Sequence[str],
    t: Types,
    after: Mapping[int, Callable[[], None]] | None = None,
) -> None:
    """Apply a dialect's pending ``migrations`` in the caller's write transaction (one process
    at a time: the dialect's lock), recording each in ``schema_migrations``.

    ``execute(query, args=())`` runs one statement with ``?`` placeholders and returns its
    cursor; ``ddl`` runs one migration statement; ``after`` maps a version to a Python step of
    the dialect's own, which runs after its DDL. Migration 2's step is the same in both
    dialects: :func:`backfill_chain`.
    """
    execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        f"(version {t.int} PRIMARY KEY, applied_at {t.applied_at})"
    )
    apply_migrations(
        {r[0] for r in execute("SELECT version FROM schema_migrations").fetchall()},
        migrations,
        ddl,
        {2: lambda: backfill_chain(execute), **(after or {})},
        lambda version: execute(
            f"INSERT INTO schema_migrations (version, applied_at) VALUES (?, {t.now})", (version,)
        ),
    )


def continuation_tables(t: Types) -> str:
    """The continuations role's table (store/_continuations.py, docs/continuations.md): one row
    per retry or compensation of an original, in sequence, with its proof and who authorised it.
    """
    return """
CREATE TABLE continuations (
    scope {text} NOT NULL, original_id {text} NOT NULL, seq {int} NOT NULL,
    kind {text} NOT NULL, operation_id {text} NOT NULL, action {text} NOT NULL,
    predecessor_digest {text} NOT NULL, proof {text} NOT NULL, authorised_by {text} NOT NULL,
    created_at {real} NOT NULL, PRIMARY KEY (scope, original_id, seq)
){clustered};
CREATE UNIQUE INDEX continuations_by_operation ON continuations (scope, operation_id)
""".format(**asdict(t))


def request_key_tables(t: Types) -> str:
    """A minted-id class's request keys (store/_request_keys.py, issue 39): each ``(scope,
    class, request key)`` bound once to the fingerprint of its proposal and the operation id
    the boundary minted for it."""
    return """
CREATE TABLE request_keys (
    scope {text} NOT NULL, action {text} NOT NULL, request_key {text} NOT NULL,
    fingerprint {text} NOT NULL, operation_id {text} NOT NULL, created_at {real} NOT NULL,
    PRIMARY KEY (scope, action, request_key)
){clustered}
""".format(**asdict(t))


def rehearsal_tables(t: Types) -> str:
    """The rehearsals role's table (store/_rehearsals.py): one row per kill switch rehearsal,
    ``kind`` ``blast_radius`` (a dry run) or ``drill`` (flipped on and back), with what it saw."""
    return """
CREATE TABLE kill_rehearsals (
    id {serial}, action {text} NOT NULL, kind {text} NOT NULL, operator {text} NOT NULL,
    at {real} NOT NULL, detail {text} NOT NULL
);
CREATE INDEX kill_rehearsals_by_action ON kill_rehearsals (action, at)
""".format(**asdict(t))


def model_window_tables(t: Types) -> str:
    """The model windows role's table (store/_model_windows.py): one row per class and
    provenance (``proposed_by``'s model and harness version, '' when absent) it has seen."""
    return """
CREATE TABLE model_windows (
    action {text} NOT NULL, model {text} NOT NULL, harness_version {text} NOT NULL,
    opened_at {real} NOT NULL, closes_at {real} NOT NULL,
    PRIMARY KEY (action, model, harness_version)
){clustered}
""".format(**asdict(t))


def model_window_end_columns(t: Types) -> str:
    """How a model window ended (store/_model_windows.py, issue 39 item 13): when, its outcome
    (``passed``, ``failed``, ``demoted``, ``measured``) and the figures it was judged on. NULL
    ``closed_at``: still open."""
    return """
ALTER TABLE model_windows ADD COLUMN closed_at {real};
ALTER TABLE model_windows ADD COLUMN outcome {text};
ALTER TABLE model_windows ADD COLUMN compared {int};
ALTER TABLE model_windows ADD COLUMN disagreement_rate {real}
""".format(**asdict(t))


def proposal_handle_index(t: Types) -> str:
    """A minted-id class's proposal handed over at approval (store/_handover.py, issue 39 item
    7): its request key is found by the handle it is bound to, and ``superseded`` becomes a
    state the operations row may hold."""
    # Where the dialect keeps a check on the state (PostgreSQL), re-create it with today's
    # states: a ledger made earlier kept the list of its first migration.
    refresh = (
        ";\nALTER TABLE operations DROP CONSTRAINT IF EXISTS operations_state_check;\n"
        f"ALTER TABLE operations ADD CONSTRAINT operations_state_check{t.state_check}"
        if t.state_check
        else ""
    )
    return f"""
CREATE INDEX request_keys_by_operation ON request_keys (scope, operation_id){refresh}
"""
