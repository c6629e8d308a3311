"""The ledger's records and the dialect-free helpers every store module shares (pure, no I/O).

A store owns durability and the two guarantees that cannot live in process memory: one row per
``(scope, operation_id)`` (a unique index, the first insert wins) and compare-and-set transitions
(a conditional update whose row count is checked). The role protocols are in
:mod:`effectgate.store.roles`, their one implementation in :mod:`effectgate.store._ledger`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from effectgate._core.controls import Verdict
from effectgate._core.frozen import quick_init
from effectgate._core.receipts import dispatch_id
from effectgate._core.states import State, check_transition
from effectgate.errors import ConfigError, IdempotencyConflict, IntentError, StoreError

__all__ = [
    "DEFAULT_SCHEMA",
    "IDENTITY_PATTERN",
    "OPERATION_ID_PATTERN",
    "OS_PREFIX",
    "SCOPE_PATTERN",
    "SYSTEM_PREFIX",
    "AuditEvent",
    "Divergence",
    "Journal",
    "LedgerEntry",
    "Move",
    "NewOperation",
    "Operation",
    "RawJSON",
    "check_moves",
    "check_path",
    "check_schema_name",
    "conflict",
    "credential_marker",
    "dumps",
    "make_op_key",
    "moved",
    "refuse_newer_schema",
    "scope_key_range",
    "split_schema",
    "store_schema",
    "transition_event",
    "validate_identity",
    "where",
    "where_terms",
    "with_schema",
]

SCOPE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
OPERATION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Who acts: a principal, an operator, an approver, an incumbent source.
IDENTITY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")
#: Names effectgate acts under itself (``system:breaker``, ``system:expiry``): never a caller's.
SYSTEM_PREFIX = "system:"
#: Who acted with the ledger's own credentials rather than a token (``os:<user>``, the CLI
#: without one): never a principal's name.
OS_PREFIX = "os:"


def credential_marker(actor: str) -> dict[str, object]:
    """What an audit entry adds about how ``actor`` was authenticated: ``{"credential":
    "store"}`` for an ``os:`` actor (holding the store's credentials is full administrative
    power, and the name is only what the OS said), nothing for a principal."""
    return {"credential": "store"} if actor.startswith(OS_PREFIX) else {}


def validate_identity(scope: str, operation_id: str) -> None:
    """Refuse scopes and operation ids outside their ASCII alphabets (no look-alikes)."""
    if not isinstance(scope, str) or not SCOPE_PATTERN.fullmatch(scope):
        raise IntentError(
            f"scope {scope!r} must match {SCOPE_PATTERN.pattern}",
            field="scope",
            reason="invalid_scope",
        )
    if not isinstance(operation_id, str) or not OPERATION_ID_PATTERN.fullmatch(operation_id):
        raise IntentError(
            f"operation id {operation_id!r} must match {OPERATION_ID_PATTERN.pattern}",
            field="operation_id",
            reason="invalid_operation_id",
        )


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
        raise IntentError(
            f"scope {scope!r} must match {SCOPE_PATTERN.pattern}",
            field="scope",
            reason="invalid_scope",
        )
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
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# The fallback for what orjson refuses (non-string keys, integers past 64 bits, lone
# surrogates): the standard encoder with the same options, built once.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_std_default
)


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


@quick_init
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

    def journalled(self, state: State, now: float, detail: str | None = None) -> Operation:
        """The row this transaction journalled at ``now`` in ``state`` (version 1)."""
        return Operation(
            scope=self.scope,
            operation_id=self.operation_id,
            action=self.action,
            fingerprint=self.fingerprint,
            state=state,
            intent=self.intent,
            effect=self.effect,
            tier=self.tier,
            reason=self.reason,
            policy_version=self.policy_version,
            venue_id=None,
            detail=detail,
            created_at=now,
            updated_at=now,
            submitted_at=now if state is State.SUBMITTED else None,
            version=1,
        )


@quick_init
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

    @property
    def dispatch_id(self) -> str | None:
        """The id of this row's dispatch (None: never journalled ``submitted``); derived from
        what the ``submitted`` write journalled, so it survives recovery
        (:func:`effectgate._core.receipts.dispatch_id`)."""
        if self.submitted_at is None:
            return None
        return dispatch_id(self.scope, self.operation_id, self.submitted_at)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able view for front doors and ``--json`` output."""
        return {
            "scope": self.scope,
            "operation_id": self.operation_id,
            "action": self.action,
            "state": self.state.value,
            "fingerprint": self.fingerprint,
            "tier": self.tier,
            "reason": self.reason,
            "policy_version": self.policy_version,
            "venue_id": self.venue_id,
            "detail": self.detail,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "submitted_at": self.submitted_at,
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


@quick_init
@dataclass(frozen=True, slots=True)
class Move:
    """One compare-and-set of a ``transition_many`` batch (``expected -> target``)."""

    scope: str
    operation_id: str
    expected: State
    target: State
    venue_id: str | None = None
    detail: str | None = None
    audit: Mapping[str, object] | None = None

    def event(self) -> dict[str, object]:
        """Its ``transition`` audit detail, as a single transition writes it."""
        return transition_event(
            self.expected, self.target, venue_id=self.venue_id, detail=self.detail, audit=self.audit
        )


@quick_init
@dataclass(frozen=True, slots=True)
class Journal:
    """What a journalling or dispatching transaction did, as a value.

    ``row`` is the row as the transaction left it; ``created`` says whether this call wrote it
    (False: the operation id was journalled before, and ``row`` is what is stored). ``verdict``
    is the dispatch check's decision when the transaction would have written ``submitted``
    (None when no dispatch was attempted). ``tripped`` lists the breaker signals the same
    transaction tripped (``"name: why"``): the gate pages on them once it has committed.
    """

    row: Operation
    created: bool
    verdict: Verdict | None = None
    tripped: tuple[str, ...] = ()


def check_moves(moves: Sequence[Move]) -> None:
    """Refuse a batch before anything is written: every move must follow the state table.

    A move to ``submitted`` is refused too: a dispatch reads the controls in its own transaction
    (:meth:`Store.transition` with its guard), a batch never dispatches.
    """
    for m in moves:
        check_transition(m.expected, m.target)
        if State(m.target) is State.SUBMITTED:
            raise ValueError(
                "a move to 'submitted' is a dispatch: use transition() with its "
                "guard, not transition_many()"
            )


def transition_event(
    expected: State,
    target: State,
    *,
    venue_id: str | None = None,
    detail: str | None = None,
    audit: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The ``transition`` audit detail of one compare-and-set: built here, and only here."""
    event: dict[str, object] = {"from": expected.value, "state": target.value}
    if venue_id is not None:
        event["venue_id"] = venue_id
    if detail is not None:
        event["detail"] = detail
    if audit:
        event.update(audit)
    return event


def moved(known: Operation, state: State, updated_at: float, changed: Sequence[Any]) -> Operation:
    """``known`` after a compare-and-set to ``state`` that returned ``(version, venue_id,
    detail, submitted_at)``: the receipt path holds the row, so nothing is re-read.

    Built field by field: ``dataclasses.replace`` costs several times as much.
    """
    version, venue_id, detail, submitted_at = changed
    return Operation(
        scope=known.scope,
        operation_id=known.operation_id,
        action=known.action,
        fingerprint=known.fingerprint,
        state=state,
        intent=known.intent,
        effect=known.effect,
        tier=known.tier,
        reason=known.reason,
        policy_version=known.policy_version,
        venue_id=venue_id,
        detail=detail,
        created_at=known.created_at,
        updated_at=updated_at,
        submitted_at=submitted_at,
        version=version,
    )


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
        raise StoreError(
            f"the ledger's schema is version {newest}, newer than this build of "
            f"effectgate knows ({known}); upgrade effectgate to open it"
        )


def conflict(existing: Operation, offered: str) -> IdempotencyConflict:
    return IdempotencyConflict(
        f"operation {existing.operation_id!r} in scope {existing.scope!r} was used before with a "
        f"different payload (stored fingerprint {existing.fingerprint[:12]}, offered "
        f"{offered[:12]})",
        operation_id=existing.operation_id,
        stored=existing.fingerprint,
        offered=offered,
    )


def with_schema(url: str, schema: str) -> str:
    """A PostgreSQL store URL naming ``schema`` (the ``schema=`` parameter effectgate reads)."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


#: The PostgreSQL schema a store URL without ``schema=`` names.
DEFAULT_SCHEMA = "effectgate"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema_name(schema: str) -> str:
    """Schema names are plain identifiers: they end up in DDL and in the search path."""
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise ConfigError(f"schema {schema!r} must match {_IDENTIFIER.pattern}")
    return schema


def split_schema(url: str) -> tuple[str, str | None]:
    """Strip a ``schema=NAME`` query parameter (ours, not libpq's) from a PostgreSQL URL."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url, None
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if len(schemas) > 1:
        raise ConfigError("the store URL names more than one schema")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), (schemas[0] if schemas else None)


def store_schema(url: str, schema: str | None) -> tuple[str, str]:
    """A store URL's connection string and its checked schema: ``schema`` as given, else the
    URL's ``schema=``, else :data:`DEFAULT_SCHEMA`; given both ways, they must agree."""
    conninfo, url_schema = split_schema(url)
    if schema is not None and url_schema is not None and schema != url_schema:
        raise ConfigError(
            f"schema {schema!r} given twice with different values ({url_schema!r} in the URL)"
        )
    return conninfo, check_schema_name(schema or url_schema or DEFAULT_SCHEMA)


def parse_store_url(url: str) -> tuple[str, str]:
    """Split a store URL into (dialect, rest). ``sqlite:///path`` or ``postgresql://...``."""
    if url.startswith("sqlite:///"):
        return "sqlite", url[len("sqlite:///") :] or ":memory:"
    if url == "sqlite://" or url == "sqlite:///:memory:":
        return "sqlite", ":memory:"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql", url
    raise ConfigError(
        f"unsupported store URL {url.split('://')[0]!r}://...; use sqlite:///PATH "
        "or postgresql://..."
    )


def where_terms(terms: Iterable[tuple[str, object]]) -> tuple[list[str], list[Any]]:
    """SQL conditions (``?`` placeholders) for the ``(column and operator, value)`` pairs whose
    value is not None, and their arguments in order."""
    clauses: list[str] = []
    args: list[Any] = []
    for term, value in terms:
        if value is not None:
            clauses.append(f"{term} ?")
            args.append(value)
    return clauses, args


def where(terms: Iterable[tuple[str, object]]) -> tuple[str, list[Any]]:
    """A whole ``WHERE`` clause (empty when no term applies) and its arguments."""
    clauses, args = where_terms(terms)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


#: An in-transaction admission check of the pre-dispatch pipeline (docs/continuations.md): called
#: with the dispatching transaction (a ``store._tx.SharedTx``), the validated row and the time;
#: anything but None refuses the dispatch (``effectgate._execute.predispatch.InTxCheck``).
AdmissionCheck = Callable[[Any, "Operation", float], object]
