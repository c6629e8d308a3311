"""The fast encoders write exactly the bytes the standard library would.

Invariant 8 (a verifiable audit chain) depends on it: an entry's digest is recomputed from its
stored fields at verification time, by whichever code path the text takes then. If the fast
path and the standard one ever disagreed, an honest entry would fail verification.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectgate._evidence.audit import content_digest
from effectgate.store.base import RawJSON, dumps

_REFERENCE = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
_STORED = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def reference_digest(
    lane: int, at: float, scope: str | None, op: str | None, kind: str, text: str
) -> str:
    import hashlib

    body = _REFERENCE.encode([lane, at, scope, op, kind, text])
    return hashlib.sha256(body.encode("ascii")).hexdigest()


# Every code point class that matters: ASCII, DEL and controls, BMP, astral.
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
ascii_texts = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=60)


def trees(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
        max_leaves=20,
    )


exact_values = trees(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | texts)
float_values = trees(st.none() | st.floats(allow_nan=False, allow_infinity=False) | texts)


class TestContentDigest:
    @settings(max_examples=400)
    @given(
        lane=st.integers(0, 15),
        at=st.floats(allow_nan=False, allow_infinity=False),
        scope=st.none() | ascii_texts | texts,
        op=st.none() | ascii_texts | texts,
        kind=ascii_texts | texts,
        text=ascii_texts | texts,
    )
    def test_fast_path_matches_the_standard_encoder(
        self, lane: int, at: float, scope: str | None, op: str | None, kind: str, text: str
    ) -> None:
        assert content_digest(lane, at, scope, op, kind, text) == reference_digest(
            lane, at, scope, op, kind, text
        )

    def test_del_and_controls_take_the_escaping_path(self) -> None:
        for text in ("a\x7fb", "tab\there", "nul\x00", 'quote"back\\slash', "\u2028"):
            assert content_digest(0, 1.5, "s", "o", "k", text) == reference_digest(
                0, 1.5, "s", "o", "k", text
            )


class TestDumps:
    @settings(max_examples=400)
    @given(value=exact_values)
    def test_same_text_as_the_standard_encoder(self, value: Any) -> None:
        assert dumps(value) == _STORED.encode(value)

    @settings(max_examples=200)
    @given(value=float_values)
    def test_floats_round_trip_to_the_same_number(self, value: Any) -> None:
        # Floats may be spelled differently from repr(); the number is the same.
        assert json.loads(dumps(value)) == json.loads(_STORED.encode(value))

    def test_what_the_standard_encoder_refused_is_still_refused(self) -> None:
        import dataclasses
        import datetime

        @dataclasses.dataclass
        class Point:
            x: int

        for value in (datetime.datetime(2026, 1, 1), Point(1), {1, 2}, b"raw"):
            with pytest.raises(TypeError):
                dumps({"v": value})

    def test_str_subclasses_encode_as_their_text(self) -> None:
        from effectgate._core.states import State

        assert dumps({"state": State.SUBMITTED}) == '{"state":"submitted"}'

    def test_non_finite_floats_are_written_as_null(self) -> None:
        # Documented choice: no door lets NaN or Infinity in (the strict parsers refuse them);
        # a detail that carries one anyway is recorded, not lost to an exception.
        assert dumps({"x": float("nan"), "y": float("inf")}) == '{"x":null,"y":null}'

    def test_integers_past_64_bits_fall_back(self) -> None:
        assert dumps({"n": 2**70}) == '{"n":1180591620717411303424}'

    def test_embedded_text_is_not_encoded_twice(self) -> None:
        inner = dumps({"b": [1, "é"], "a": None})
        assert dumps({"z": 1, "intent": RawJSON(inner)}) == _STORED.encode(
            {"z": 1, "intent": json.loads(inner)}
        )

    def test_embedded_text_survives_the_fallback(self) -> None:
        inner = dumps({"a": 1})
        assert json.loads(dumps({"big": 2**70, "intent": RawJSON(inner)})) == {
            "big": 2**70,
            "intent": {"a": 1},
        }
