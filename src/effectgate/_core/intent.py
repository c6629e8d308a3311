"""Typed intents, action classes and the registry that parses untrusted intent bodies.

An *action class* declares the schema of its intents (a subclass of :class:`IntentBase`), which
fields are effect fields (every field except ``intent_version`` and :data:`AUDIT_FIELDS`), which
of them are decimals, and how the venue behaves. :meth:`Registry.parse` turns raw bytes (or a
Python mapping) into an :class:`Intent` whose effect is canonical and fingerprinted
(see :mod:`effectgate._core.canonical`). Everything here is pure: no I/O.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationError,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from effectgate._core.canonical import MAX_SAFE_INT, canonical_decimal, fingerprint_checked, nfc
from effectgate._core.effects import OPERATION_ID_MODES, check_effect_requirements
from effectgate._core.frozen import quick_init
from effectgate._core.jsonparse import copy_object, load_document, refuse_floats, show
from effectgate._core.messages import intent_error
from effectgate._core.model_window import WindowEnd
from effectgate._core.signals import RepeatKey, check_signal_fields, target_lane, watched_names
from effectgate._core.speculation import Speculation
from effectgate._core.venue import VenueContract
from effectgate.errors import IntentError, RegistryError, UnknownActionClass

__all__ = [
    "AUDIT_FIELDS",
    "HORIZON_RETENTION_RATIO",
    "ActionClass",
    "AsciiPattern",
    "DecimalSpec",
    "EffectClass",
    "Intent",
    "IntentBase",
    "PositiveDecimal",
    "ProposedBy",
    "Registry",
    "SignedDecimal",
    "Tier",
    "identifier",
    "tier_rank",
]

#: The visibility horizon must be at most this fraction of the venue's key retention window, so
#: an uncertain operation is settled (found, or written off past the horizon) long before the
#: venue forgets the key and a retry could no longer be deduplicated there.
HORIZON_RETENTION_RATIO: Final = 0.25

#: Stored for audit, read by nothing, never part of the fingerprint.
AUDIT_FIELDS: Final = frozenset(
    {"rationale", "context_digest", "proposed_by", "tool_output_digests"}
)
_AUDIT_ORDER: Final = ("rationale", "context_digest", "proposed_by", "tool_output_digests")
_NOT_EFFECT: Final = AUDIT_FIELDS | {"intent_version"}
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DECIMAL_PATTERN: Final = r"^-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"


class EffectClass(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT_MUTATION = "idempotent_mutation"
    NON_IDEMPOTENT_MUTATION = "non_idempotent_mutation"
    COMPENSATABLE_MUTATION = "compensatable_mutation"


class Tier(StrEnum):
    """Oversight tiers, weakest first."""

    VALIDATE = "validate"
    APPROVE = "approve"
    MULTI_APPROVE = "multi_approve"


_TIER_RANK: Final[dict[str, int]] = {Tier.VALIDATE: 0, Tier.APPROVE: 1, Tier.MULTI_APPROVE: 2}


def tier_rank(tier: Tier | str) -> int:
    """0 for ``validate``, 1 for ``approve``, 2 for ``multi_approve``: compare oversight."""
    # A member (or its value: a StrEnum hashes and compares as its text) skips Tier(), which
    # costs a microsecond per call; anything else still goes through it and fails there.
    try:
        rank = _TIER_RANK.get(tier)
    except TypeError:  # unhashable: Tier() names what is wrong with it
        rank = None
    return _TIER_RANK[Tier(tier)] if rank is None else rank


@dataclass(frozen=True, slots=True)
class DecimalSpec:
    """Annotated metadata marking a decimal-string field; the registry canonicalises it."""

    positive: bool = True

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        what = "a finite decimal > 0" if self.positive else "a finite decimal"
        return {
            "type": "string",
            "pattern": _DECIMAL_PATTERN,
            "maxLength": 100,
            "description": f"{what}, as a JSON string (never a JSON number)",
        }


#: A decimal > 0 sent as a JSON string ("4", "100.50"); floats, zero and negatives refused.
PositiveDecimal = Annotated[str, DecimalSpec(positive=True)]
#: A decimal sent as a JSON string; zero and negatives allowed.
SignedDecimal = Annotated[str, DecimalSpec(positive=False)]


def _ascii_only(value: str) -> str:
    if not value.isascii():
        raise PydanticCustomError("non_ascii", "only ASCII characters are allowed")
    return value


@dataclass(frozen=True, slots=True)
class AsciiPattern:
    """Annotated metadata for an ASCII identifier: anchored regex, length cap, ASCII only.

    Look-alike characters (Cyrillic Ha U+0425, fullwidth X U+FF38, zero-width space) are
    refused, never normalised. Use it directly, ``Annotated[str, AsciiPattern(r"^[A-Z]+$")]``
    (which type checkers accept), or through :func:`identifier`.
    """

    pattern: str
    max_length: int = 64

    def __post_init__(self) -> None:
        if not self.pattern.isascii() or not (
            self.pattern.startswith("^") and self.pattern.endswith("$")
        ):
            raise ValueError("identifier patterns must be ASCII and anchored with ^...$")
        re.compile(self.pattern)
        if self.max_length < 1:
            raise ValueError("max_length must be >= 1")

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # The explicit ASCII check matters when a pattern uses \d, \w or '.', which are
        # Unicode-aware in pydantic's regex engine.
        return core_schema.no_info_after_validator_function(
            _ascii_only, core_schema.str_schema(pattern=self.pattern, max_length=self.max_length)
        )


def identifier(pattern: str, max_length: int = 64) -> Any:
    """``Annotated[str, AsciiPattern(pattern, max_length)]``: an ASCII identifier type."""
    return Annotated[str, AsciiPattern(pattern, max_length)]


def _list_to_tuple(value: object) -> object:
    # JSON arrays arrive as lists; strict mode otherwise insists on a Python tuple.
    return tuple(value) if isinstance(value, list) else value


_Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{6,64}$")]
_Short = Annotated[str, StringConstraints(max_length=200)]


class ProposedBy(BaseModel):
    """Who proposed the intent (audit only)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    model: _Short | None = None
    harness_version: _Short | None = None
    session: _Short | None = None


class IntentBase(BaseModel):
    """Base of every intent schema. Subclasses add effect fields: ``Literal`` enums,
    identifiers, :data:`PositiveDecimal`/:data:`SignedDecimal`, ``int``, ``bool``, ``str``."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    intent_version: str
    action: str
    rationale: Annotated[str, StringConstraints(max_length=4000)] | None = None
    context_digest: _Digest | None = None
    proposed_by: ProposedBy | None = None
    tool_output_digests: Annotated[
        tuple[_Digest, ...], Field(max_length=64), BeforeValidator(_list_to_tuple)
    ] = ()


def _decimal_spec(info: Any) -> DecimalSpec | None:
    """The DecimalSpec on a pydantic field, also when nested in ``X | None``."""
    for meta in info.metadata:
        if isinstance(meta, DecimalSpec):
            return meta
    stack = [info.annotation]
    while stack:
        tp = stack.pop()
        if get_origin(tp) is Annotated:
            for meta in tp.__metadata__:
                if isinstance(meta, DecimalSpec):
                    return meta
        stack.extend(a for a in get_args(tp) if not isinstance(a, str | int | bool))
    return None


def _scalar_type(tp: Any) -> bool:
    """Whether an effect annotation only admits str / int / bool / None values."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _scalar_type(get_args(tp)[0])
    if origin is Literal:
        return all(type(a) in (str, int, bool) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return all(_scalar_type(a) for a in get_args(tp))
    return tp in (str, int, bool, type(None))


@dataclass(frozen=True)
class ActionClass:
    """A registered kind of action. Refused at construction (:class:`RegistryError`) if unsafe."""

    name: str
    model: type[IntentBase]
    adapter: str
    effect_class: EffectClass
    visibility_horizon: float
    key_retention: float
    schema_versions: frozenset[str] = frozenset({"1"})
    tier_floor: Tier = Tier.VALIDATE
    value_of: Callable[[Mapping[str, str | int | bool]], Decimal | None] | None = None
    target_field: str | None = None
    settlement_window: float | None = None
    #: Seconds a row may stay held by a control before the ``hold-aged`` alert (invariant 11);
    #: None: the settlement window, else the visibility horizon (:attr:`hold_limit`).
    hold_bound: float | None = None
    #: Seconds within which the class's kill switch must have been rehearsed (a dry run or a
    #: drill) before the ``rehearsal-overdue`` alert; None: no schedule.
    rehearsal_period: float | None = None
    #: Seconds a shadow comparison window lasts when the class sees a new ``proposed_by``
    #: model or harness version (shadow mode goes on, ``model-changed`` alerts); None: off.
    model_window: float | None = None
    #: How such a window ends: by count or time, judged against a disagreement rate
    #: (:class:`~effectgate._core.model_window.WindowEnd`; the default: by time, not judged).
    model_window_end: WindowEnd = field(default_factory=WindowEnd)
    #: What the venue promises (key, read view, sandbox): :mod:`effectgate._core.venue`.
    venue: VenueContract = field(default_factory=VenueContract)
    #: Speculative pre-execution (seed 000): :mod:`effectgate._core.speculation`; None: off.
    speculation: Speculation | None = None
    #: Effect requirements (docs/continuations.md): at most this many separately authorised
    #: retries of one original (0-7); never permission to retry an unknown effect.
    retries: int = 0
    #: The action class that undoes this one (``cancel_order`` for ``submit_order``); None: none.
    compensation: str | None = None
    #: Refuse an intent that does not say where it came from: both ``proposed_by`` (the model
    #: and harness) and ``context_digest`` must be present and non-empty (seed 001,
    #: "provenance"). Audit fields still never influence a decision.
    require_provenance: bool = False
    #: The breaker's repeat signal counts near-identical effects by this key (numeric fields
    #: bucketed, text normalised); None: by exact fingerprint. :mod:`effectgate._core.signals`.
    repeat_key: RepeatKey | None = None
    #: The effect fields the breaker's new-target signal watches: one name or several; a
    #: never-seen value in any of them counts (once per intent). Empty: ``target_field``.
    new_target_fields: tuple[str, ...] | str = ()
    #: Who supplies operation ids: ``"caller"`` (the proposer's id is the operation's) or
    #: ``"minted"`` (the boundary mints one at the decision; the proposer's id is only a request
    #: key that makes the proposal idempotent). docs/service.md, "Operation ids".
    operation_ids: str = "caller"
    _effect_fields: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _decimals: tuple[tuple[str, bool], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise RegistryError(
                f"action class name {self.name!r} must match ^[a-z][a-z0-9_]{{0,63}}$"
            )
        if not (isinstance(self.model, type) and issubclass(self.model, IntentBase)):
            raise RegistryError(f"{self.name}: model must subclass IntentBase")
        if self.model.model_config.get("extra") != "forbid":
            raise RegistryError(f"{self.name}: model must forbid extra fields")
        if not isinstance(self.adapter, str) or not self.adapter:
            raise RegistryError(f"{self.name}: adapter must be a non-empty name")
        try:
            object.__setattr__(self, "effect_class", EffectClass(self.effect_class))
            object.__setattr__(self, "tier_floor", Tier(self.tier_floor))
        except ValueError as exc:
            raise RegistryError(f"{self.name}: {exc}") from None
        if not isinstance(self.venue, VenueContract):
            raise RegistryError(f"{self.name}: venue must be a VenueContract")
        if self.speculation is not None:
            if not isinstance(self.speculation, Speculation):
                raise RegistryError(f"{self.name}: speculation must be a Speculation")
            try:
                self.speculation.check_venue(self.venue)
            except RegistryError as exc:
                raise RegistryError(f"{self.name}: {exc.message}") from None
        self._check_times()
        if self.operation_ids not in OPERATION_ID_MODES:
            raise RegistryError(
                f"{self.name}: operation_ids must be one of {', '.join(OPERATION_ID_MODES)}"
            )
        check_effect_requirements(
            self.name, self.effect_class.value, self.retries, self.compensation
        )
        versions = frozenset(self.schema_versions)
        if not versions or not all(isinstance(v, str) and v for v in versions):
            raise RegistryError(f"{self.name}: schema_versions must be non-empty strings")
        object.__setattr__(self, "schema_versions", versions)
        if self.value_of is not None and not callable(self.value_of):
            raise RegistryError(f"{self.name}: value_of must be callable")
        effect: list[str] = []
        decimals: list[tuple[str, bool]] = []
        for fname, info in self.model.model_fields.items():
            if not _FIELD_NAME.match(fname) or (info.alias not in (None, fname)):
                raise RegistryError(
                    f"{self.name}: field {fname!r} must be an ASCII identifier without an alias"
                )
            if fname in _NOT_EFFECT:
                continue
            if not _scalar_type(info.annotation):
                raise RegistryError(
                    f"{self.name}: effect field {fname!r} must be str, int, "
                    "bool, a Literal, an identifier or a decimal"
                )
            effect.append(fname)
            spec = _decimal_spec(info)
            if spec is not None:
                decimals.append((fname, spec.positive))
        if self.target_field is not None and self.target_field not in effect:
            raise RegistryError(
                f"{self.name}: target_field {self.target_field!r} is not an "
                f"effect field (effect fields: {', '.join(effect)})"
            )
        watched = watched_names(self.name, self.new_target_fields)
        annotations = {f: self.model.model_fields[f].annotation for f in effect}
        check_signal_fields(
            self.name, self.repeat_key, watched, annotations, tuple(n for n, _ in decimals)
        )
        object.__setattr__(self, "new_target_fields", watched)
        object.__setattr__(self, "_effect_fields", tuple(effect))
        object.__setattr__(self, "_decimals", tuple(decimals))

    def _check_times(self) -> None:
        for label, value in (
            ("visibility_horizon", self.visibility_horizon),
            ("key_retention", self.key_retention),
        ):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise RegistryError(f"{self.name}: {label} must be a finite number > 0")
        if self.visibility_horizon > HORIZON_RETENTION_RATIO * self.key_retention:
            raise RegistryError(
                f"{self.name}: visibility_horizon {self.visibility_horizon}s is not well inside "
                f"key_retention {self.key_retention}s (must be <= "
                f"{HORIZON_RETENTION_RATIO:.0%} of it)"
            )
        window = self.settlement_window
        if window is not None and (
            not isinstance(window, int | float) or not math.isfinite(window) or window <= 0
        ):
            raise RegistryError(f"{self.name}: settlement_window must be a finite number > 0")
        if window is not None and window >= self.key_retention:
            # The uncertain-aged alarm would fire only once the venue has forgotten the key,
            # when a retry can no longer be deduplicated there. (Above the horizon ratio but
            # inside the retention is alerted by the maintenance rules, not refused.)
            raise RegistryError(
                f"{self.name}: settlement_window {window}s is not inside key_retention "
                f"{self.key_retention}s: an uncertain row would be alarmed only after the "
                "venue forgot its key"
            )
        bound = self.hold_bound
        if bound is not None and (
            isinstance(bound, bool)
            or not isinstance(bound, int | float)
            or not math.isfinite(bound)
            or bound <= 0
        ):
            # Every hold has a finite bound: a held action goes stale as it waits.
            raise RegistryError(f"{self.name}: hold_bound must be a finite number > 0")
        period = self.rehearsal_period
        if period is not None and (
            isinstance(period, bool)
            or not isinstance(period, int | float)
            or not math.isfinite(period)
            or period <= 0
        ):
            raise RegistryError(f"{self.name}: rehearsal_period must be a finite number > 0")
        window = self.model_window
        if window is not None and (
            isinstance(window, bool)
            or not isinstance(window, int | float)
            or not math.isfinite(window)
            or window <= 0
        ):
            raise RegistryError(f"{self.name}: model_window must be a finite number > 0")
        if not isinstance(self.model_window_end, WindowEnd):
            raise RegistryError(f"{self.name}: model_window_end must be a WindowEnd")
        if window is None and self.model_window_end != WindowEnd():
            raise RegistryError(f"{self.name}: how a model window ends needs model_window")

    @property
    def hold_limit(self) -> float:
        """Seconds a held row waits before it alerts: ``hold_bound``, else the settlement
        window, else the visibility horizon. Never unbounded (invariant 11)."""
        return self.hold_bound or self.settlement_window or self.visibility_horizon

    @property
    def watched_fields(self) -> tuple[str, ...]:
        """What the new-target signal watches: ``new_target_fields``, else ``target_field``."""
        if self.new_target_fields:
            return tuple(self.new_target_fields)
        return (self.target_field,) if self.target_field is not None else ()

    def watched_targets(
        self, effect: Mapping[str, str | int | bool]
    ) -> tuple[tuple[str, str, str], ...]:
        """``(lane, field, value)`` of each watched field present in ``effect``."""
        return tuple(
            (target_lane(self.name, f, self.target_field), f, str(effect[f]))
            for f in self.watched_fields
            if effect.get(f) is not None
        )

    @property
    def effect_fields(self) -> tuple[str, ...]:
        """Every model field but ``intent_version`` and the audit fields (``action`` included)."""
        return self._effect_fields

    @property
    def decimal_fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._decimals)

    def json_schema(self) -> dict[str, Any]:
        """The intent's JSON Schema: closed object, ``action`` const, ``intent_version`` enum."""
        schema = self.model.model_json_schema()
        schema["additionalProperties"] = False
        props = schema["properties"]
        props["action"] = {"const": self.name, "type": "string", "title": "Action"}
        props["intent_version"] = {
            "enum": sorted(self.schema_versions),
            "type": "string",
            "title": "Intent Version",
        }
        return schema


@quick_init
@dataclass(frozen=True, slots=True)
class Intent:
    """A parsed, validated intent. Treat the mappings as read-only; they are fresh copies.

    ``effect`` is canonical (decimals re-rendered, text NFC, absent/null optionals omitted) and
    is all an adapter ever sees; ``snapshot`` is the whole body as sent (stored by value).
    """

    action: str
    version: str
    effect: Mapping[str, str | int | bool]
    audit: Mapping[str, object]
    snapshot: Mapping[str, object]
    fingerprint: str


class Registry:
    """The action classes a deployment accepts, and the strict parser for their intents."""

    def __init__(
        self,
        classes: tuple[ActionClass, ...] | list[ActionClass] = (),
        *,
        max_bytes: int = 65536,
        max_depth: int = 16,
    ) -> None:
        self._classes: dict[str, ActionClass] = {}
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        for ac in classes:
            self.register(ac)

    def register(self, ac: ActionClass) -> None:
        if not isinstance(ac, ActionClass):
            raise RegistryError("only ActionClass instances can be registered")
        if ac.name in self._classes:
            raise RegistryError(f"action class {ac.name!r} is already registered")
        self._classes[ac.name] = ac

    def get(self, name: str) -> ActionClass:
        try:
            return self._classes[name]
        except (KeyError, TypeError):
            raise UnknownActionClass(f"no action class named {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[ActionClass]:
        return iter([self._classes[n] for n in self.names()])

    def __len__(self) -> int:
        return len(self._classes)

    def parse(self, action: str, raw: bytes | str | Mapping[str, object]) -> Intent:
        """Strictly parse one intent for ``action``; raise :class:`IntentError` naming the field.

        Bytes and text go through :func:`~effectgate._core.jsonparse.load_strict`'s checks. A
        mapping is copied and held to the same rules (no floats, NaN, non-string keys, NUL or
        lone surrogates, depth). The result never references the caller's objects.
        """
        ac = self.get(action)
        if isinstance(raw, (bytes, str)):
            body, has_float = load_document(raw, max_bytes=self.max_bytes, max_depth=self.max_depth)
        elif isinstance(raw, Mapping):
            body, has_float = copy_object(raw, "", 1, self.max_depth), False
        else:
            raise IntentError(
                f"intent must be bytes, text or a mapping, not {type(raw).__name__}",
                reason="not_object",
            )
        version = _check_envelope(ac, body)
        if has_float:
            refuse_floats(body, "")
        # Decimals first: "send a string" says more than pydantic's "should be a valid string".
        decimals: dict[str, str] = {}
        for name, positive in ac._decimals:
            value = body.get(name)
            if value is not None:
                decimals[name] = canonical_decimal(value, field=name, positive=positive)
        try:
            # The class's validator itself: model_validate adds only a wrapper call per intent.
            model = ac.model.__pydantic_validator__.validate_python(body, strict=True)
        except ValidationError as exc:
            raise intent_error(exc, ac.model) from None
        effect: dict[str, str | int | bool] = {}
        for name in ac._effect_fields:
            value = getattr(model, name)
            if value is None:
                continue
            canonical = decimals.get(name)
            if canonical is not None:
                effect[name] = canonical
            elif type(value) is str:
                effect[name] = value if value.isascii() else nfc(value)
            elif isinstance(value, str):
                effect[name] = nfc(str(value))
            elif isinstance(value, bool):
                effect[name] = value
            elif not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                raise IntentError(
                    "integer beyond +/-(2**53 - 1)", field=name, reason="out_of_range"
                )
            else:
                effect[name] = int(value)
        audit: dict[str, object] = {k: body[k] for k in _AUDIT_ORDER if k in body}
        if ac.require_provenance:
            _check_provenance(ac, audit)
        return Intent(action, version, effect, audit, body, fingerprint_checked(effect))


#: The audit fields a class with ``require_provenance`` needs, in the order they are checked.
PROVENANCE_FIELDS = ("proposed_by", "context_digest")


def _check_provenance(ac: ActionClass, audit: Mapping[str, object]) -> None:
    """Refuse an intent whose provenance is missing or empty, naming the first such field."""
    for name in PROVENANCE_FIELDS:
        value = audit.get(name)
        # ``proposed_by: {"model": null}`` names nobody: empty, as ``{}`` is.
        blank = isinstance(value, Mapping) and all(v is None for v in value.values())
        if value is None or value == "" or blank:
            raise IntentError(
                f"{ac.name} requires provenance: field {name!r} is "
                f"{'missing' if value is None else 'empty'}",
                field=name,
                reason="provenance_required",
            )


def _check_envelope(ac: ActionClass, body: dict[str, object]) -> str:
    """Check ``intent_version`` is one the class accepts and ``action`` names it; the version."""
    if "intent_version" not in body:
        raise IntentError(
            "required field 'intent_version' is missing", field="intent_version", reason="missing"
        )
    version = body["intent_version"]
    if not isinstance(version, str) or version not in ac.schema_versions:
        raise IntentError(
            f"{show(version)} is not a supported version of {ac.name!r} "
            f"(supported: {', '.join(sorted(ac.schema_versions))})",
            field="intent_version",
            reason="unknown_version",
        )
    if "action" not in body:
        raise IntentError("required field 'action' is missing", field="action", reason="missing")
    if body["action"] != ac.name:
        raise IntentError(
            f"body says {show(body['action'])} but is being parsed as {ac.name!r}",
            field="action",
            reason="action_mismatch",
        )
    return version
