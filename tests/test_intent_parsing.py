"""The DESIGN.md "Bad input" rules, checked on raw bytes against the reference SubmitOrder class.

Every refusal is an IntentError naming the field (a JSON path, or None when no path exists) and a
stable reason code, so a model can correct itself.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from effectgate._core.intent import Registry
from effectgate._core.jsonparse import JsonFloat, load_strict
from effectgate.errors import IntentError
from effectgate.examples import EXAMPLE_ORDER, default_registry, submit_order_class

REGISTRY = default_registry()


def body(**changes: object) -> bytes:
    """The example order with fields replaced (``None`` deletes), as JSON bytes."""
    doc = dict(EXAMPLE_ORDER)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def with_quantity_literal(literal: str) -> bytes:
    """The example with ``quantity`` replaced by raw JSON text (not a string)."""
    raw = body().decode()
    assert '"quantity": "4"' in raw
    return raw.replace('"quantity": "4"', f'"quantity": {literal}').encode()


def prepend(member: str) -> bytes:
    """The example with a raw member inserted first in the top-level object."""
    return b"{" + member.encode() + b", " + body()[1:]


EXAMPLE = body()
HEAD = b'{"intent_version": "1", "action": "submit_order", '

# (id, raw bytes, expected field, expected reason)
BAD_INPUT = [
    ("duplicate-key-top-level", prepend('"quantity": "5"'), "quantity", "duplicate_key"),
    (
        "duplicate-key-nested",
        body().replace(b'"proposed_by": {', b'"proposed_by": {"model": "x", '),
        "proposed_by.model",
        "duplicate_key",
    ),
    ("nan-literal", with_quantity_literal("NaN"), "quantity", "non_finite"),
    ("infinity-literal", with_quantity_literal("Infinity"), "quantity", "non_finite"),
    ("minus-infinity-literal", with_quantity_literal("-Infinity"), "quantity", "non_finite"),
    ("float-quantity", with_quantity_literal("4.0"), "quantity", "float_not_allowed"),
    (
        "float-exponent-price",
        body().replace(b'"100.00"', b"1e2"),
        "limit_price",
        "float_not_allowed",
    ),
    ("int-quantity", with_quantity_literal("4"), "quantity", "not_a_decimal_string"),
    ("huge-exponent", body(quantity="1E999999999"), "quantity", "out_of_range"),
    ("tiny-exponent", body(quantity="1e-400"), "quantity", "out_of_range"),
    ("zero", body(quantity="0"), "quantity", "not_positive"),
    ("negative", body(quantity="-4"), "quantity", "not_positive"),
    ("nan-string", body(quantity="NaN"), "quantity", "non_finite"),
    ("leading-space", body(quantity=" 4"), "quantity", "not_a_decimal_string"),
    ("underscore", body(quantity="4_000"), "quantity", "not_a_decimal_string"),
    ("leading-plus", body(quantity="+4"), "quantity", "not_a_decimal_string"),
    ("arabic-indic-digit", body(quantity="\u0664"), "quantity", "not_a_decimal_string"),
    ("oversized-body", EXAMPLE + b" " * (65537 - len(EXAMPLE)), None, "too_large"),
    # 64,000 brackets: as deep as fits under the default size cap (60k levels: see below).
    ("32k-nested-arrays", HEAD + b'"x": ' + b"[" * 32000 + b"]" * 32000 + b"}", None, "too_deep"),
    ("17-deep", HEAD + b'"x": ' + b"[" * 16 + b"]" * 16 + b"}", "x" + "[0]" * 15, "too_deep"),
    (
        "unknown-field-endpoint",
        body(endpoint="https://evil.example/"),
        "endpoint",
        "extra_forbidden",
    ),
    ("unknown-field-api-key", body(api_key="sk-123"), "api_key", "extra_forbidden"),
    ("unknown-version", body(intent_version="2"), "intent_version", "unknown_version"),
    ("missing-version", body(intent_version=None), "intent_version", "missing"),
    ("action-mismatch", body(action="cancel_order"), "action", "action_mismatch"),
    (
        "cyrillic-lookalike",
        body(instrument="\u0425YZ-PERP"),
        "instrument",
        "string_pattern_mismatch",
    ),
    (
        "fullwidth-lookalike",
        body(instrument="\uff38YZ-PERP"),
        "instrument",
        "string_pattern_mismatch",
    ),
    (
        "zero-width-space",
        body(instrument="XYZ\u200b-PERP"),
        "instrument",
        "string_pattern_mismatch",
    ),
    ("side-upper-case", body(side="BUY"), "side", "literal_error"),
    ("invalid-utf8", body().replace(b"free text", b"free \xff\xfe"), None, "encoding"),
    ("top-level-array", b"[" + EXAMPLE + b"]", None, "not_object"),
    ("huge-int-5000-digits", with_quantity_literal("1" * 5000), "quantity", "huge_number"),
    ("market-with-limit-price", body(order_type="market"), "limit_price", "not_allowed"),
    ("limit-without-limit-price", body(limit_price=None), "limit_price", "missing"),
    ("nul-in-string", body().replace(b"free text", b"free \\u0000"), "rationale", "invalid_string"),
    (
        "lone-surrogate",
        body().replace(b"free text", b"free \\ud800"),
        "rationale",
        "invalid_string",
    ),
    ("syntax-error", EXAMPLE[:-1], None, "syntax"),
    (
        "nested-unknown-field",
        body(proposed_by={"model": "m", "token": "t"}),
        "proposed_by.token",
        "extra_forbidden",
    ),
    (
        "bad-digest-in-list",
        body(tool_output_digests=["sha256:abcdef", "md5:00"]),
        "tool_output_digests[1]",
        "string_pattern_mismatch",
    ),
]


class TestBadInputTable:
    """Bad input (DESIGN.md): every row is refused with the right field and reason."""

    @pytest.mark.parametrize(
        ("raw", "field", "reason"), [pytest.param(r, f, why, id=i) for i, r, f, why in BAD_INPUT]
    )
    def test_refused_with_field_and_reason(
        self, raw: bytes, field: str | None, reason: str
    ) -> None:
        """Bad input: strict parse refuses, naming the field and a stable reason."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", raw)
        assert (caught.value.field, caught.value.reason) == (field, reason), caught.value.message

    def test_the_example_itself_is_accepted(self) -> None:
        """Bad input table sanity: the unmodified example parses, so each row fails for its
        own reason."""
        assert REGISTRY.parse("submit_order", EXAMPLE).effect["quantity"] == "4"

    def test_60k_nested_arrays_no_recursion_error(self) -> None:
        """Bad input, depth cap: 60,000 nested arrays (size cap raised so depth is what trips)
        give too_deep, never a RecursionError."""
        big = Registry([submit_order_class()], max_bytes=1 << 20)
        raw = HEAD + b'"x": ' + b"[" * 60000 + b"]" * 60000 + b"}"
        with pytest.raises(IntentError) as caught:
            big.parse("submit_order", raw)
        assert (caught.value.field, caught.value.reason) == (None, "too_deep")
        with pytest.raises(IntentError):
            load_strict(b"[" * 60000, max_bytes=1 << 20)  # unterminated too: no crash

    def test_sixteen_levels_are_allowed(self) -> None:
        """Bad input, depth cap: 16 levels is the limit, not 15."""
        raw = b'{"x": ' + b"[" * 15 + b"]" * 15 + b"}"
        assert isinstance(load_strict(raw), dict)


class TestMessagesAreActionable:
    """Front doors: errors say exactly which field is wrong so a model can correct itself."""

    def test_unknown_field_lists_allowed_fields(self) -> None:
        """Bad input, unknown fields: the message names the field and what is allowed."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", body(endpoint="x"))
        assert "unknown field 'endpoint'" in caught.value.message
        assert "limit_price" in caught.value.message

    def test_lookalike_names_the_character(self) -> None:
        """Bad input, confusables: the message names the non-ASCII character; never
        normalised."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", body(instrument="\u0425YZ-PERP"))
        assert "U+0425 CYRILLIC CAPITAL LETTER HA" in caught.value.message

    def test_float_tells_to_send_strings(self) -> None:
        """Bad input, floats: the message says to send decimals as strings."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", with_quantity_literal("4.0"))
        assert "string" in caught.value.message

    def test_syntax_error_has_line_and_column(self) -> None:
        """Bad input, not JSON: no path exists, so the message gives line and column."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", b'{\n "a": }')
        assert "line 2 column" in caught.value.message

    def test_to_dict_carries_field_and_reason(self) -> None:
        """Front doors: the error's JSON form carries field and reason."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", body(side="BUY"))
        assert caught.value.to_dict()["field"] == "side"
        assert caught.value.to_dict()["reason"] == "literal_error"


class TestStrictJson:
    """Bad input at the JSON layer (load_strict), independent of any schema."""

    def test_floats_are_kept_as_source_text(self) -> None:
        """Bad input, floats: JSON numbers with a fraction are never turned into float."""
        doc = load_strict(b'{"p": 0.1, "q": 1E400}')
        assert doc == {"p": JsonFloat("0.1"), "q": JsonFloat("1E400")}

    def test_str_input_with_lone_surrogate_is_an_encoding_error(self) -> None:
        """Bad input: text that cannot be UTF-8 is refused before parsing."""
        with pytest.raises(IntentError) as caught:
            load_strict('{"a": "\ud800"}')
        assert caught.value.reason == "encoding"

    def test_size_cap_applies_to_utf8_bytes_of_text(self) -> None:
        """Bad input, size cap: a str is measured in UTF-8 bytes."""
        text = '{"a": "' + "\u00e9" * 40 + '"}'
        with pytest.raises(IntentError) as caught:
            load_strict(text, max_bytes=60)
        assert caught.value.reason == "too_large"

    def test_deep_object_nesting_names_path(self) -> None:
        """Bad input, depth cap: objects count as levels too."""
        raw = '{"a": ' * 17 + "1" + "}" * 17
        with pytest.raises(IntentError) as caught:
            load_strict(raw)
        assert caught.value.reason == "too_deep"
        assert caught.value.field == ".".join(["a"] * 16)

    def test_odd_keys_are_quoted_in_paths(self) -> None:
        """Field paths: a key that is not an identifier is written as a JSON string."""
        with pytest.raises(IntentError) as caught:
            load_strict(b'{"a b": {"k": 1, "k": 2}}')
        assert caught.value.field == '["a b"].k'


class TestPythonMappings:
    """Bad input from a Python caller: a mapping is held to the same rules as raw JSON."""

    def test_float_refused_with_path(self) -> None:
        """Bad input, floats: a Python float is refused by field name."""
        doc = dict(EXAMPLE_ORDER, limit_price=100.0)
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", doc)
        assert (caught.value.field, caught.value.reason) == ("limit_price", "float_not_allowed")

    def test_nan_refused(self) -> None:
        """Bad input, NaN: a Python NaN is refused."""
        doc = dict(EXAMPLE_ORDER, quantity=float("nan"))
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", doc)
        assert caught.value.reason == "non_finite"

    def test_non_string_key_refused(self) -> None:
        """Bad input: object keys must be strings."""
        doc = dict(EXAMPLE_ORDER, proposed_by={1: "m"})
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", doc)
        assert (caught.value.field, caught.value.reason) == ("proposed_by", "invalid_key")

    def test_self_reference_is_too_deep(self) -> None:
        """Bad input, depth cap: a cyclic mapping cannot recurse forever."""
        loop: dict[str, object] = {}
        loop["again"] = loop
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", dict(EXAMPLE_ORDER, proposed_by=loop))
        assert caught.value.reason == "too_deep"

    def test_nul_refused(self) -> None:
        """Bad input: NUL in a string is refused."""
        with pytest.raises(IntentError) as caught:
            REGISTRY.parse("submit_order", dict(EXAMPLE_ORDER, rationale="a\x00b"))
        assert (caught.value.field, caught.value.reason) == ("rationale", "invalid_string")

    def test_tuple_of_digests_accepted(self) -> None:
        """Bad input rules refuse nothing legitimate: a tuple is a JSON array."""
        doc = dict(EXAMPLE_ORDER, tool_output_digests=("sha256:abcdef",))
        intent = REGISTRY.parse("submit_order", doc)
        assert intent.audit["tool_output_digests"] == ["sha256:abcdef"]


class TestRequiredProvenance:
    """A class with ``require_provenance`` refuses an intent that does not say where it came
    from (seed 001, provenance); the field named is the first one missing or empty."""

    REQUIRING = Registry([replace(submit_order_class(), require_provenance=True)])

    def test_the_default_accepts_an_intent_without_provenance(self) -> None:
        parsed = REGISTRY.parse("submit_order", body(proposed_by=None, context_digest=None))
        assert "proposed_by" not in parsed.audit

    def test_both_present_is_accepted(self) -> None:
        parsed = self.REQUIRING.parse("submit_order", body())
        assert parsed.audit["context_digest"] == EXAMPLE_ORDER["context_digest"]

    @pytest.mark.parametrize(
        ("changes", "field", "said"),
        [
            ({"proposed_by": None, "context_digest": None}, "proposed_by", "missing"),
            ({"proposed_by": None}, "proposed_by", "missing"),
            ({"context_digest": None}, "context_digest", "missing"),
            ({"proposed_by": {}}, "proposed_by", "empty"),
            ({"proposed_by": {"model": None, "session": None}}, "proposed_by", "empty"),
        ],
    )
    def test_missing_or_empty_provenance_is_refused_naming_the_field(
        self, changes: dict[str, object], field: str, said: str
    ) -> None:
        raw = json.loads(body(**{k: v for k, v in changes.items() if v is not None}))
        for key in (k for k, v in changes.items() if v is None):
            raw.pop(key)
        with pytest.raises(IntentError) as err:
            self.REQUIRING.parse("submit_order", raw)
        assert (err.value.field, err.value.reason) == (field, "provenance_required")
        assert said in err.value.message

    def test_an_explicit_null_counts_as_missing(self) -> None:
        with pytest.raises(IntentError) as err:
            self.REQUIRING.parse("submit_order", {**EXAMPLE_ORDER, "context_digest": None})
        assert err.value.field == "context_digest"
