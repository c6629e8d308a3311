"""Mutations only the door actor (:mod:`effectgate._sim.actors.doors`) exercises: the strict
parse of what arrives through a door (raw HTTP bytes, MCP tool arguments). Every other actor
proposes Python mappings of strings, so nothing else sends a float."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from effectgate._core.jsonparse import JsonFloat
from effectgate._sim.actor import Mutation

__all__ = ["DOORS"]

F = Callable[..., Any]


def _floats_as_text(original: F) -> F:
    # A JSON number with a fraction is read as its decimal text: an HTTP body's float passes.
    def load_document(raw: Any, **kw: Any) -> tuple[Any, bool]:
        doc, _ = original(raw, **kw)
        if isinstance(doc, dict):
            doc = {k: v.text if isinstance(v, JsonFloat) else v for k, v in doc.items()}
        return doc, False

    return load_document


def _floats_coerced(original: F) -> F:
    # A float among the tool arguments is coerced to its text: an MCP call's float passes.
    def copy_object(node: Mapping[Any, object], *args: Any) -> dict[str, object]:
        fixed = {k: str(v) if isinstance(v, float) else v for k, v in node.items()}
        return original(fixed, *args)  # type: ignore[no-any-return]

    return copy_object


DOORS: tuple[Mutation, ...] = (
    Mutation(
        "http_float_accepted",
        "6 hostile_body_refused",
        "effectgate._core.intent:load_document",
        _floats_as_text,
    ),
    Mutation(
        "mcp_float_coerced",
        "6 hostile_body_refused",
        "effectgate._core.intent:copy_object",
        _floats_coerced,
    ),
)
