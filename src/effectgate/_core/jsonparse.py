"""Strict JSON for untrusted intent bodies, applied to the raw bytes before any model sees them.

:func:`load_strict` is :func:`json.loads` with hooks, plus the checks the standard parser does not
make. It refuses, with an :class:`~effectgate.errors.IntentError` whose ``reason`` is:

=================  ==========================================================================
``too_large``      more than ``max_bytes`` bytes (checked before decoding; a ``BodyTooLarge``)
``encoding``       not UTF-8, or a ``str`` holding lone surrogates
``syntax``         not JSON (``field`` is None; the message gives line and column)
``duplicate_key``  a key repeated in one object (``field`` names the repeated key's path)
``non_finite``     ``NaN``, ``Infinity`` or ``-Infinity``
``huge_number``    an integer literal with more than 30 digits
``invalid_string`` a string or key holding U+0000 or an unpaired surrogate (via ``\\u`` escapes)
``too_deep``       containers nested more than ``max_depth`` levels (the top object is level 1)
``not_object``     the top level is not an object
=================  ==========================================================================

Numbers with a fraction or an exponent are *not* turned into ``float``: they come back as
:class:`JsonFloat`, which keeps the source text, so the layer above can refuse them by field name.

Field paths are written ``limit_price``, ``proposed_by.model``, ``tool_output_digests[2]``; a key
that is not a plain identifier is written as a bracketed JSON string (``a["x y"]``).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from effectgate.errors import BodyTooLarge, IntentError

__all__ = [
    "MAX_INT_DIGITS",
    "JsonFloat",
    "copy_object",
    "format_path",
    "load_document",
    "load_strict",
    "path_join",
    "refuse_floats",
    "show",
]

#: Longest integer literal accepted, in digits. Bounds int() work and every later computation.
MAX_INT_DIGITS: Final = 30

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_KEY_IN_PATH: Final = 80
# A NUL or a UTF-16 surrogate. Valid UTF-8 cannot carry either raw (and JSON refuses raw control
# characters), so they can only come from \u escapes: the scan runs only when one is present.
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class JsonFloat:
    """A JSON number with a fraction or exponent, kept as its source text, never as a float."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"JsonFloat({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonFloat) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("JsonFloat", self.text))


class _Refused:
    """Placeholder a hook leaves in the tree so the walk can name the path of the problem."""

    __slots__ = ("detail", "reason")

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail


def path_join(path: str, key: str | int) -> str:
    """Append one object key or array index to a field path."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    shown = key if len(key) <= _MAX_KEY_IN_PATH else key[:_MAX_KEY_IN_PATH] + "..."
    return f"{path}[{json.dumps(shown)}]"


def format_path(loc: tuple[str | int, ...]) -> str:
    """A field path from a sequence of keys and indexes (pydantic's ``loc``)."""
    path = ""
    for part in loc:
        path = path_join(path, part)
    return path


def _children(node: object, path: str) -> Iterator[tuple[str, object]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield path_join(path, key), value
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield path_join(path, index), value


def _find(node: object, path: str, depth: int, max_depth: int, strings: bool) -> None:
    """Raise for the first placeholder, over-deep container or bad string, in document order.

    Recursion is bounded by ``max_depth``: the walk refuses before going deeper.
    """
    if isinstance(node, _Refused):
        if node.reason == "duplicate_key":
            field = path_join(path, node.detail)
            raise IntentError(
                f"duplicate key {node.detail!r} in one object", field=field, reason="duplicate_key"
            )
        if node.reason == "non_finite":
            raise IntentError(
                f"{node.detail} is not a number JSON allows",
                field=path or None,
                reason="non_finite",
            )
        raise IntentError(
            f"integer literal has more than {MAX_INT_DIGITS} digits",
            field=path or None,
            reason="huge_number",
        )
    if isinstance(node, str):
        if strings and _BAD_CHAR.search(node):
            raise IntentError(
                "string holds U+0000 or an unpaired surrogate",
                field=path or None,
                reason="invalid_string",
            )
        return
    if not isinstance(node, dict | list):
        return
    if depth > max_depth:
        raise IntentError(
            f"nested deeper than {max_depth} levels", field=path or None, reason="too_deep"
        )
    if strings and isinstance(node, dict):
        for key in node:
            if _BAD_CHAR.search(key):
                raise IntentError(
                    "key holds U+0000 or an unpaired surrogate",
                    field=path or None,
                    reason="invalid_string",
                )
    for child_path, child in _children(node, path):
        _find(child, child_path, depth + 1, max_depth, strings)


# The hooks below are module-level so that one decoder (and its C scanner) is built once, not
# per call. They report through a thread-local: a parse runs on one thread, start to finish.
_flags = threading.local()


def _pairs(items: list[tuple[str, object]]) -> object:
    obj = dict(items)
    if len(obj) != len(items):
        _flags.refused = True
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                return _Refused("duplicate_key", key)
            seen.add(key)
    return obj


def _parse_int(literal: str) -> object:
    # Checked before int(): a 60,000-digit literal must not cost a quadratic conversion.
    if len(literal) - literal.startswith("-") > MAX_INT_DIGITS:
        _flags.refused = True
        return _Refused("huge_number", literal)
    return int(literal)


def _parse_constant(name: str) -> object:
    _flags.refused = True
    return _Refused("non_finite", name)


def _parse_float(literal: str) -> JsonFloat:
    _flags.has_float = True
    return JsonFloat(literal)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs,
    parse_float=_parse_float,
    parse_int=_parse_int,
    parse_constant=_parse_constant,
)


def load_strict(raw: bytes | str, *, max_bytes: int = 65536, max_depth: int = 16) -> object:
    """Parse one untrusted JSON document strictly; the top level must be an object.

    Returns plain ``dict``/``list``/``str``/``int``/``bool``/``None`` values and
    :class:`JsonFloat` for non-integer numbers. Raises :class:`IntentError` (see module doc).
    """
    return load_document(raw, max_bytes=max_bytes, max_depth=max_depth)[0]


def load_document(
    raw: bytes | str, *, max_bytes: int = 65536, max_depth: int = 16
) -> tuple[dict[str, object], bool]:
    """:func:`load_strict`, typed as an object, plus whether any :class:`JsonFloat` occurs.

    The flag lets a caller skip looking for floats in the (usual) document that has none.
    """
    if isinstance(raw, str):
        # A str is at most as long in characters as in UTF-8 bytes: cheap bound first.
        if len(raw) > max_bytes:
            raise BodyTooLarge(f"body exceeds {max_bytes} bytes")
        try:
            size = len(raw.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise IntentError(
                f"text is not valid Unicode at character {exc.start}", reason="encoding"
            ) from None
        if size > max_bytes:
            raise BodyTooLarge(f"body exceeds {max_bytes} bytes")
        text = raw
    else:
        if len(raw) > max_bytes:
            raise BodyTooLarge(f"body exceeds {max_bytes} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IntentError(
                f"body is not valid UTF-8 at byte {exc.start}", reason="encoding"
            ) from None

    if "\\u" not in text:
        fast = _fast_document(text, max_depth)
        if fast is not None:
            return fast, False
    flags = _flags
    flags.refused = flags.has_float = False
    try:
        doc = _DECODER.decode(text)
    except RecursionError:
        # The C scanner gives up long before the stack does; the document is far too deep.
        raise IntentError(f"nested deeper than {max_depth} levels", reason="too_deep") from None
    except json.JSONDecodeError as exc:
        raise IntentError(
            f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", reason="syntax"
        ) from None

    strings = "\\u" in text
    # Every container needs one bracket, so few brackets means the depth cannot be exceeded
    # and the walk can be skipped (brackets inside strings only make this conservative).
    deep = text.count("{") + text.count("[") > max_depth
    if flags.refused or strings or deep:
        _find(doc, "", 1, max_depth, strings)
    if not isinstance(doc, dict):
        kind = "an array" if isinstance(doc, list) else "a scalar"
        raise IntentError(f"top level must be a JSON object, got {kind}", reason="not_object")
    return doc, bool(flags.has_float)


# A key's closing quote, then its colon. In a document orjson accepts, every object member has
# one, and one more can only come from an escaped quote inside a string followed by a colon.
_KEY_END = re.compile(r'"[ \t\n\r]*:')


def _fast_document(text: str, max_depth: int) -> dict[str, object] | None:
    """The document as the strict parser would return it, when orjson shows nothing to refuse:
    None means "take the strict parser", which then finds the refusal and names it.

    Only for text without ``\\u`` escapes (no NUL or surrogate can hide there). orjson refuses
    what the strict parser refuses (syntax, NaN, control characters), but it keeps the last of
    two duplicate keys and turns big integers into floats. So: no float anywhere, depth within
    bounds, and as many members in the tree as ``"key":`` spots in the text. That count is at
    least the number of members written, so equality means no key was dropped as a duplicate.
    """
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    members = _plain_members(doc, 1, max_depth)
    if members < 0 or members != _key_spots(text):
        return None
    return doc


def _key_spots(text: str) -> int:
    """How many times :data:`_KEY_END` matches ``text``. Where no quote is followed by
    whitespace (compact JSON, and ``json.dumps``' default spacing) every match is exactly
    ``":``, which ``str.count`` finds at a fraction of the regex's cost."""
    if _QUOTE_SPACE.search(text) is not None:
        return len(_KEY_END.findall(text))
    return text.count('":')


# A quote followed by whitespace: one scan (four substring searches for a two-character needle
# starting with '"', the commonest character of JSON, cost four times as much).
_QUOTE_SPACE = re.compile(r'"[ \t\n\r]')


def _plain_members(node: Any, depth: int, max_depth: int) -> int:
    """Members of every object in ``node``; -1 for a float or a container past ``max_depth``."""
    if depth > max_depth:
        return -1
    if type(node) is dict:
        count, values = len(node), node.values()
    else:
        count, values = 0, node
    for value in values:
        kind = type(value)
        if kind is dict or kind is list:
            inner = _plain_members(value, depth + 1, max_depth)
            if inner < 0:
                return -1
            count += inner
        elif kind is float:
            return -1
    return count


def show(value: object, limit: int = 60) -> str:
    """A short repr for error messages (never the whole of a hostile value)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --- mappings from Python callers: held to the same rules as raw JSON ---------------------


def _copy_json(node: object, path: str, depth: int, max_depth: int) -> object:
    """A fresh JSON-shaped copy of a caller's object, refusing what raw JSON could not carry."""
    if node is None or isinstance(node, bool):
        return node
    if isinstance(node, str):
        if _BAD_CHAR.search(node):
            raise IntentError(
                "string holds U+0000 or an unpaired surrogate",
                field=path or None,
                reason="invalid_string",
            )
        return str(node)
    if isinstance(node, int):
        if abs(node) >= 10**30:
            raise IntentError(
                "integer has more than 30 digits", field=path or None, reason="huge_number"
            )
        return int(node)
    if isinstance(node, float):
        if not math.isfinite(node):
            raise IntentError(
                f"{node} is not a number JSON allows", field=path or None, reason="non_finite"
            )
        raise _float_error(path)
    if isinstance(node, JsonFloat):
        raise _float_error(path)
    if not isinstance(node, Mapping | list | tuple):
        raise IntentError(
            f"{type(node).__name__} is not a JSON value (send decimals as strings)",
            field=path or None,
            reason="not_json",
        )
    if depth > max_depth:
        raise IntentError(
            f"nested deeper than {max_depth} levels", field=path or None, reason="too_deep"
        )
    if isinstance(node, Mapping):
        return copy_object(node, path, depth, max_depth)
    return [_copy_json(v, path_join(path, i), depth + 1, max_depth) for i, v in enumerate(node)]


def copy_object(
    node: Mapping[Any, object], path: str, depth: int, max_depth: int
) -> dict[str, object]:
    if depth > max_depth:
        raise IntentError(
            f"nested deeper than {max_depth} levels", field=path or None, reason="too_deep"
        )
    out: dict[str, object] = {}
    for key, value in node.items():
        if type(key) is not str:
            raise IntentError(
                f"object key {show(key)} is not a string", field=path or None, reason="invalid_key"
            )
        if _BAD_CHAR.search(key):
            raise IntentError(
                "key holds U+0000 or an unpaired surrogate",
                field=path or None,
                reason="invalid_string",
            )
        out[key] = _copy_json(value, path_join(path, key), depth + 1, max_depth)
    return out


def _float_error(path: str) -> IntentError:
    return IntentError(
        "numbers with a fraction or exponent are refused; send decimals as "
        'JSON strings, e.g. "100.50"',
        field=path or None,
        reason="float_not_allowed",
    )


def refuse_floats(node: object, path: str) -> None:
    if isinstance(node, JsonFloat):
        raise _float_error(path)
    if isinstance(node, dict):
        for key, value in node.items():
            refuse_floats(value, path_join(path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            refuse_floats(value, path_join(path, index))
