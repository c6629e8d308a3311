"""Valid intents for a user's own action class, generated from its schema (``effectgate verify``).

The class's model (a Python model or one built from ``json_schema``) is read through its JSON
schema: ``Literal``/enum fields, identifiers and patterned strings (Hypothesis
``from_regex``), decimal strings, integers, booleans. Hypothesis's :func:`hypothesis.find`
searches that space for the smallest intent that parses **and** gets the policy decision wanted
(``auto``: allowed at the validate tier; ``approve``: allowed above it), so what ``verify``
drives through the gate is what the user's own policy accepts. Needs ``effectgate[verify]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from effectgate._core.intent import ActionClass, Intent, IntentBase, Registry, Tier
from effectgate._core.policy import PolicySet
from effectgate.errors import EffectgateError

__all__ = ["IntentSource", "Unsupported"]

_BASE_FIELDS = frozenset(IntentBase.model_fields)


class Unsupported(Exception):
    """The class's schema has a field the generator cannot fill (the reason says which)."""


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(defs[ref.removeprefix("#/$defs/")], defs)
    return node


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
    if kind == "integer":
        low = node.get("minimum", node.get("exclusiveMinimum", -(10**6) - 1) + 1)
        high = node.get("maximum", node.get("exclusiveMaximum", 10**6 + 1) - 1)
        return st.integers(min_value=low, max_value=high)
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
        head = {
            "intent_version": st.just(sorted(action_class.schema_versions)[0]),
            "action": st.just(action_class.name),
        }
        self.strategy = st.fixed_dictionaries(
            {**head, **{k: s for k, s in fields.items() if k in required}},
            optional={k: s for k, s in fields.items() if k not in required},
        )

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
        from hypothesis import HealthCheck, find, settings
        from hypothesis.errors import NoSuchExample, Unsatisfiable

        config = settings(
            database=None, max_examples=400, deadline=None, suppress_health_check=list(HealthCheck)
        )
        try:
            return dict(find(self.strategy, want, settings=config))
        except (NoSuchExample, Unsatisfiable):
            return None

    def auto(self) -> dict[str, object] | None:
        """An intent the policy allows automatically (validate tier)."""
        return self.find(lambda raw: self.tier(raw) is Tier.VALIDATE)

    def needs_approval(self) -> dict[str, object] | None:
        """An intent the policy allows only with a human's approval."""
        return self.find(lambda raw: self.tier(raw) not in (None, Tier.VALIDATE))

    def other_than(self, raw: Mapping[str, object]) -> dict[str, object] | None:
        """An automatic intent with another fingerprint than ``raw``'s."""
        first = self.parse(raw)
        if first is None:
            return None

        def differs(other: dict[str, object]) -> bool:
            parsed = self.parse(other)
            return (
                parsed is not None
                and parsed.fingerprint != first.fingerprint
                and self.tier(other) is Tier.VALIDATE
            )

        return self.find(differs)
