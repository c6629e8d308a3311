"""Intent models from a small, safe subset of JSON Schema, for simple action classes.

The subset maps one to one onto the field types the strict core already enforces, so a
config-declared class is exactly as strict as a hand-written pydantic model:

==============================================  ============================================
property                                        becomes
==============================================  ============================================
``type="string", enum=[...]``                   ``Literal[...]``
``type="string", pattern="^...$"``              an ASCII identifier (look-alikes refused)
``type="string", format="positive-decimal"``    :data:`PositiveDecimal` (a JSON string)
``type="string", format="decimal"``             :data:`SignedDecimal`
``type="string", maxLength=N``                  free text, NFC-normalised, at most N chars
``type="integer"`` (``minimum``/``maximum``)    a strict int (no ``"5"``, no ``5.0``)
``type="boolean"``                              a strict bool
==============================================  ============================================

Anything else (nested objects, arrays, ``$ref``, ``oneOf``, formats not listed) is refused at
start-up with the key named. ``intent_version``, ``action`` and the audit fields come from
:class:`~effectgate._core.intent.IntentBase` and may not be redeclared.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, create_model

from effectgate._core.intent import (
    AUDIT_FIELDS,
    AsciiPattern,
    IntentBase,
    PositiveDecimal,
    SignedDecimal,
)
from effectgate._service._toml import Section

__all__ = ["model_from_json_schema"]

_RESERVED = AUDIT_FIELDS | {"intent_version", "action"}
_MAX_TEXT = 4000


def model_from_json_schema(name: str, schema: Section) -> type[IntentBase]:
    """A strict :class:`IntentBase` subclass for action class ``name`` from ``schema``."""
    schema.text("type", "object", choices=["object"])
    schema.text("title")
    schema.text("description")
    extra = schema.raw("additionalProperties")
    if extra not in (None, False):
        schema.fail("additionalProperties", "must be false (intents are closed objects)")
    required = schema.text_list("required") or []
    props = schema.table("properties", required=True)
    if props is None:  # unreachable: required=True raises first
        schema.fail("properties", "is required")
    fields: dict[str, Any] = {"action": (Literal[name], ...)}
    for prop_name in props.names():
        prop = props.table(prop_name)
        if prop is None:
            continue
        if prop_name in _RESERVED:
            prop.fail(None, f"{prop_name!r} is provided by effectgate and cannot be redeclared")
        annotation = _annotation(prop)
        description = prop.text("description")
        prop.text("title")
        prop.done()
        if prop_name in required:
            fields[prop_name] = (annotation, Field(..., description=description))
        else:
            fields[prop_name] = (annotation | None, Field(None, description=description))
    props.done()
    unknown = sorted(set(required) - set(fields))
    if unknown:
        schema.fail("required", f"names properties that are not declared: {', '.join(unknown)}")
    schema.done()
    model_name = "".join(part.title() for part in name.split("_")) + "Intent"
    model: type[IntentBase] = create_model(model_name, __base__=IntentBase, **fields)
    return model


def _annotation(prop: Section) -> Any:
    kind = prop.req_text("type", choices=["string", "integer", "boolean"])
    if kind == "boolean":
        return bool
    if kind == "integer":
        low, high = prop.raw("minimum"), prop.raw("maximum")
        for key, bound in (("minimum", low), ("maximum", high)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
                prop.fail(key, "must be an integer")
        return Annotated[int, Field(ge=low, le=high)]
    enum = prop.raw("enum")
    pattern = prop.text("pattern")
    fmt = prop.text("format", choices=["decimal", "positive-decimal"])
    max_length = prop.integer("maxLength", 0, minimum=1, maximum=_MAX_TEXT) or None
    chosen = [k for k, v in (("enum", enum), ("pattern", pattern), ("format", fmt)) if v]
    if len(chosen) > 1:
        prop.fail(chosen[1], f"combine at most one of enum, pattern, format (got {chosen})")
    if enum is not None:
        if (
            not isinstance(enum, list)
            or not enum
            or not all(isinstance(v, str) and v.isascii() for v in enum)
        ):
            prop.fail("enum", "must be a non-empty list of ASCII strings")
        return Literal[tuple(enum)]
    if pattern is not None:
        try:
            return Annotated[str, AsciiPattern(pattern, max_length or 64)]
        except Exception as exc:  # re.error or the anchoring/ASCII rule
            prop.fail("pattern", str(exc))
    if fmt == "positive-decimal":
        return PositiveDecimal
    if fmt == "decimal":
        return SignedDecimal
    if max_length is None:
        prop.fail(
            "maxLength", "free-text strings need a maxLength (or use enum, pattern or format)"
        )
    return Annotated[str, StringConstraints(max_length=max_length)]
