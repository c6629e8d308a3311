"""The canonical form of an effect payload, and its fingerprint.

The fingerprint detects an operation id reused with a changed payload (invariant 2). It must not
depend on how an agent spelled the same effect, so it is computed over a canonical form, defined
here precisely enough to recompute in any language:

1. **Which fields.** The effect fields of the action class only (``action`` included; the
   version and the audit fields ``rationale``, ``context_digest``, ``proposed_by`` and
   ``tool_output_digests`` never). An optional field that is absent or ``null`` is omitted.
   Keys are ASCII identifiers. Values are strings, booleans or integers with ``|n| < 2**53``.
2. **Decimals** (fields typed ``PositiveDecimal`` / ``SignedDecimal``) travel as strings and are
   re-rendered by :func:`canonical_decimal`: plain positional notation, no exponent, no ``+``,
   no leading zeros (a lone ``0`` before the point), no trailing zeros after the point and no
   trailing point; ``-`` only on a negative value; zero is ``0``. So ``"0100.00"``, ``"100.0"``
   and ``"1E2"`` are all ``"100"``, and ``"0.50"`` is ``"0.5"``.
3. **Text**: every other string value is Unicode NFC-normalised. :func:`canonical_effect` applies
   NFC itself, so a caller cannot forget it (a no-op on ASCII).
4. **Encoding**: RFC 8785 (JSON Canonicalization Scheme). For the value types allowed here that
   is: one JSON object, members sorted by key (ASCII keys, so code-point order), no whitespace,
   ``true``/``false``, integers as plain decimal digits with a leading ``-`` if negative, and
   strings quoted with minimal escaping: ``\\"`` and ``\\\\``; U+0008, U+0009, U+000A, U+000C,
   U+000D as ``\\b \\t \\n \\f \\r``; other characters below U+0020 as ``\\u00xx`` (lowercase
   hex); every other character literal, the whole document encoded as UTF-8.
5. **Fingerprint**: the lowercase hex SHA-256 of those bytes (64 characters).

Example: the effect ``{"action": "submit_order", "instrument": "XYZ-PERP", "side": "buy",
"order_type": "limit", "quantity": "4", "limit_price": "100.00"}`` encodes as::

    {"action":"submit_order","instrument":"XYZ-PERP","limit_price":"100","order_type":"limit","quantity":"4","side":"buy"}

whose fingerprint is
``fa43b085bb84bf4c1f0b457bd49a9b07d5166faf779430a348d4e1a0b2ab891f`` (checked by the tests; its
first 8 digits are the ones the seed specification prints for the same order).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from decimal import Context, Decimal, InvalidOperation
from typing import Final

import orjson

from effectgate._core.jsonparse import JsonFloat
from effectgate.errors import IntentError

__all__ = [
    "MAX_ADJUSTED_EXPONENT",
    "MAX_DECIMAL_CHARS",
    "MAX_SAFE_INT",
    "MAX_SIGNIFICANT_DIGITS",
    "canonical_decimal",
    "canonical_effect",
    "canonical_json",
    "fingerprint",
    "fingerprint_checked",
    "nfc",
]

#: At most this many significant digits in a decimal field.
MAX_SIGNIFICANT_DIGITS: Final = 38
#: The adjusted exponent (position of the leading digit) must lie in [-30, 30], so the rendered
#: string is bounded: "1E999999999" can never become a billion-character string.
MAX_ADJUSTED_EXPONENT: Final = 30
#: Longer decimal strings are refused before parsing (bounds the work on hostile input).
MAX_DECIMAL_CHARS: Final = 100
#: Integers in an effect must satisfy |n| <= MAX_SAFE_INT (exact as an IEEE double, as JCS needs).
MAX_SAFE_INT: Final = 2**53 - 1

# ASCII digits only: Decimal() also accepts other scripts' digits ("٤"), which we refuse.
_DECIMAL_SYNTAX = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
_NON_FINITE = re.compile(r"[-+]?(?:s?nan[0-9]*|inf(?:inity)?)\Z", re.IGNORECASE)
# The string escaper json.dumps(..., ensure_ascii=False) uses: escapes '"', '\\' and characters
# below U+0020 exactly as RFC 8785 does (short forms for \b \t \n \f \r, else \u00xx).
# Building the object by hand avoids constructing a new encoder per call.
_quote = json.encoder.encode_basestring
# Already canonical and in range (no leading zero, at most 31 digits): the common quantity.
_PLAIN_INT = re.compile(r"[1-9][0-9]{0,30}\Z")
# "123.4500" / "0.50": the common price shape, canonicalised with string operations only.
# The integer part has no leading zero and at most 30 digits, so its exponent is in range.
_PLAIN_FRACTION = re.compile(r"(0|[1-9][0-9]{0,29})\.([0-9]{1,40})\Z")
# Wide enough that normalize() never rounds a value that passed the length cap.
_EXACT = Context(prec=MAX_DECIMAL_CHARS + 10)


def canonical_decimal(value: object, *, field: str, positive: bool = True) -> str:
    """Validate a decimal *string* and return its canonical rendering (module doc, rule 2).

    ``positive=True`` refuses zero and negatives. Raises :class:`IntentError` naming ``field``
    with reason ``float_not_allowed``, ``not_a_decimal_string``, ``non_finite``,
    ``not_positive`` or ``out_of_range``.
    """
    if not isinstance(value, str):
        if isinstance(value, JsonFloat | float):
            raise IntentError(
                "JSON numbers with a fraction or exponent are refused; "
                'send the decimal as a string, e.g. "100.50"',
                field=field,
                reason="float_not_allowed",
            )
        kind = "boolean" if isinstance(value, bool) else type(value).__name__
        raise IntentError(
            f'expected a decimal as a JSON string (e.g. "4"), got {kind}',
            field=field,
            reason="not_a_decimal_string",
        )
    if _PLAIN_INT.match(value):
        return value
    simple = _PLAIN_FRACTION.match(value)
    if simple is not None:
        return _canonical_fraction(simple[1], simple[2], value, field, positive)
    if len(value) > MAX_DECIMAL_CHARS:
        raise IntentError(
            f"decimal string longer than {MAX_DECIMAL_CHARS} characters",
            field=field,
            reason="out_of_range",
        )
    if not _DECIMAL_SYNTAX.match(value):
        if _NON_FINITE.match(value):
            raise IntentError(
                f"{value!r} is not a finite decimal", field=field, reason="non_finite"
            )
        raise IntentError(
            f"{_short(value)} is not a plain decimal: ASCII digits with an optional '-', '.' "
            "and exponent; no spaces, '+', '_' or other characters",
            field=field,
            reason="not_a_decimal_string",
        )
    try:
        number = Decimal(value)
    except InvalidOperation:
        # An exponent beyond what the decimal module can represent ("1E+1086816166917345432").
        raise IntentError(
            f"{_short(value)} is outside 1E-{MAX_ADJUSTED_EXPONENT} .. 1E+{MAX_ADJUSTED_EXPONENT}",
            field=field,
            reason="out_of_range",
        ) from None
    if number.is_zero():
        if positive:
            raise IntentError(
                f"{value!r} must be greater than zero", field=field, reason="not_positive"
            )
        return "0"
    if positive and number.is_signed():
        raise IntentError(
            f"{value!r} must be greater than zero", field=field, reason="not_positive"
        )
    # adjusted() needs no context, so it is safe on "1E999999999" before anything else.
    if not -MAX_ADJUSTED_EXPONENT <= number.adjusted() <= MAX_ADJUSTED_EXPONENT:
        raise IntentError(
            f"{_short(value)} is outside 1E-{MAX_ADJUSTED_EXPONENT} .. 1E+{MAX_ADJUSTED_EXPONENT}",
            field=field,
            reason="out_of_range",
        )
    normal = number.normalize(_EXACT)
    if len(normal.as_tuple().digits) > MAX_SIGNIFICANT_DIGITS:
        raise IntentError(
            f"more than {MAX_SIGNIFICANT_DIGITS} significant digits",
            field=field,
            reason="out_of_range",
        )
    return format(normal, "f")


def _canonical_fraction(whole: str, fraction: str, value: str, field: str, positive: bool) -> str:
    """The fast path of :func:`canonical_decimal` for ``<whole>.<fraction>``, same rules."""
    fraction = fraction.rstrip("0")
    if whole != "0":
        digits = len(whole) + len(fraction)
    else:
        significant = fraction.lstrip("0")
        if not significant:
            if positive:
                raise IntentError(
                    f"{value!r} must be greater than zero", field=field, reason="not_positive"
                )
            return "0"
        # 0.000ddd: the leading digit sits at exponent -(zeros + 1).
        if len(fraction) - len(significant) + 1 > MAX_ADJUSTED_EXPONENT:
            raise IntentError(
                f"{_short(value)} is outside 1E-{MAX_ADJUSTED_EXPONENT} .. "
                f"1E+{MAX_ADJUSTED_EXPONENT}",
                field=field,
                reason="out_of_range",
            )
        digits = len(significant)
    if digits > MAX_SIGNIFICANT_DIGITS:
        raise IntentError(
            f"more than {MAX_SIGNIFICANT_DIGITS} significant digits",
            field=field,
            reason="out_of_range",
        )
    return f"{whole}.{fraction}" if fraction else whole


def nfc(text: str) -> str:
    """NFC-normalise ``text`` (ASCII returned as is: the common case costs one check)."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def canonical_effect(effect: Mapping[str, str | int | bool]) -> bytes:
    """The canonical bytes of an effect payload (module doc, rules 3-4).

    Decimal fields must already be canonical (see :func:`canonical_decimal`); text is
    NFC-normalised here. Raises ``TypeError``/``ValueError`` for keys or values outside the
    allowed types: that is a programming error, intents are checked before they get here.
    """
    members: list[str] = []
    # Keys are ASCII, so Python's code-point sort is JCS's UTF-16 sort.
    for key in sorted(effect):
        if type(key) is not str or not (key.isascii() and key.isidentifier()):
            raise ValueError(f"effect key {key!r} is not an ASCII identifier")
        value = effect[key]
        if type(value) is str:
            text = value if value.isascii() else unicodedata.normalize("NFC", value)
            members.append(f'"{key}":{_quote(text)}')
        elif value is True or value is False:
            members.append(f'"{key}":{"true" if value else "false"}')
        elif isinstance(value, int):
            if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                raise ValueError(f"effect field {key!r}: integer beyond +/-(2**53 - 1)")
            members.append(f'"{key}":{int(value)!r}')
        elif isinstance(value, str):
            members.append(f'"{key}":{_quote(nfc(str(value)))}')
        else:
            raise TypeError(f"effect field {key!r}: {type(value).__name__} is not str/int/bool")
    # Strict UTF-8: a lone surrogate has no encoding, so it cannot be fingerprinted.
    return ("{" + ",".join(members) + "}").encode("utf-8")


def fingerprint(effect: Mapping[str, str | int | bool]) -> str:
    """Lowercase hex SHA-256 of :func:`canonical_effect` (64 characters)."""
    return hashlib.sha256(canonical_effect(effect)).hexdigest()


def fingerprint_checked(effect: Mapping[str, str | int | bool]) -> str:
    """:func:`fingerprint` of an effect the strict parser built: identifier keys, and values
    that are ``str``, ``bool`` or ``int`` within +/-(2**53 - 1), decimals already canonical.

    orjson's sorted compact encoding is then byte for byte the canonical form whenever it comes
    out ASCII (same escapes for ``"``, ``\\`` and control characters, nothing else escaped; NFC
    is a no-op on ASCII; tests/test_canonical.py checks it). Anything else takes
    :func:`canonical_effect`.
    """
    raw = orjson.dumps(effect, option=orjson.OPT_SORT_KEYS)
    if raw.isascii():
        return hashlib.sha256(raw).hexdigest()
    return fingerprint(effect)


def canonical_json(value: object) -> bytes:
    """RFC 8785 bytes of a JSON value made of objects, arrays, text, booleans, null and integers
    with ``|n| < 2**53``: the signed documents' form (signed operation receipts). Floats are
    refused (their JCS rendering is ECMAScript's, which no caller here needs); text is encoded
    as is, never normalised, so any JCS library reproduces the bytes. Raises ``TypeError`` or
    ``ValueError`` for anything else, a lone surrogate included."""
    out: list[str] = []
    _jcs(value, out)
    return "".join(out).encode("utf-8")


def _jcs(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif type(value) is str:
        out.append(_quote(value))
    elif type(value) is int:
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise ValueError("integer beyond +/-(2**53 - 1) has no exact JSON number")
        out.append(str(value))
    elif isinstance(value, Mapping):
        keys = list(value)
        if any(type(k) is not str for k in keys):
            raise TypeError("JSON object keys must be text")
        # JCS sorts members by their keys' UTF-16 code units (not code points).
        keys.sort(key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        out.append("{")
        for i, key in enumerate(keys):
            out.append("," if i else "")
            out.append(_quote(key) + ":")
            _jcs(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _jcs(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} has no canonical JSON form here")


def _short(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")
