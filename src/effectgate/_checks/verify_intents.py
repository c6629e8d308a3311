"""Valid and hostile intents for a user's own action class, generated from its schema
(``effectgate verify``).

The class's model (a Python model or one built from ``json_schema``) is read through its JSON
schema: ``Literal``/enum fields, identifiers and patterned strings (Hypothesis
``from_regex``), decimal strings, integers and JSON numbers (as integers: the intent parser
refuses every float), booleans, arrays and nested objects (recursively; the base's audit
fields are an array and a nested object). Hypothesis's :func:`hypothesis.find` searches that
space for the smallest intent that parses **and** gets the policy decision wanted (``auto``:
allowed at the validate tier; ``approve``: allowed above it), so what ``verify`` drives through
the gate is what the user's own policy accepts. :func:`hostile_values` derives, per field of
the same schema, values it must refuse. Needs ``effectgate[verify]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from effectgate._core.intent import AUDIT_FIELDS, ActionClass, Intent, IntentBase, Registry, Tier
from effectgate._core.policy import PolicySet
from effectgate.errors import EffectgateError

__all__ = ["IntentSource", "Unsupported", "hostile_values"]

_BASE_FIELDS = frozenset(IntentBase.model_fields)


class Unsupported(Exception):
    """The class's schema has a field the generator cannot fill (the reason says which)."""


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(defs[ref.removeprefix("#/$defs/")], defs)
    return node


def _branch(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first non-null branch of an ``anyOf``/``oneOf`` (``X | None``), else None."""
    branches = node.get("anyOf") or node.get("oneOf")
    if not branches:
        return None
    real = [_resolve(b, defs) for b in branches if _resolve(b, defs).get("type") != "null"]
    return real[0] if len(real) == 1 else None


def _strategy(name: str, node: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    from hypothesis import strategies as st

    node = _resolve(node, defs)
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(list(node["enum"]))
    branches = node.get("anyOf") or node.get("oneOf")
    if branches:
        real = [b for b in branches if _resolve(b, defs).get("type") != "null"]
        return st.one_of(*(_strategy(name, b, defs) for b in real))
    kind = node.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        # A JSON number field gets integers: the intent parser refuses every float, anywhere.
        low = node.get("minimum", node.get("exclusiveMinimum", -(10**6) - 1) + 1)
        high = node.get("maximum", node.get("exclusiveMaximum", 10**6 + 1) - 1)
        return st.integers(min_value=int(low), max_value=int(high))
    if kind == "array":
        items = _strategy(f"{name}[]", node.get("items", {}), defs)
        least = int(node.get("minItems", 1))
        return st.lists(items, min_size=least, max_size=max(least, min(3, node.get("maxItems", 3))))
    if kind == "object":
        props = node.get("properties", {})
        need = set(node.get("required", ()))
        inner = {k: _strategy(f"{name}.{k}", v, defs) for k, v in props.items()}
        return st.fixed_dictionaries(
            {k: s for k, s in inner.items() if k in need},
            optional={k: s for k, s in inner.items() if k not in need},
        )
    if kind == "string":
        longest = int(node.get("maxLength", 32))
        shortest = int(node.get("minLength", 1))
        if "decimal" in str(node.get("description", "")):
            # PositiveDecimal / SignedDecimal: small positive values first (find shrinks to them).
            return st.decimals(
                min_value=Decimal("0.01"), max_value=Decimal("1000000"), places=2
            ).map(str)
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            return st.from_regex(pattern, fullmatch=True).filter(
                lambda s: s.isascii() and shortest <= len(s) <= longest
            )
        return st.text(
            alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            min_size=shortest,
            max_size=min(longest, 32),
        )
    raise Unsupported(f"field {name!r}: cannot generate a value for schema {dict(node)!r}")


def _string_hostile(node: Mapping[str, Any]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [("an integer for a string", 7)]
    description = str(node.get("description", ""))
    if "decimal" in description:
        out += [("a JSON number for a decimal", 1.5), ("NaN", "NaN"), ("not a decimal", "1x")]
        if "> 0" in description:
            out += [("zero for a positive decimal", "0"), ("a negative decimal", "-1")]
        return out
    if isinstance(node.get("pattern"), str):
        # A Cyrillic capital A: looks like "A", is not ASCII, so no identifier pattern admits it.
        out.append(("a non-ASCII look-alike", "\u0410bc"))
    if "maxLength" in node:
        out.append(("longer than maxLength", "a" * (int(node["maxLength"]) + 1)))
    return out


def hostile_values(node: Mapping[str, Any], defs: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Values the schema ``node`` refuses, each with what is wrong with it (none is ``null``,
    which an optional field admits)."""
    node = _resolve(node, defs)
    inner = _branch(node, defs)
    if inner is not None:
        return hostile_values(inner, defs)
    if "const" in node:
        return [("another constant", f"{node['const']}-not")]
    if "enum" in node:
        return [("not one of the enum", "-".join(map(str, node["enum"])) + "-not")]
    kind = node.get("type")
    if kind == "boolean":
        return [("a string for a bool", "true"), ("an integer for a bool", 1)]
    if kind in ("integer", "number"):
        out: list[tuple[str, object]] = [
            ("a float for a number", 1.5),
            ("a numeric string for a number", "5"),
            ("a bool for a number", True),
        ]
        if kind == "integer":
            out.append(("an integer beyond 2**53", 2**53))
        if "maximum" in node:
            out.append(("above the maximum", int(node["maximum"]) + 1))
        if "minimum" in node:
            out.append(("below the minimum", int(node["minimum"]) - 1))
        return out
    if kind == "string":
        return _string_hostile(node)
    if kind == "array":
        out = [("not an array", "x"), ("a float in an array", [1.5])]
        bad = hostile_values(node.get("items", {}), defs)
        out += [(f"an item that is {why}", [v]) for why, v in bad[:2]]
        if "maxItems" in node:
            out.append(("more than maxItems", ["x"] * (int(node["maxItems"]) + 1)))
        return out
    if kind == "object":
        out = [("not an object", "x")]
        if node.get("additionalProperties") is False:
            out.append(("an object with an unknown key", {"not_a_field": "x"}))
        for key, sub in node.get("properties", {}).items():
            out += [(f"{key} {why}", {key: v}) for why, v in hostile_values(sub, defs)[:2]]
        return out
    return []


class IntentSource:
    """Intents of ``action_class`` that parse, searched for the policy decision wanted."""

    def __init__(self, registry: Registry, action_class: ActionClass, policy: PolicySet) -> None:
        from hypothesis import strategies as st

        self.registry, self.ac, self.policy = registry, action_class, policy
        schema = action_class.model.model_json_schema()
        defs = schema.get("$defs", {})
        required = set(schema.get("required", ()))
        fields = {
            k: _strategy(k, v, defs)
            for k, v in schema.get("properties", {}).items()
            if k not in _BASE_FIELDS
        }
        pol = policy.get(action_class.name)
        targets = getattr(pol, "allowed_targets", None)
        if action_class.target_field in fields and targets:
            # The policy names the only targets it allows: draw from those.
            fields[action_class.target_field] = st.sampled_from(sorted(targets))
        self.properties: Mapping[str, Any] = schema.get("properties", {})
        self.defs, self.required = defs, required
        head = {
            "intent_version": st.just(sorted(action_class.schema_versions)[0]),
            "action": st.just(action_class.name),
        }
        self.strategy = st.fixed_dictionaries(
            {**head, **{k: s for k, s in fields.items() if k in required}},
            optional={k: s for k, s in fields.items() if k not in required},
        )

    def audit_fields(self) -> dict[str, object]:
        """Valid values for every audit field of the base (free text, a digest, the nested
        ``proposed_by`` object, the ``tool_output_digests`` array): they never change identity."""
        from hypothesis import strategies as st

        fields = {
            k: _strategy(k, v, self.defs) for k, v in self.properties.items() if k in AUDIT_FIELDS
        }
        return self.find_in(st.fixed_dictionaries(fields), lambda _: True) or {}

    def hostile(self, raw: Mapping[str, object]) -> list[tuple[str, dict[str, object]]]:
        """``raw`` with one field made invalid, for every field of the schema (effect and audit
        fields, nested objects and arrays), and with each required field left out; each with
        what is wrong with it. Every one must be refused before anything is written."""
        out: list[tuple[str, dict[str, object]]] = []
        for key, node in self.properties.items():
            if key in ("intent_version", "action"):
                continue
            for why, value in hostile_values(node, self.defs):
                out.append((f"{key}: {why}", {**raw, key: value}))
        for key in sorted(self.required - {"intent_version", "action"}):
            out.append((f"{key}: missing", {k: v for k, v in raw.items() if k != key}))
        return out

    def parse(self, raw: Mapping[str, object]) -> Intent | None:
        try:
            return self.registry.parse(self.ac.name, raw)
        except EffectgateError:
            return None

    def tier(self, raw: Mapping[str, object]) -> Tier | None:
        """The tier the policy allows ``raw`` at; None when it does not parse or is refused."""
        intent = self.parse(raw)
        if intent is None:
            return None
        decision = self.policy.decide(self.ac, intent)
        return decision.tier if decision.allowed else None

    def find(self, want: Callable[[dict[str, object]], bool]) -> dict[str, object] | None:
        """The smallest generated intent for which ``want`` holds; None if none was found."""
        return self.find_in(self.strategy, want)

    @staticmethod
    def find_in(strategy: Any, want: Callable[[Any], bool]) -> dict[str, object] | None:
        from hypothesis import HealthCheck, find, settings
        from hypothesis.errors import NoSuchExample, Unsatisfiable

        config = settings(
            database=None, max_examples=400, deadline=None, suppress_health_check=list(HealthCheck)
        )
        try:
            return dict(find(strategy, want, settings=config))
        except (NoSuchExample, Unsatisfiable):
            return None

    def auto(self) -> dict[str, object] | None:
        """An intent the policy allows automatically (validate tier)."""
        return self.find(lambda raw: self.tier(raw) is Tier.VALIDATE)

    def needs_approval(self) -> dict[str, object] | None:
        """An intent the policy allows only with a human's approval."""
        return self.find(lambda raw: self.tier(raw) not in (None, Tier.VALIDATE))

    def allowed(self) -> dict[str, object] | None:
        """An intent the policy allows at any tier (with approval, where the floor asks)."""
        return self.find(lambda raw: self.tier(raw) is not None)

    def other_than(
        self, raw: Mapping[str, object], *, auto: bool = True
    ) -> dict[str, object] | None:
        """An intent with another fingerprint than ``raw``'s that the policy allows
        (``auto``: automatically, else at any tier)."""
        first = self.parse(raw)
        if first is None:
            return None

        def differs(other: dict[str, object]) -> bool:
            parsed = self.parse(other)
            return (
                parsed is not None
                and parsed.fingerprint != first.fingerprint
                and (self.tier(other) is Tier.VALIDATE if auto else self.tier(other) is not None)
            )

        return self.find(differs)
