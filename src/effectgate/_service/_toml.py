"""Reading a TOML document strictly: every key checked, unknown keys refused, errors located.

:class:`Section` wraps one table. Its typed getters pop keys as they are read, and
:meth:`Section.done` refuses whatever is left over, so a typo (``endpiont``) is an error that
names the key and, where the source text allows it, the line, never a silently ignored setting.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from effectgate.errors import ConfigError

__all__ = ["Section", "locate"]

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*(?:\.|=)')


def _split_dotted(text: str) -> list[str]:
    parts: list[str] = []
    for match in re.finditer(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', text):
        parts.append(next(g for g in match.groups() if g is not None))
    return parts


def locate(source: str, path: Sequence[str]) -> int | None:
    """Best-effort 1-based line of the key at ``path`` (or of its table header) in ``source``."""
    if not path:
        return None
    want, parent = list(path), list(path[:-1])
    table: list[str] = []
    header_line: int | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_dotted(header.group(1))
            if table == want and header_line is None:
                header_line = number
            continue
        key = _KEY.match(line)
        if key and table == parent and _split_dotted(key.group(1))[:1] == [path[-1]]:
            return number
    if header_line is not None:
        return header_line
    return locate(source, path[:-1])


class Section:
    """One TOML table being validated. Getters consume keys; :meth:`done` refuses leftovers."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], file: str, source: str) -> None:
        self._data = dict(data)
        self.path = path
        self._file = file
        self._source = source
        # Every key a getter asked for, present or not: the vocabulary of this table, used to
        # suggest the key a typo meant.
        self._asked: set[str] = set()

    # -- errors ----------------------------------------------------------------------------

    def where(self, key: str | None = None) -> str:
        full = (*self.path, key) if key is not None else self.path
        line = locate(self._source, full)
        dotted = ".".join(full) or "(top level)"
        return f"{self._file}:{line}: {dotted}" if line else f"{self._file}: {dotted}"

    def fail(self, key: str | None, message: str) -> NoReturn:
        full = (*self.path, key) if key is not None else self.path
        # Messages from lower layers often start with the name they are about ("submit_order:
        # ..."); the location already says it, so it is not repeated.
        for prefix in (".".join(full), ".".join(self.path), *full[-1:], *self.path[-1:]):
            if prefix:
                message = message.removeprefix(f"{prefix}: ")
        raise ConfigError(f"{self.where(key)}: {message}")

    # -- getters ---------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        return key in self._data

    def names(self) -> list[str]:
        return list(self._data)

    def _take(self, key: str, required: bool) -> Any:
        self._asked.add(key)
        if key not in self._data:
            if required:
                self.fail(key, "is required" + self._misspelt(key))
            return None
        return self._data.pop(key)

    def _misspelt(self, key: str) -> str:
        """A missing key is usually a typo: name the unknown key that looks like it."""
        unasked = [k for k in self._data if k not in self._asked]
        for near in difflib.get_close_matches(key, unasked, n=1, cutoff=0.6):
            line = locate(self._source, (*self.path, near))
            at = f" (line {line})" if line else ""
            return (
                f"; {'.'.join((*self.path, near))}{at} is an unknown key: a misspelling of {key}?"
            )
        return ""

    def text(
        self,
        key: str,
        default: str | None = None,
        *,
        required: bool = False,
        choices: Sequence[str] | None = None,
        pattern: str | None = None,
    ) -> str | None:
        value = self._take(key, required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.fail(key, f"must be a string, not {_kind(value)}")
        if choices is not None and value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        if pattern is not None and not re.fullmatch(pattern, value):
            self.fail(key, f"{value!r} must match {pattern}")
        return value

    def req_text(self, key: str, **kw: Any) -> str:
        value = self.text(key, required=True, **kw)
        if value is None:  # unreachable: required=True raises first
            self.fail(key, "is required")
        return value

    def number(
        self, key: str, default: float, *, minimum: float = 0.0, exclusive: bool = True
    ) -> float:
        value = self._take(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, f"must be a number, not {_kind(value)}")
        if not math.isfinite(value) or (value <= minimum if exclusive else value < minimum):
            self.fail(key, f"must be a finite number {'>' if exclusive else '>='} {minimum:g}")
        return float(value)

    def req_number(self, key: str, why: str = "") -> float:
        """A required number > 0; ``why`` is added to the message when it is missing."""
        if key not in self._data:
            self._asked.add(key)
            self.fail(key, "is required" + self._misspelt(key) + (f" ({why})" if why else ""))
        return self.number(key, 0.0)

    def integer(
        self, key: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        value = self._take(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, not {_kind(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            self.fail(key, f"must be an integer {bound}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._take(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, not {_kind(value)}")
        return value

    def text_list(self, key: str) -> list[str] | None:
        value = self._take(key, False)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, "must be a list of strings")
        return list(value)

    def take_all(self) -> dict[str, Any]:
        """Every remaining key, consumed (for option tables passed through to user code)."""
        data, self._data = self._data, {}
        return data

    def raw(self, key: str) -> Any:
        return self._take(key, False)

    def table(self, key: str, *, required: bool = False) -> Section | None:
        value = self._take(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"must be a table, not {_kind(value)}")
        return Section(value, (*self.path, key), self._file, self._source)

    def tables(self, key: str) -> Iterator[tuple[str, Section]]:
        """The sub-tables of table ``key`` (``[key.name]``), each as a Section."""
        outer = self.table(key)
        if outer is None:
            return
        for name in outer.names():
            inner = outer.table(name)
            if inner is not None:
                yield name, inner

    def done(self) -> None:
        if self._data:
            key = sorted(self._data)[0]
            near = difflib.get_close_matches(
                key, sorted(self._asked - set(self._data)), n=1, cutoff=0.6
            )
            hint = f"did you mean {near[0]}?" if near else "check the spelling"
            self.fail(key, f"unknown key ({hint}; see docs/service.md)")


def _kind(value: object) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)
