"""A cheaper ``__init__`` for the frozen, slotted dataclasses an action builds on its way.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__``, which
looks the attribute up on the type again for every field: measured with callgrind, about 1,500
instructions a field, against about 800 through the slot's own member descriptor (``__set__``)
and 200 for a plain class. An action builds a dozen such values (the intent, the decision, the
rows, the request and the receipt), so :func:`quick_init` gives those classes an ``__init__``
with the same signature, defaults, factories and ``__post_init__`` that sets the slots through
their descriptors. Everything else stays the dataclass's: frozen, ``eq``, ``repr``, ``replace``.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")

#: Stands for "not given" in a field whose default comes from a factory.
_FACTORY = object()


def quick_init(cls: type[T]) -> type[T]:
    """Replace ``cls.__init__`` (a frozen dataclass with ``slots=True``) as the module says.

    Refuses a class it cannot reproduce exactly: not frozen, no slots, a field outside
    ``__init__``, or an ``InitVar``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: quick_init takes a frozen dataclass with slots=True")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    given = set(inspect.signature(cls.__init__).parameters) - {"self"}
    if given != {f.name for f in fields} or not all(f.init for f in fields):
        # An InitVar, or a field left out of __init__: only the dataclass's own reproduces it.
        raise TypeError(f"{cls.__name__}: quick_init needs __init__ to take exactly the fields")
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        slot = getattr(cls, f.name)  # the member descriptor (slots=True keeps no default here)
        if not isinstance(slot, types.MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{f.name}: not a slot")
        env[f"_set_{f.name}"] = slot.__set__
        param = f.name
        value = f.name
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_FACTORY"
            value = f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    _set_{f.name}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    # As dataclasses does: an outer function takes the helpers as closure cells, so the
    # __init__ runs with the class's module as its globals (type hints resolve there).
    source = (
        f"def __create_init__({', '.join(env)}):\n"
        + f"  def __init__({signature}):\n"
        + "\n".join("  " + line for line in body or ["    pass"])
        + "\n  return __init__\n"
    )
    module = sys.modules.get(cls.__module__)
    scope: dict[str, Any] = {}
    exec(source, vars(module) if module else {}, scope)  # noqa: S102 - generated from the class's own field names, as dataclasses does
    init = scope["__create_init__"](**env)
    original = cls.__init__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    # Introspection sees the dataclass's own: annotations, and "<factory>" for a factory default.
    init.__annotations__ = dict(original.__annotations__)
    init.__signature__ = inspect.signature(original)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
