"""The strict JSON parser's orjson fast path never accepts what the strict parser refuses.

DESIGN.md "Bad input" (reject, never coerce): ``load_document`` takes orjson's answer only when
the document holds nothing the strict parser would refuse or spell differently; everything else
goes through the strict parser, whose refusal (reason and field) is unchanged.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectgate._core.jsonparse import (
    _KEY_END,
    JsonFloat,
    _fast_document,
    _key_spots,
    load_document,
)
from effectgate.errors import IntentError


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a" : 1, "a": 2}',  # whitespace before the colon: still a duplicate
        '{"a"\t:1,"b":{"c":1,"c" :2}}',
        '{"a": 1, "b": "x\\":y", "a" : 2}',  # an escaped quote and colon inside a string
        '{"a": [{"k": 1}, {"k": 2, "k": 3}]}',
    ],
)
def test_duplicate_keys_are_refused_however_spaced(text: str) -> None:
    assert _fast_document(text, 16) is None
    with pytest.raises(IntentError) as info:
        load_document(text)
    assert info.value.reason == "duplicate_key"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": 1.5}', None),  # a float: JsonFloat from the strict parser, never a float
        ('{"a": 1e2}', None),
        ('{"a": 123456789012345678901234567890123}', "huge_number"),
        ('{"a": 99999999999999999999}', None),  # past 64 bits: orjson makes it a float
        ('{"a": NaN}', "non_finite"),
        ('{"a": "\\u0000"}', "invalid_string"),
        ('{"a": "\\ud800"}', "invalid_string"),
        ("[1, 2]", "not_object"),
        ('{"a": 1} x', "syntax"),
        ('{"a": ' + "[" * 20 + "]" * 20 + "}", "too_deep"),
    ],
)
def test_what_the_strict_parser_handles_stays_with_it(text: str, reason: str | None) -> None:
    if "\\u" not in text:  # with an escape, load_document never asks the fast path
        assert _fast_document(text, 16) is None
    if reason is None:
        doc, has_float = load_document(text)
        value = doc["a"]
        assert has_float == isinstance(value, JsonFloat)
        assert type(value) is not float
    else:
        with pytest.raises(IntentError) as info:
            load_document(text)
        assert info.value.reason == reason


def test_the_fast_path_serves_the_usual_intent() -> None:
    text = '{"intent_version": "1", "action": "x", "n": 4, "by": {"m": "sha256:ab"}, "l": [1]}'
    fast = _fast_document(text, 16)
    assert fast is not None
    assert fast == json.loads(text)
    assert load_document(text) == (fast, False)


_keys = st.sampled_from(["a", "b", "c", "a b", 'q"', "k:"])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["x", 'y":', "z\\", "sha256:ff", " : "]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(st.tuples(_keys, inner), max_size=4),  # pairs: keys may repeat
    ),
    max_leaves=12,
)


def _render(value: object, spaced: bool) -> str:
    """JSON text of ``value``; a list of pairs is an object that may repeat a key."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        colon = " : " if spaced else ":"
        return "{" + ",".join(json.dumps(k) + colon + _render(v, spaced) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_render(v, spaced) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_keys, _values), max_size=5), st.booleans())
def test_fast_and_strict_agree(members: list[tuple[str, object]], spaced: bool) -> None:
    """Whatever the fast path returns is exactly what the strict parser returns."""
    text = _render(members, spaced) if members else "{}"
    fast = _fast_document(text, 16)
    try:
        expected = load_document(text)
    except IntentError:
        assert fast is None
        return
    if fast is not None:
        assert (fast, False) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='"a: \t\n\r\\{},', max_size=60))
def test_key_spots_count_what_the_key_pattern_matches(text: str) -> None:
    # The duplicate-key count takes str.count where it must agree with the regex: on any text.
    assert _key_spots(text) == len(_KEY_END.findall(text))
