"""Turning pydantic's first validation error into an :class:`IntentError` a model can act on.

The message names the field by its JSON path, says what was expected and what arrived, and for a
look-alike character names the code point, so an agent can correct itself in one step.
"""

from __future__ import annotations

import unicodedata
from typing import Final, get_args

from pydantic import BaseModel, ValidationError

from effectgate._core.jsonparse import JsonFloat, format_path, show
from effectgate.errors import IntentError

__all__ = ["intent_error"]


_JSON_KIND: Final = {
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
    type(None): "null",
    JsonFloat: "a non-integer number",
}
_EXPECTED: Final = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "model_type": "an object",
    "dict_type": "an object",
    "tuple_type": "an array",
}


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The nested model a pydantic ``loc`` prefix points into, to list its allowed fields."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return None
        stack, current = [info.annotation], None
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                current = tp
                break
            stack.extend(get_args(tp))
    return current


def intent_error(exc: ValidationError, model: type[BaseModel]) -> IntentError:
    """The first pydantic error as an IntentError a model can act on (field path + reason)."""
    err = exc.errors(include_url=False)[0]
    loc: tuple[str | int, ...] = tuple(err["loc"])
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    if not loc:
        # An object-level rule (model validator); it names its field in ctx["field"].
        return IntentError(err["msg"], field=ctx.get("field"), reason=kind)
    path = format_path(loc)
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see the schema"
        return IntentError(
            f"unknown field {loc[-1]!r} (allowed: {allowed})", field=path, reason=kind
        )
    if kind == "missing":
        return IntentError(f"required field {loc[-1]!r} is missing", field=path, reason=kind)
    if kind in _EXPECTED:
        got = _JSON_KIND.get(type(given), type(given).__name__)
        return IntentError(f"expected {_EXPECTED[kind]}, got {got}", field=path, reason=kind)
    if kind in ("string_pattern_mismatch", "non_ascii") and isinstance(given, str):
        message = f"{show(given)} does not match {ctx.get('pattern', 'the allowed pattern')}"
        odd = next(((i, c) for i, c in enumerate(given) if not c.isascii()), None)
        if odd is not None:
            i, c = odd
            name = unicodedata.name(c, "unnamed character")
            message += (
                f": it contains U+{ord(c):04X} {name} at index {i}; only ASCII is "
                "accepted (look-alike characters are refused, not normalised)"
            )
        return IntentError(message, field=path, reason=kind)
    if kind == "literal_error":
        return IntentError(
            f"{show(given)} is not allowed; expected {ctx.get('expected')}", field=path, reason=kind
        )
    return IntentError(f"{err['msg']} (got {show(given)})", field=path, reason=kind)
