"""Action classes and the registry: unsafe definitions are refused at registration, the schema is
closed, and a parsed intent is canonical and stored by value."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

import pytest
from pydantic import ConfigDict

from effectgate._core.intent import (
    AUDIT_FIELDS,
    HORIZON_RETENTION_RATIO,
    ActionClass,
    EffectClass,
    IntentBase,
    Registry,
    Tier,
    tier_rank,
)
from effectgate.errors import IntentError, RegistryError, UnknownActionClass
from effectgate.examples import (
    EXAMPLE_ORDER,
    SubmitOrder,
    cancel_order_class,
    default_registry,
    notional,
    submit_order_class,
)


def order_class(**changes: Any) -> ActionClass:
    kwargs: dict[str, Any] = {
        "name": "submit_order",
        "model": SubmitOrder,
        "adapter": "paper",
        "effect_class": EffectClass.NON_IDEMPOTENT_MUTATION,
        "visibility_horizon": 60.0,
        "key_retention": 86400.0,
    }
    kwargs.update(changes)
    return ActionClass(**kwargs)


class TestRegistrationRefusesUnsafeClasses:
    """DESIGN.md vocabulary: the visibility horizon must be well inside key retention."""

    def test_horizon_not_well_inside_retention(self) -> None:
        """Invariant 4 precondition: the horizon must be <= 25% of the key retention."""
        with pytest.raises(RegistryError, match="well inside"):
            order_class(visibility_horizon=30000.0, key_retention=86400.0)
        with pytest.raises(RegistryError):
            order_class(visibility_horizon=86400.0, key_retention=86400.0)
        edge = order_class(visibility_horizon=86400.0 * HORIZON_RETENTION_RATIO)
        assert edge.visibility_horizon == 21600.0

    @pytest.mark.parametrize(
        "changes",
        [
            {"visibility_horizon": 0},
            {"visibility_horizon": -1},
            {"key_retention": 0},
            {"visibility_horizon": float("nan")},
            {"key_retention": float("inf")},
            {"settlement_window": 0},
        ],
    )
    def test_times_must_be_positive_and_finite(self, changes: dict[str, float]) -> None:
        """Invariant 4 precondition: horizons and windows are finite positive durations."""
        with pytest.raises(RegistryError):
            order_class(**changes)

    @pytest.mark.parametrize(
        "name",
        [
            "",
            "Submit",
            "1order",
            "submit-order",
            "submit order",
            "x" * 65,
            "\u0455ubmit",
            "submit_order\n",
        ],
    )
    def test_bad_names(self, name: str) -> None:
        """Bad input (identifiers): class names are ASCII identifiers."""
        with pytest.raises(RegistryError):
            order_class(name=name)

    def test_duplicate_names(self) -> None:
        """Registry: one class per name, never silently replaced."""
        registry = Registry([submit_order_class()])
        with pytest.raises(RegistryError, match="already registered"):
            registry.register(submit_order_class(adapter="other"))

    @pytest.mark.parametrize("target", ["rationale", "intent_version", "nope"])
    def test_target_field_must_be_an_effect_field(self, target: str) -> None:
        """Invariant 6: the target is named by an effect field, never by audit text."""
        with pytest.raises(RegistryError, match="target_field"):
            order_class(target_field=target)

    def test_model_must_subclass_intent_base_and_forbid_extra(self) -> None:
        """Bad input (unknown fields): a class whose model accepts extras is refused."""

        class Loose(IntentBase):
            model_config = ConfigDict(extra="allow")
            action: Literal["loose"]

        with pytest.raises(RegistryError, match="forbid"):
            order_class(model=Loose)
        with pytest.raises(RegistryError, match="IntentBase"):
            order_class(model=dict)

    def test_effect_fields_must_be_scalars(self) -> None:
        """Invariant 2: effect values are str/int/bool only (no floats in an effect)."""

        class Floaty(IntentBase):
            action: Literal["floaty"]
            amount: float

        with pytest.raises(RegistryError, match="amount"):
            order_class(model=Floaty)


class TestActionClassDescription:
    """DESIGN.md vocabulary: effect fields vs audit fields, decimals, the closed schema."""

    def test_effect_fields_exclude_audit_fields(self) -> None:
        """Invariant 2: audit fields are not effect fields; action is."""
        ac = submit_order_class()
        assert not AUDIT_FIELDS & set(ac.effect_fields)
        assert "intent_version" not in ac.effect_fields
        assert ac.effect_fields == (
            "action",
            "instrument",
            "side",
            "order_type",
            "quantity",
            "limit_price",
            "account",
            "strategy_id",
        )
        assert ac.decimal_fields == ("quantity", "limit_price")

    def test_json_schema_is_closed_and_lists_fields(self) -> None:
        """Bad input (unknown fields): the published schema has additionalProperties false."""
        schema = submit_order_class().json_schema()
        assert schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(SubmitOrder.model_fields)
        assert schema["properties"]["action"]["const"] == "submit_order"
        assert schema["properties"]["intent_version"]["enum"] == ["1"]
        assert schema["properties"]["side"]["enum"] == ["buy", "sell"]
        assert {"intent_version", "action", "quantity"} <= set(schema["required"])
        assert schema["$defs"]["ProposedBy"]["additionalProperties"] is False
        assert schema["properties"]["tool_output_digests"]["maxItems"] == 64
        json.dumps(schema)  # JSON-able, for MCP inputSchema

    def test_defaults(self) -> None:
        ac = cancel_order_class()
        assert ac.effect_class is EffectClass.IDEMPOTENT_MUTATION
        assert ac.tier_floor is Tier.VALIDATE
        assert ac.schema_versions == frozenset({"1"})
        assert tier_rank(Tier.VALIDATE) < tier_rank("approve") < tier_rank(Tier.MULTI_APPROVE)

    def test_value_of_is_notional(self) -> None:
        ac = submit_order_class()
        intent = default_registry().parse("submit_order", EXAMPLE_ORDER)
        assert ac.value_of is not None
        assert ac.value_of(intent.effect) == Decimal("400")
        assert notional({"quantity": "3", "action": "submit_order"}) is None  # market: unknown


class TestRegistryLookup:
    def test_unknown_action_class(self) -> None:
        registry = default_registry()
        with pytest.raises(UnknownActionClass):
            registry.get("transfer_funds")
        with pytest.raises(UnknownActionClass):
            registry.parse("transfer_funds", b"{}")
        assert registry.names() == ["cancel_order", "submit_order"]
        assert "submit_order" in registry
        assert "transfer_funds" not in registry


class TestParse:
    """Invariant 6 and storage by value: the parsed intent is canonical and owns its data."""

    def test_seed_example_parses_to_normalised_effect(self) -> None:
        """Invariant 6: only validated, canonical effect fields are in the effect."""
        intent = default_registry().parse("submit_order", json.dumps(EXAMPLE_ORDER).encode())
        assert intent.action == "submit_order"
        assert intent.version == "1"
        assert dict(intent.effect) == {
            "action": "submit_order",
            "instrument": "XYZ-PERP",
            "side": "buy",
            "order_type": "limit",
            "quantity": "4",
            "limit_price": "100",
            "strategy_id": "st-114",
        }
        assert set(intent.audit) == {"rationale", "context_digest", "proposed_by"}
        assert intent.snapshot == EXAMPLE_ORDER
        assert len(intent.fingerprint) == 64

    def test_snapshot_is_a_copy(self) -> None:
        """Storage by value: mutating the caller's dict after parse changes nothing."""
        doc = json.loads(json.dumps(EXAMPLE_ORDER))
        intent = default_registry().parse("submit_order", doc)
        doc["quantity"] = "400"
        doc["proposed_by"]["model"] = "tampered"
        doc["rationale"] = "tampered"
        assert intent.snapshot["quantity"] == "4"
        assert intent.snapshot["proposed_by"] == EXAMPLE_ORDER["proposed_by"]
        assert intent.audit["rationale"] == EXAMPLE_ORDER["rationale"]
        assert intent.effect["quantity"] == "4"

    def test_market_order(self) -> None:
        """Invariant 6: an absent optional field is omitted from the effect."""
        doc = {k: v for k, v in EXAMPLE_ORDER.items() if k != "limit_price"}
        intent = default_registry().parse("submit_order", dict(doc, order_type="market"))
        assert "limit_price" not in intent.effect

    def test_cancel_order(self) -> None:
        doc = {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": "XYZ-PERP",
            "order_ref": "op-7f3a",
        }
        intent = default_registry().parse("cancel_order", json.dumps(doc))
        assert intent.effect == {
            "action": "cancel_order",
            "instrument": "XYZ-PERP",
            "order_ref": "op-7f3a",
        }

    def test_second_schema_version(self) -> None:
        """Bad input (unknown versions): only the declared versions are accepted."""
        registry = Registry([order_class(schema_versions=frozenset({"1", "2"}))])
        assert registry.parse("submit_order", dict(EXAMPLE_ORDER, intent_version="2"))
        with pytest.raises(IntentError) as caught:
            registry.parse("submit_order", dict(EXAMPLE_ORDER, intent_version=2))
        assert caught.value.reason == "unknown_version"

    def test_int_effect_field_range(self) -> None:
        """Invariant 2: integer effect values must be exact in JCS (|n| < 2**53)."""

        class Sized(IntentBase):
            action: Literal["sized"]
            count: int
            urgent: bool = False

        registry = Registry(
            [
                ActionClass(
                    name="sized",
                    model=Sized,
                    adapter="x",
                    effect_class=EffectClass.READ_ONLY,
                    visibility_horizon=1,
                    key_retention=4,
                )
            ]
        )
        ok = registry.parse("sized", b'{"intent_version":"1","action":"sized","count":3}')
        assert ok.effect == {"action": "sized", "count": 3, "urgent": False}
        with pytest.raises(IntentError) as caught:
            registry.parse("sized", b'{"intent_version":"1","action":"sized","count":2e3}')
        assert caught.value.reason == "float_not_allowed"
        with pytest.raises(IntentError) as caught:
            registry.parse(
                "sized", '{"intent_version":"1","action":"sized","count":' + str(2**60) + "}"
            )
        assert (caught.value.field, caught.value.reason) == ("count", "out_of_range")
        with pytest.raises(IntentError) as caught:
            registry.parse("sized", b'{"intent_version":"1","action":"sized","count":true}')
        assert (caught.value.field, caught.value.reason) == ("count", "int_type")
