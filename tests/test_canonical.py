"""Invariant 2 and the fingerprint rules: one economic effect, one fingerprint; audit fields and
spelling never change it; a different effect always does."""

from __future__ import annotations

import json
import unicodedata
from decimal import Context, Decimal
from typing import Literal

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from effectgate._core.canonical import (
    MAX_SAFE_INT,
    canonical_decimal,
    canonical_effect,
    fingerprint,
    fingerprint_checked,
    nfc,
)
from effectgate._core.intent import ActionClass, EffectClass, IntentBase, Registry
from effectgate.errors import IntentError
from effectgate.examples import EXAMPLE_ORDER, default_registry

REGISTRY = default_registry()


def fp(**changes: object) -> str:
    return REGISTRY.parse("submit_order", json.dumps(dict(EXAMPLE_ORDER, **changes))).fingerprint


class Note(IntentBase):
    action: Literal["send_note"]
    to: str
    text: str


NOTES = Registry(
    [
        ActionClass(
            name="send_note",
            model=Note,
            adapter="mail",
            effect_class=EffectClass.NON_IDEMPOTENT_MUTATION,
            visibility_horizon=10,
            key_retention=3600,
        )
    ]
)


class TestSeedCase4:
    """Invariant 2 (seed case 4): audit fields and decimal spelling do not change identity."""

    def test_audit_fields_do_not_change_fingerprint(self) -> None:
        """Invariant 2: audit fields never change identity."""
        base = fp()
        assert fp(rationale="reworded entirely") == base
        assert fp(context_digest="sha256:" + "00" * 32) == base
        assert fp(proposed_by={"model": "other-model", "session": "s-9"}) == base
        assert fp(tool_output_digests=["sha256:abcdef"]) == base
        without = {
            k: v
            for k, v in EXAMPLE_ORDER.items()
            if k not in {"rationale", "context_digest", "proposed_by"}
        }
        assert REGISTRY.parse("submit_order", without).fingerprint == base

    @pytest.mark.parametrize("spelling", ["100.00", "100.0", "0100.00", "1E2", "100", "1e+2"])
    def test_decimal_spellings_share_one_fingerprint(self, spelling: str) -> None:
        """Invariant 2: "100.00", "100.0", "0100.00" and "1E2" are one price."""
        assert fp(limit_price=spelling) == fp(limit_price="100")

    def test_reference_fingerprint(self) -> None:
        """Invariant 2: the canonical form documented in canonical.py, byte for byte."""
        effect = {
            "action": "submit_order",
            "instrument": "XYZ-PERP",
            "side": "buy",
            "order_type": "limit",
            "quantity": "4",
            "limit_price": "100",
        }
        assert canonical_effect(effect) == (
            b'{"action":"submit_order","instrument":"XYZ-PERP","limit_price":"100",'
            b'"order_type":"limit","quantity":"4","side":"buy"}'
        )
        assert fingerprint(effect) == (
            "fa43b085bb84bf4c1f0b457bd49a9b07d5166faf779430a348d4e1a0b2ab891f"
        )


class TestFingerprintIdentity:
    """Invariant 2: the fingerprint follows the effect and nothing else."""

    def test_nfc_and_nfd_text_share_one_fingerprint(self) -> None:
        """Invariant 2: text is NFC-normalised before hashing."""
        composed = unicodedata.normalize("NFC", "caf\u00e9 cr\u00e8me")
        decomposed = unicodedata.normalize("NFD", composed)
        assert composed != decomposed

        def note(text: str) -> str:
            doc = {"intent_version": "1", "action": "send_note", "to": "ops", "text": text}
            return NOTES.parse("send_note", json.dumps(doc).encode()).fingerprint

        assert note(composed) == note(decomposed)
        intent = NOTES.parse(
            "send_note",
            {"intent_version": "1", "action": "send_note", "to": "ops", "text": decomposed},
        )
        assert intent.effect["text"] == composed  # the adapter sees what was fingerprinted

    def test_key_order_is_irrelevant(self) -> None:
        """Invariant 2: keys are sorted in the canonical form."""
        reordered = dict(reversed(list(EXAMPLE_ORDER.items())))
        assert REGISTRY.parse("submit_order", json.dumps(reordered)).fingerprint == fp()

    def test_whitespace_is_irrelevant(self) -> None:
        """Invariant 2: the raw bytes' layout plays no part."""
        compact = json.dumps(EXAMPLE_ORDER, separators=(",", ":"))
        assert REGISTRY.parse("submit_order", compact).fingerprint == fp()

    @pytest.mark.parametrize(
        "change",
        [
            {"quantity": "5"},
            {"quantity": "4.0001"},
            {"side": "sell"},
            {"limit_price": "100.01"},
            {"instrument": "ABC-PERP"},
            {"account": "acct-1"},
        ],
    )
    def test_a_different_effect_changes_the_fingerprint(self, change: dict[str, str]) -> None:
        """Invariant 2: a changed payload is detectable, so a reused id can be refused."""
        assert fp(**change) != fp()

    def test_fingerprint_is_full_sha256(self) -> None:
        """Invariant 2: the full 64-hex-digit digest, not a prefix."""
        value = fp()
        assert len(value) == 64
        assert int(value, 16) >= 0


class TestCanonicalDecimal:
    """Invariant 2: decimals are parsed and re-rendered; floats refused."""

    @pytest.mark.parametrize(
        ("raw", "canonical"),
        [
            ("100.00", "100"),
            ("100.0", "100"),
            ("0100.00", "100"),
            ("1E2", "100"),
            ("0.50", "0.5"),
            (".5", "0.5"),
            ("5.", "5"),
            ("1e-30", "0." + "0" * 29 + "1"),
            (
                "1234567.890123456789012345678901234567800",
                "1234567.8901234567890123456789012345678",
            ),
        ],
    )
    def test_renderings(self, raw: str, canonical: str) -> None:
        assert canonical_decimal(raw, field="f") == canonical

    @pytest.mark.parametrize(
        ("raw", "canonical"), [("-0", "0"), ("0.000", "0"), ("-1.50", "-1.5"), ("0E-1000", "0")]
    )
    def test_signed(self, raw: str, canonical: str) -> None:
        assert canonical_decimal(raw, field="f", positive=False) == canonical

    @pytest.mark.parametrize(
        ("raw", "reason"),
        [
            (1.5, "float_not_allowed"),
            (True, "not_a_decimal_string"),
            (4, "not_a_decimal_string"),
            ("sNaN", "non_finite"),
            ("-Infinity", "non_finite"),
            ("1E31", "out_of_range"),
            ("1" * 39, "out_of_range"),
            ("1." + "1" * 38, "out_of_range"),
            ("9" * 101, "out_of_range"),
            ("4 ", "not_a_decimal_string"),
            ("", "not_a_decimal_string"),
            ("\uff14", "not_a_decimal_string"),
            ("4e", "not_a_decimal_string"),
        ],
    )
    def test_refusals(self, raw: object, reason: str) -> None:
        with pytest.raises(IntentError) as caught:
            canonical_decimal(raw, field="price")
        assert (caught.value.field, caught.value.reason) == ("price", reason)


_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_values = st.one_of(st.text(max_size=20), st.integers(-MAX_SAFE_INT, MAX_SAFE_INT), st.booleans())


@st.composite
def _decimals(draw: st.DrawFn) -> Decimal:
    """Finite decimals inside the accepted range, built exactly from digits and exponent."""
    digits = draw(st.integers(1, 10**38 - 1))
    adjusted = draw(st.integers(-30, 30))
    exponent = adjusted - (len(str(digits)) - 1)
    sign = draw(st.integers(0, 1))
    return Decimal((sign, tuple(int(c) for c in str(digits)), exponent))


class TestProperties:
    """Invariant 2, as properties over generated input."""

    @given(st.dictionaries(_keys, _values, max_size=12))
    def test_canonical_effect_is_rfc8785(self, effect: dict[str, str | int | bool]) -> None:
        """Invariant 2: the canonical bytes are exactly RFC 8785 (JCS) of the NFC'd effect."""
        nfc = {
            k: unicodedata.normalize("NFC", v) if isinstance(v, str) else v
            for k, v in effect.items()
        }
        assert canonical_effect(effect) == rfc8785.dumps(nfc)

    @settings(max_examples=300)
    @given(_decimals(), st.sampled_from(["str", "f", "e", "padded"]))
    def test_canonical_decimal_is_idempotent_and_exact(self, value: Decimal, form: str) -> None:
        """Invariant 2: canonicalising keeps the value and is a fixed point."""
        text = {
            "str": str(value),
            "f": format(value, "f"),
            "e": format(value, "e"),
            "padded": format(value, "f").replace("-", "-00")
            if value < 0
            else "00" + format(value, "f"),
        }[form]
        canonical = canonical_decimal(text, field="f", positive=False)
        assert Decimal(canonical) == value
        assert canonical == format(value.normalize(Context(prec=100)), "f")
        assert canonical_decimal(canonical, field="f", positive=False) == canonical
        assert "E" not in canonical and "e" not in canonical
        if value > 0:
            assert canonical_decimal(text, field="f") == canonical


_effect_values = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12),  # controls, DEL, quotes
    st.booleans(),
    st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _effect_values))
def test_the_parser_fingerprint_is_the_canonical_one(effect: dict[str, str | int | bool]) -> None:
    """Invariant 2 rests on the fingerprint: the parser's orjson shortcut gives exactly
    :func:`fingerprint` (over the JCS form) for every effect the parser can build."""
    effect = {k: (nfc(v) if isinstance(v, str) else v) for k, v in effect.items()}
    assert fingerprint_checked(effect) == fingerprint(effect)
