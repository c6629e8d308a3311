"""What the breaker's repeat and new-target signals watch in an effect, per class. Pure, no I/O.

The repeat signal counts how many operation ids one effect arrives under. By default "one
effect" is its exact fingerprint, so quantities 4, 4.01 and 4.02 are three effects; a class's
:class:`RepeatKey` groups near-identical effects instead: chosen numeric fields bucketed, chosen
text fields normalised, every other effect field exact. The key only feeds the breaker: it never
changes an intent's fingerprint, its identity, or what reaches an adapter.

The new-target signal watches one or more effect fields (:func:`target_lane` names where each
field's known values are remembered).
"""

from __future__ import annotations

import hashlib
import json
import types
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, InvalidOperation, localcontext
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from effectgate.errors import ConfigError, RegistryError

__all__ = [
    "RepeatKey",
    "bucket_size",
    "check_signal_fields",
    "normalise_text",
    "target_lane",
    "watched_names",
]

#: Domain tag: a repeat key can never equal an intent fingerprint (both are sha256 hex).
_TAG = b"effectgate-repeat-key/1\n"


def normalise_text(text: str) -> str:
    """Unicode NFKC, casefolded, whitespace runs collapsed to one space and trimmed."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def _bad(what: str, message: str) -> ConfigError:
    return ConfigError(f"{what}: {message}")


def bucket_size(name: str, size: object) -> Decimal:
    """One bucket size, checked: a decimal (string, ``Decimal`` or integer) > 0."""
    where = f"buckets.{name}"
    # Floats are refused as everywhere in effectgate: 0.1 is not a decimal.
    if isinstance(size, bool) or not isinstance(size, Decimal | str | int):
        raise _bad(where, f'must be a decimal string such as "0.1", not {size!r}')
    try:
        value = Decimal(str(size))
    except InvalidOperation:
        raise _bad(where, f"{size!r} is not a decimal") from None
    if not value.is_finite() or value <= 0:
        raise _bad(where, f"{size!r} must be a finite decimal > 0")
    return value


def _names(value: object, what: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise _bad(what, "must be a list of effect field names")
    names = tuple(n for n in items if isinstance(n, str) and n)
    if len(names) != len(items):
        raise _bad(what, "must be a list of effect field names")
    if len(set(names)) != len(names):
        raise _bad(what, f"names a field twice: {list(names)}")
    return names


@dataclass(frozen=True, slots=True)
class RepeatKey:
    """How the repeat signal groups near-identical effects of one class.

    ``buckets``: numeric effect field -> bucket size (a decimal > 0); a value counts by the
    bucket it falls in, ``floor(value / size)``, so with ``{"quantity": "0.1"}`` the
    quantities 4 and 4.04 are one effect (and 3.99 and 4.01 are two: bucket edges are hard).
    ``normalise``: text effect fields compared after :func:`normalise_text`. Every other
    effect field is compared exactly. A bad size or field list raises :class:`ConfigError`.
    """

    buckets: Mapping[str, Decimal | str | int] = field(default_factory=dict, compare=False)
    normalise: tuple[str, ...] = ()
    _buckets: tuple[tuple[str, Decimal], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.buckets, Mapping):
            raise _bad("buckets", "must map numeric effect fields to bucket sizes")
        sizes = tuple(
            (name, bucket_size(name, size))
            for name, size in sorted(self.buckets.items(), key=lambda kv: str(kv[0]))
        )
        if not all(isinstance(name, str) and name for name, _ in sizes):
            raise _bad("buckets", "must map effect field names to bucket sizes")
        normalise = _names(self.normalise, "normalise")
        both = sorted({n for n, _ in sizes} & set(normalise))
        if both:
            raise _bad("normalise", f"{both[0]!r} is both bucketed and normalised")
        if not sizes and not normalise:
            raise _bad(
                "buckets",
                "a repeat key needs at least one bucketed or normalised field "
                "(without one, repeats are counted by exact fingerprint: leave it unset)",
            )
        object.__setattr__(self, "normalise", normalise)
        object.__setattr__(self, "_buckets", sizes)

    @property
    def bucket_sizes(self) -> dict[str, Decimal]:
        return dict(self._buckets)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the key changes (bucketed, then normalised)."""
        return (*(n for n, _ in self._buckets), *self.normalise)

    def of(self, effect: Mapping[str, str | int | bool]) -> str:
        """The key of a canonical effect: sha256 hex over it with the chosen fields reduced."""
        reduced: dict[str, str | int | bool] = dict(effect)
        # Enough digits that no canonical decimal's quotient is rounded before the floor.
        with localcontext(prec=80):
            for name, size in self._buckets:
                value = reduced.get(name)
                if value is not None and not isinstance(value, bool):
                    index = (Decimal(str(value)) / size).to_integral_value(rounding=ROUND_FLOOR)
                    # As an integer: 4 / 0.1 is Decimal("4E+1") and 4.09 / 0.1 floors to 40.
                    reduced[name] = f"bucket:{int(index)}"
        for name in self.normalise:
            value = reduced.get(name)
            if isinstance(value, str):
                reduced[name] = normalise_text(value)
        text = json.dumps(reduced, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(_TAG + text.encode()).hexdigest()


def target_lane(action: str, field_name: str, target_field: str | None) -> str:
    """Where the known values of one watched field are remembered.

    The class's ``target_field`` keeps the lane it always had (the class name), so values seen
    before a class watched more fields are still known; another field's lane is
    ``class.field``, which no class name can be (names are ``[a-z][a-z0-9_]*``).
    """
    return action if field_name == target_field else f"{action}.{field_name}"


def watched_names(name: str, value: object) -> tuple[str, ...]:
    """A class's new-target fields as given: one name (the single-field form) or a list."""
    try:
        return _names(value, "new_target_fields")
    except ConfigError as exc:
        raise RegistryError(f"{name}: {exc.message}") from None


def _kinds(tp: Any) -> set[Any]:
    """The scalar types an effect annotation admits (``Literal`` members by their type)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _kinds(get_args(tp)[0])
    if origin is Literal:
        return {type(a) for a in get_args(tp)}
    if origin in (Union, types.UnionType):
        return set().union(*(_kinds(a) for a in get_args(tp)))
    return {tp}


def check_signal_fields(
    name: str,
    key: RepeatKey | None,
    watched: tuple[str, ...],
    effect: Mapping[str, Any],
    decimals: tuple[str, ...],
) -> None:
    """Refuse (:class:`RegistryError`) a repeat key or watched field the class's schema does
    not have: ``effect`` maps each effect field to its annotation."""
    known = ", ".join(f for f in effect if f != "action")
    for fname in watched:
        if fname not in effect or fname == "action":
            raise RegistryError(
                f"{name}: new_target_fields names {fname!r}, not an effect field "
                f"(effect fields: {known})"
            )
    if key is None:
        return
    if not isinstance(key, RepeatKey):
        raise RegistryError(f"{name}: repeat_key must be a RepeatKey")
    for fname in key.fields:
        if fname not in effect or fname == "action":
            raise RegistryError(
                f"{name}: repeat_key names {fname!r}, not an effect field (effect fields: {known})"
            )
    for fname in key.bucket_sizes:
        if fname not in decimals and int not in _kinds(effect[fname]):
            raise RegistryError(
                f"{name}: repeat_key buckets {fname!r}, which is not a decimal or integer field"
            )
    for fname in key.normalise:
        if fname in decimals or str not in _kinds(effect[fname]):
            raise RegistryError(
                f"{name}: repeat_key normalises {fname!r}, which is not a text field"
            )
