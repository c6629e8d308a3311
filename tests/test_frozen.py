"""``quick_init`` builds the same frozen values as the dataclass's own ``__init__``, or refuses.

The hot path's value types (intent, decision, rows, request, receipt) take it: a value built
through it must be indistinguishable from one built by the dataclass (fields, defaults,
factories, ``__post_init__``, keyword-only fields, errors), and stay frozen.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any

import pytest

from effectgate._core.frozen import quick_init
from effectgate._core.states import State
from effectgate._execute.adapter import OutboundRequest, Outcome, Receipt
from effectgate.store.base import Journal, NewOperation, Operation


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: int = field(default=4, kw_only=True)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: int = field(default=4, kw_only=True)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")


def _values(obj: object) -> tuple[object, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))  # type: ignore[arg-type]


class TestSameValues:
    @pytest.mark.parametrize(
        ("args", "kwargs"),
        [((1,), {}), ((1, "x"), {}), ((1, "x", [2]), {"d": 9}), ((), {"a": 3, "c": [1]})],
    )
    def test_fields_defaults_and_factories(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        assert _values(Quick(*args, **kwargs)) == _values(Plain(*args, **kwargs))

    def test_a_factory_makes_a_fresh_value_each_time(self) -> None:
        assert Quick(1).c is not Quick(1).c

    def test_post_init_runs(self) -> None:
        with pytest.raises(ValueError, match="negative"):
            Quick(-1)

    def test_keyword_only_stays_keyword_only(self) -> None:
        with pytest.raises(TypeError):
            Quick(1, "x", [], 5)  # type: ignore[call-arg]

    def test_missing_argument_is_a_type_error(self) -> None:
        with pytest.raises(TypeError, match="a"):
            Quick()  # type: ignore[call-arg]

    def test_introspection_sees_the_dataclass_s_signature_and_hints(self) -> None:
        assert str(inspect.signature(Quick.__init__)) == str(inspect.signature(Plain.__init__))
        assert typing.get_type_hints(Quick.__init__) == typing.get_type_hints(Plain.__init__)
        assert typing.get_type_hints(Operation.__init__)["version"] is int

    def test_replace_and_equality_are_the_dataclass_s(self) -> None:
        q = Quick(1, "x")
        assert dataclasses.replace(q, b="y") == Quick(1, "y")
        assert q != Quick(2, "x")

    def test_still_frozen(self) -> None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            Quick(1).a = 2  # type: ignore[misc]


class TestRefusals:
    def test_a_class_that_is_not_frozen(self) -> None:
        @dataclass(slots=True)
        class Mutable:
            a: int

        with pytest.raises(TypeError, match="frozen"):
            quick_init(Mutable)

    def test_a_class_without_slots(self) -> None:
        @dataclass(frozen=True)
        class NoSlots:
            a: int

        with pytest.raises(TypeError, match="slots"):
            quick_init(NoSlots)

    def test_a_field_outside_init(self) -> None:
        @dataclass(frozen=True, slots=True)
        class Hidden:
            a: int
            b: int = field(default=0, init=False)

        with pytest.raises(TypeError, match="exactly the fields"):
            quick_init(Hidden)

    def test_an_init_var(self) -> None:
        @dataclass(frozen=True, slots=True)
        class WithInitVar:
            a: int
            seed: dataclasses.InitVar[int] = 0

        with pytest.raises(TypeError, match="exactly the fields"):
            quick_init(WithInitVar)


class TestHotPathTypes:
    """The types that take it still validate what they validated."""

    def test_an_applied_receipt_needs_a_venue_id(self) -> None:
        with pytest.raises(ValueError, match="venue's id"):
            Receipt(Outcome.APPLIED)
        assert Receipt(Outcome.APPLIED, venue_id="V-1").detail == {}

    def test_rows_and_requests_round_trip(self) -> None:
        new = NewOperation("s", "o", "a", "f", {}, {"x": 1}, "validate", "r", "p")
        row = new.journalled(State.SUBMITTED, 2.0)
        assert isinstance(row, Operation) and row.submitted_at == 2.0 and not row.replayed
        assert Journal(row, True).tripped == ()
        assert OutboundRequest("s:o", "a", {"x": 1}).effect == {"x": 1}
