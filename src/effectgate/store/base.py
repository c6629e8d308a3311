"""The store protocol every ledger engine implements, and the dialect-free pieces they share.

A store owns durability and the two guarantees that cannot live in process memory: one row per
``(scope, operation_id)`` (a unique index, the first insert wins) and compare-and-set transitions
(a conditional update whose row count is checked). Dialect code lives only in ``sqlite.py`` and
``postgres.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from effectgate.core.states import State, check_transition
from effectgate.errors import ConfigError, IdempotencyConflict, StoreError

if TYPE_CHECKING:
    from effectgate.audit import ChainEntry
    from effectgate.core.controls import (
        Alert,
        ApprovalOutcome,
        ApprovalRecord,
        ApprovalRequest,
        AuthorityStep,
        ClassControls,
        DispatchGuard,
        ShadowPair,
    )

__all__ = [
    "OPERATION_ID_PATTERN",
    "SCOPE_PATTERN",
    "AuditEvent",
    "Divergence",
    "LedgerEntry",
    "Move",
    "NewOperation",
    "Operation",
    "RawJSON",
    "Store",
    "audit_filters",
    "check_moves",
    "check_path",
    "conflict",
    "dumps",
    "make_op_key",
    "move_event",
    "moved",
    "operation_filters",
    "refuse_newer_schema",
    "scope_key_range",
    "validate_identity",
    "where_terms",
]

SCOPE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
OPERATION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def validate_identity(scope: str, operation_id: str) -> None:
    """Refuse scopes and operation ids outside their ASCII alphabets (no look-alikes)."""
    from effectgate.errors import IntentError

    if not isinstance(scope, str) or not SCOPE_PATTERN.fullmatch(scope):
        raise IntentError(f"scope {scope!r} must match {SCOPE_PATTERN.pattern}", field="scope",
                          reason="invalid_scope")
    if not isinstance(operation_id, str) or not OPERATION_ID_PATTERN.fullmatch(operation_id):
        raise IntentError(
            f"operation id {operation_id!r} must match {OPERATION_ID_PATTERN.pattern}",
            field="operation_id", reason="invalid_operation_id")


def make_op_key(scope: str, operation_id: str) -> str:
    """The venue idempotency token. Scopes contain no ':', so the first ':' splits it back."""
    return f"{scope}:{operation_id}"


def scope_key_range(scope: str) -> tuple[str, str]:
    """``[low, high)`` such that ``low <= key < high`` exactly when ``key`` starts ``scope:``.

    Scopes never contain ``':'`` and ``';'`` is the next code point, so under byte (or "C")
    collation the range holds the scope's keys and nothing else: ``alpha_x:`` and ``alpha-x:``
    fall outside ``alpha:``. A range needs no ``LIKE`` escaping (``_`` is a ``LIKE`` wildcard
    and a scope character) and an index on the key serves it. The scope is checked first:
    a guard raises, it never passes a malformed scope to SQL.
    """
    from effectgate.errors import IntentError

    if not isinstance(scope, str) or not SCOPE_PATTERN.fullmatch(scope):
        raise IntentError(f"scope {scope!r} must match {SCOPE_PATTERN.pattern}", field="scope",
                          reason="invalid_scope")
    return f"{scope}:", f"{scope};"


class RawJSON:
    """Text :func:`dumps` produced earlier, embedded in another value as it stands."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _orjson_default(obj: object) -> object:
    if isinstance(obj, RawJSON):
        return orjson.Fragment(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _std_default(obj: object) -> object:
    if isinstance(obj, RawJSON):
        return json.loads(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# Datetimes, dataclasses and str/int subclasses go to the fallback, which treats them as before
# (refused, or encoded as their base type); orjson would encode the first two on its own.
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)
# The fallback for what orjson refuses (non-string keys, integers past 64 bits, lone
# surrogates): the standard encoder with the same options, built once.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False, default=_std_default)


def dumps(value: object) -> str:
    """Compact, key-sorted JSON for stored snapshots and audit details.

    orjson does the work (the hot path encodes a snapshot and two audit details per action);
    what it refuses falls back to the standard encoder, same layout. A :class:`RawJSON` embeds
    text encoded earlier (the intent snapshot already stored in the row) without encoding it
    twice. Floats may be spelled differently from ``repr`` (``6.103515625e-05`` as
    ``0.00006103515625``), the same number either way; digests are taken over the stored text,
    so that never matters. Non-finite floats come out as ``null``: no door lets one in (the
    strict parsers refuse NaN and Infinity).
    """
    try:
        return orjson.dumps(value, default=_orjson_default, option=_ORJSON_OPTIONS).decode()
    except TypeError:
        return _ENCODER.encode(value)


@dataclass(frozen=True, slots=True)
class NewOperation:
    """Everything journalled when an operation first enters the ledger."""

    scope: str
    operation_id: str
    action: str
    fingerprint: str
    intent: Mapping[str, object]
    effect: Mapping[str, str | int | bool]
    tier: str
    reason: str
    policy_version: str

    @property
    def op_key(self) -> str:
        return make_op_key(self.scope, self.operation_id)


@dataclass(frozen=True, slots=True)
class Operation:
    """One ledger row, as read back from the store."""

    scope: str
    operation_id: str
    action: str
    fingerprint: str
    state: State
    intent: Mapping[str, object]
    effect: Mapping[str, str | int | bool]
    tier: str | None
    reason: str | None
    policy_version: str | None
    venue_id: str | None
    detail: str | None
    created_at: float
    updated_at: float
    submitted_at: float | None
    version: int
    #: Set by the gate when this call found an existing row rather than creating it.
    replayed: bool = field(default=False, compare=False)
    #: Set by the gate on a ``submitted`` row: why its outcome is unknown (from memory or audit).
    cause: str | None = field(default=None, compare=False)

    @property
    def op_key(self) -> str:
        return make_op_key(self.scope, self.operation_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able view for front doors and ``--json`` output."""
        return {
            "scope": self.scope, "operation_id": self.operation_id, "action": self.action,
            "state": self.state.value, "fingerprint": self.fingerprint, "tier": self.tier,
            "reason": self.reason, "policy_version": self.policy_version,
            "venue_id": self.venue_id, "detail": self.detail, "created_at": self.created_at,
            "updated_at": self.updated_at, "submitted_at": self.submitted_at,
            "replayed": self.replayed,
        }


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The slim projection the sweep pages through (no intent snapshot)."""

    op_key: str
    action: str
    state: State
    venue_id: str | None
    submitted_at: float | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class AuditEvent:
    seq: int
    at: float
    scope: str | None
    operation_id: str | None
    kind: str
    detail: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Divergence:
    kind: str
    op_key: str
    venue_ids: tuple[str, ...]
    ledger_state: str | None
    first_seen: float


@dataclass(frozen=True, slots=True)
class Move:
    """One compare-and-set of a :meth:`Store.transition_many` batch (``expected -> target``)."""

    scope: str
    operation_id: str
    expected: State
    target: State
    venue_id: str | None = None
    detail: str | None = None
    audit: Mapping[str, object] | None = None


def check_moves(moves: Sequence[Move]) -> None:
    """Refuse a batch before anything is written: every move must follow the state table.

    A move to ``submitted`` is refused too: a dispatch reads the controls in its own transaction
    (:meth:`Store.transition` with its guard), a batch never dispatches.
    """
    for m in moves:
        check_transition(m.expected, m.target)
        if State(m.target) is State.SUBMITTED:
            raise ValueError("a move to 'submitted' is a dispatch: use transition() with its "
                             "guard, not transition_many()")


def move_event(move: Move) -> dict[str, object]:
    """The ``transition`` audit detail of one move, as :meth:`Store.transition` writes it."""
    event: dict[str, object] = {"from": move.expected.value, "state": move.target.value}
    if move.venue_id is not None:
        event["venue_id"] = move.venue_id
    if move.detail is not None:
        event["detail"] = move.detail
    if move.audit:
        event.update(move.audit)
    return event


def moved(known: Operation, state: State, updated_at: float,
          changed: Sequence[Any]) -> Operation:
    """``known`` after a compare-and-set to ``state`` that returned ``(version, venue_id,
    detail, submitted_at)``: the receipt path holds the row, so nothing is re-read.

    Built field by field: ``dataclasses.replace`` costs several times as much.
    """
    version, venue_id, detail, submitted_at = changed
    return Operation(
        scope=known.scope, operation_id=known.operation_id, action=known.action,
        fingerprint=known.fingerprint, state=state, intent=known.intent, effect=known.effect,
        tier=known.tier, reason=known.reason, policy_version=known.policy_version,
        venue_id=venue_id, detail=detail, created_at=known.created_at, updated_at=updated_at,
        submitted_at=submitted_at, version=version)


def check_path(path: Sequence[State]) -> None:
    """A new row's journalled path must start at ``proposed`` and follow the state table."""
    key = tuple(path)
    if key in _CHECKED_PATHS:
        return
    current: State | None = None
    for step in path:
        current = check_transition(current, step)
    if current is None:
        raise ValueError("an empty path journals nothing")
    # Only paths the table allows are remembered; there are a handful of them.
    _CHECKED_PATHS.add(key)


_CHECKED_PATHS: set[tuple[State, ...]] = set()


def refuse_newer_schema(applied: set[int], known: int) -> None:
    """Refuse a ledger migrated past this build: its writers would break invariants this
    build does not know about (and the old code would fail on the new layout anyway)."""
    newest = max(applied, default=0)
    if newest > known:
        raise StoreError(f"the ledger's schema is version {newest}, newer than this build of "
                         f"effectgate knows ({known}); upgrade effectgate to open it")


def conflict(existing: Operation, offered: str) -> IdempotencyConflict:
    return IdempotencyConflict(
        f"operation {existing.operation_id!r} in scope {existing.scope!r} was used before with a "
        f"different payload (stored fingerprint {existing.fingerprint[:12]}, offered "
        f"{offered[:12]})", operation_id=existing.operation_id, stored=existing.fingerprint,
        offered=offered)


def parse_store_url(url: str) -> tuple[str, str]:
    """Split a store URL into (dialect, rest). ``sqlite:///path`` or ``postgresql://...``."""
    if url.startswith("sqlite:///"):
        return "sqlite", url[len("sqlite:///"):] or ":memory:"
    if url == "sqlite://" or url == "sqlite:///:memory:":
        return "sqlite", ":memory:"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql", url
    raise ConfigError(f"unsupported store URL {url.split('://')[0]!r}://...; use sqlite:///PATH "
                      "or postgresql://...")


@runtime_checkable
class Store(Protocol):
    """The ledger contract. Every method is its own transaction unless stated."""

    def migrate(self) -> None:
        """Apply pending schema migrations (idempotent, safe from several processes)."""

    def insert_operation(self, new: NewOperation, path: Sequence[State], *, now: float,
                         audit: Mapping[str, object] | None = None,
                         guard: DispatchGuard | None = None) -> tuple[Operation, bool]:
        """Journal a new row that walked ``path`` in one transaction, or return the existing one.

        Returns ``(row, created)``. An existing row with another fingerprint raises
        :class:`IdempotencyConflict`. A path ending in ``submitted`` is durable when this returns.
        In the same transaction the class's controls apply (see :mod:`effectgate.store.guard`):
        the row may end ``rejected`` (envelope), ``shadowed``, or stay ``validated`` with
        ``detail`` saying what holds it; ``guard.report`` says which.
        """

    def transition(self, scope: str, operation_id: str, expected: State, target: State, *,
                   now: float, venue_id: str | None = None, detail: str | None = None,
                   audit: Mapping[str, object] | None = None,
                   guard: DispatchGuard | None = None,
                   current: Operation | None = None) -> Operation:
        """Compare-and-set ``expected -> target``; raise StaleState/OperationNotFound otherwise.

        A move to ``submitted`` checks the controls in the same transaction: the row may come
        back ``shadowed``, or still ``validated`` (held, ``detail`` says why).

        ``current``: the caller's copy of the row (as it was at ``expected``). When given, the
        returned row is built from it plus the columns the update changed, instead of reading
        back and decoding the snapshot (the receipt path: the gate already holds the row).
        """

    def transition_many(self, moves: Sequence[Move], *, now: float) -> list[bool]:
        """Apply each move as its own compare-and-set, all in ONE transaction.

        Returns, per move, whether it applied; a stale move (the row is no longer in
        ``expected``, or does not exist) is skipped, not an error. Each applied move writes the
        same row update and chained ``transition`` audit entry as :meth:`transition` would.
        An invalid move (state table, or a move to ``submitted``) raises before anything is
        written.
        """

    def get(self, scope: str, operation_id: str) -> Operation | None: ...

    def list_operations(self, *, state: State | None = None, action: str | None = None,
                        scope: str | None = None, older_than: float | None = None,
                        limit: int = 100) -> list[Operation]: ...

    def count_by_state(self) -> dict[tuple[str, str], int]:
        """``{(action, state): n}`` for metrics and the demo."""

    def page_entries(self, after: str | None, limit: int,
                     actions: Sequence[str] | None = None) -> list[LedgerEntry]:
        """Ledger entries with ``op_key > after`` in key order (the sweep's side of the merge)."""

    def lease_uncertain(self, owner: str, *, now: float, lease_seconds: float,
                        limit: int) -> list[LedgerEntry]:
        """Claim up to ``limit`` ``submitted`` rows no other live lease holds (replicas share)."""

    def record_divergence(self, kind: str, op_key: str, venue_ids: Sequence[str],
                          ledger_state: str | None, *, now: float) -> bool:
        """Store a divergence once; True only the first time it is seen (alarm once)."""

    def list_divergences(self, limit: int = 1000) -> list[Divergence]: ...

    # --- aggregate and scoped reads (store/*_reads.py): one statement each --------------------

    def oldest_submitted_at(self) -> float | None:
        """When the oldest ``submitted`` (uncertain) row was journalled; None when there is none."""

    def count_divergences(self) -> dict[str, int]:
        """``{kind: n}`` over every divergence recorded."""

    def count_held(self) -> dict[str, int]:
        """``{action: n}`` of ``validated`` rows a control is holding (``detail`` ``held:...``)."""

    def list_divergences_in(self, scope: str | None = None, *,
                            limit: int = 1000) -> list[Divergence]:
        """Divergences of one scope's operation keys (all when None), filtered before LIMIT."""

    def list_alerts_in(self, scope: str | None = None, *, limit: int = 1000) -> list[Alert]:
        """Alerts whose subject is one of the scope's operation keys (all when None)."""

    def list_held(self, *, action: str | None = None, scope: str | None = None,
                  limit: int = 1000) -> list[Operation]:
        """Held ``validated`` rows, most recently updated first, filtered before LIMIT."""

    def append_audit(self, kind: str, detail: Mapping[str, object], *, now: float,
                     scope: str | None = None, operation_id: str | None = None) -> None: ...

    def iter_audit(self, after_seq: int = 0) -> Iterator[AuditEvent]: ...

    # --- operational controls (operator side; each call is one audited transaction) ---------

    def controls(self, action: str) -> ClassControls: ...

    def list_controls(self) -> list[ClassControls]: ...

    def set_kill(self, action: str, on: bool, *, operator: str, reason: str | None,
                 now: float) -> ClassControls: ...

    def reset_breaker(self, action: str, *, operator: str, reason: str | None,
                      now: float) -> ClassControls: ...

    def set_shadow(self, action: str, on: bool, *, operator: str,
                   now: float) -> ClassControls: ...

    def apply_authority_step(self, action: str, axis: str, new: object, *,
                             evidence: Mapping[str, object], reverse_on: str, operator: str,
                             now: float) -> AuthorityStep: ...

    def authority_history(self, action: str | None = None) -> list[AuthorityStep]: ...

    def approval_request(self, scope: str, operation_id: str) -> ApprovalRequest | None: ...

    def list_approvals(self, scope: str, operation_id: str) -> list[ApprovalRecord]: ...

    def decide_approval(self, scope: str, operation_id: str, *, approver: str, fingerprint: str,
                        approve: bool, reason: str | None, now: float) -> ApprovalOutcome:
        """One approver's answer to exactly this payload; releases or denies the row."""

    def expire_approvals(self, *, now: float) -> list[Operation]: ...

    def record_incumbent(self, correlation_id: str, action: str, fingerprint: str | None,
                         effect: Mapping[str, object] | None, *, source: str,
                         now: float) -> None: ...

    def shadow_pairs(self, action: str | None = None) -> list[ShadowPair]: ...

    def record_alert(self, alert: Alert) -> bool:
        """Store an alert once per ``(kind, subject)``; True only the first time."""

    def list_alerts(self, limit: int = 1000) -> list[Alert]: ...

    def audit_entries(self, *, after_seq: int = 0, until_seq: int | None = None,
                      lane: int | None = None, scope: str | None = None,
                      operation_id: str | None = None, limit: int = 1000) -> list[ChainEntry]:
        """Audit entries with their chain fields, in seq order."""

    def audit_heads(self) -> dict[int, tuple[int, str]]:
        """The last ``(seq, hash)`` of each audit lane."""

    def audit_anchor_mismatches(self) -> list[tuple[int, str]]:
        """Every other recorded ``(seq, hash)`` the log no longer carries: ``(seq, why)``.

        Beyond the heads, a store may record where its entries were (SQLite: each operations
        row names its latest journal or receipt entry). One whose entry is gone or different
        means entries were deleted or rewritten, even if later appends re-used their seqs.
        """

    def sweep_lock(self, holder: str, *, now: float,
                   ttl: float) -> AbstractContextManager[bool]:
        """Hold the single-sweeper lock for the block; yields False when another holds it."""

    def close(self) -> None: ...


def where_terms(placeholder: str,
                terms: Iterable[tuple[str, object]]) -> tuple[list[str], list[Any]]:
    """SQL conditions for the ``(column and operator, value)`` pairs whose value is not None,
    in a dialect's placeholder style (``?``/``%s``), and their arguments in order."""
    clauses: list[str] = []
    args: list[Any] = []
    for term, value in terms:
        if value is not None:
            clauses.append(f"{term} {placeholder}")
            args.append(value)
    return clauses, args


def operation_filters(placeholder: str, *, state: State | None = None, action: str | None = None,
                      scope: str | None = None,
                      older_than: float | None = None) -> tuple[str, list[Any]]:
    """The WHERE clause of ``list_operations`` in a dialect's placeholder style (``?``/``%s``)."""
    clauses, args = where_terms(placeholder, (
        ("state =", state.value if state is not None else None), ("action =", action),
        ("scope =", scope), ("updated_at <", older_than)))
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


def audit_filters(placeholder: str, *, after_seq: int, until_seq: int | None,
                  lane: int | None, scope: str | None,
                  operation_id: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause of ``audit_entries`` in a dialect's placeholder style."""
    clauses, args = where_terms(placeholder, (
        ("seq >", after_seq), ("seq <=", until_seq), ("lane =", lane), ("scope =", scope),
        ("operation_id =", operation_id)))
    return "WHERE " + " AND ".join(clauses), args
