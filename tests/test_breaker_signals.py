"""What the breaker's repeat and new-target signals watch (issue 39 items 9 and 10).

Invariant 7 (an open breaker stops every new dispatch of its class): the breaker only helps if
its signals see the anomaly. A burst of near-identical intents (4, 4.01, ... 4.04) must count as
repeats once the class has a repeat key; a stream of new accounts on a known instrument must
count as new targets once the class watches the account field.
"""

from __future__ import annotations

import dataclasses
import sys
from decimal import Decimal

import pytest

from effectgate import (
    ActionClass,
    BreakerConfig,
    Gate,
    LimitPolicy,
    PolicySet,
    Registry,
    RepeatKey,
    State,
)
from effectgate._core.signals import normalise_text
from effectgate._service import parse_config
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, RegistryError
from effectgate.examples import EXAMPLE_ORDER, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock
from servicekit import config_text

GOOD = config_text(store_url="sqlite:///:memory:")

BURST = ["4", "4.01", "4.02", "4.03", "4.04"]


def submit_class(**extra: object) -> ActionClass:
    """The reference ``submit_order`` class with ``extra`` fields (validated again)."""
    return dataclasses.replace(submit_order_class(), **extra)  # type: ignore[arg-type]


def gate(store: Store, ac: ActionClass, **breaker: object) -> tuple[Gate, CountingAdapter]:
    clock = ManualClock()
    adapter = CountingAdapter(PaperAdapter(PaperVenue(clock=clock)))
    g = Gate(
        store=store,
        registry=Registry([ac]),
        adapters={"paper": adapter},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
        clock=clock,
        breakers={"submit_order": BreakerConfig(window=60, **breaker)},  # type: ignore[arg-type]
        alerts=lambda _alert: None,
    )
    return g, adapter


def order(**fields: object) -> dict[str, object]:
    return {**EXAMPLE_ORDER, **fields}


class TestRepeatKey:
    """Item 9: repeats counted by a per-class similarity key."""

    @pytest.mark.parametrize("keyed", [False, True], ids=["fingerprint", "repeat-key"])
    def test_near_identical_burst_trips_only_with_the_key(self, store: Store, keyed: bool) -> None:
        """Invariant 7: five ids for quantities 4..4.04 trip max_repeats=3 with a 0.1 bucket on
        quantity (from the fourth on, undispatched); without the key they are five effects."""
        key = RepeatKey(buckets={"quantity": "0.1"}) if keyed else None
        g, adapter = gate(store, submit_class(repeat_key=key), max_repeats=3)
        rows = [g.submit("submit_order", f"op-{i}", order(quantity=q)) for i, q in enumerate(BURST)]
        ctl = store.controls("submit_order")
        # The key feeds the breaker only: each row keeps its own exact fingerprint.
        assert len({r.fingerprint for r in rows}) == 5
        if not keyed:
            assert not ctl.breaker_open, ctl.breaker_reason
            assert [r.state for r in rows] == [State.ACKNOWLEDGED] * 5
            assert adapter.execute_calls == 5
            return
        assert ctl.breaker_open and "repeats: near-identical" in (ctl.breaker_reason or "")
        # The fourth id crosses 3 and is held in the transaction that trips; so is the fifth.
        assert adapter.execute_calls == 3
        assert all(r.state is State.VALIDATED for r in rows[3:])
        assert "breaker open" in (rows[-1].detail or "")

    def test_other_fields_stay_exact(self, store: Store) -> None:
        """Near-identical means the chosen fields only: another instrument is another effect."""
        g, _ = gate(
            store, submit_class(repeat_key=RepeatKey(buckets={"quantity": "0.1"})), max_repeats=3
        )
        for i, (q, inst) in enumerate(zip(BURST, ["AAA", "BBB", "AAA", "BBB", "AAA"], strict=True)):
            g.submit("submit_order", f"op-{i}", order(quantity=q, instrument=inst))
        assert not store.controls("submit_order").breaker_open

    def test_normalised_text_field_groups_case_variants(self, store: Store) -> None:
        """Invariant 7: strategy tags that differ only in case count as one effect."""
        key = RepeatKey(normalise=("strategy_id",))
        g, _ = gate(store, submit_class(repeat_key=key), max_repeats=2)
        for i, tag in enumerate(["alpha-1", "ALPHA-1", "Alpha-1"]):
            g.submit("submit_order", f"op-{i}", order(strategy_id=tag))
        ctl = store.controls("submit_order")
        assert ctl.breaker_open and "repeats" in (ctl.breaker_reason or "")

    def test_key_values(self) -> None:
        key = RepeatKey(buckets={"quantity": Decimal("0.1")}, normalise=("strategy_id",))
        base = {"action": "submit_order", "instrument": "XYZ", "quantity": "4"}
        assert key.of(base) == key.of({**base, "quantity": "4.09"})
        assert key.of(base) != key.of({**base, "quantity": "4.1"})  # bucket edges are hard
        assert key.of(base) != key.of({**base, "quantity": "3.99"})
        assert key.of(base) != key.of({**base, "instrument": "XYZW"})
        assert key.of({**base, "strategy_id": "a  b"}) == key.of({**base, "strategy_id": "A B"})
        assert normalise_text(" \uff21lpha\t\n  BETA ") == "alpha beta"  # fullwidth A, NFKC

    @pytest.mark.parametrize(
        ("kwargs", "needle"),
        [
            ({"buckets": {"quantity": "lots"}}, "buckets.quantity: 'lots' is not a decimal"),
            ({"buckets": {"quantity": "0"}}, "must be a finite decimal > 0"),
            ({"buckets": {"quantity": "-0.5"}}, "must be a finite decimal > 0"),
            ({"buckets": {"quantity": "NaN"}}, "must be a finite decimal > 0"),
            ({"buckets": {"quantity": 0.1}}, "must be a decimal string"),
            ({"buckets": {"quantity": True}}, "must be a decimal string"),
            ({"buckets": ["quantity"]}, "buckets: must map"),
            ({"normalise": ("a", "a")}, "names a field twice"),
            ({"normalise": (1,)}, "must be a list of effect field names"),
            ({"buckets": {"q": "1"}, "normalise": ("q",)}, "both bucketed and normalised"),
            ({}, "at least one bucketed or normalised field"),
        ],
    )
    def test_bad_key_is_a_config_error(self, kwargs: dict[str, object], needle: str) -> None:
        with pytest.raises(ConfigError) as info:
            RepeatKey(**kwargs)  # type: ignore[arg-type]
        assert needle in info.value.message, info.value.message

    @pytest.mark.parametrize(
        ("key", "needle"),
        [
            (RepeatKey(buckets={"qty": "1"}), "repeat_key names 'qty', not an effect field"),
            (RepeatKey(buckets={"instrument": "1"}), "not a decimal or integer field"),
            (RepeatKey(normalise=("quantity",)), "normalises 'quantity', which is not a text"),
            (RepeatKey(normalise=("action",)), "names 'action', not an effect field"),
        ],
    )
    def test_key_must_fit_the_schema(self, key: RepeatKey, needle: str) -> None:
        with pytest.raises(RegistryError) as info:
            submit_class(repeat_key=key)
        assert needle in info.value.message, info.value.message


class TestWatchedTargets:
    """Item 10: the new-target signal watches a list of fields."""

    ACCOUNTS = ["ACC-1", "ACC-2", "ACC-3", "ACC-4"]

    @pytest.mark.parametrize("watched", [(), ("instrument", "account")], ids=["target", "list"])
    def test_new_accounts_on_a_known_instrument_trip_only_when_watched(
        self, store: Store, watched: tuple[str, ...]
    ) -> None:
        """Invariant 7: a new value in any watched field counts (once per proposal)."""
        g, adapter = gate(store, submit_class(new_target_fields=watched), max_new_targets=2)
        rows = [
            g.submit("submit_order", f"op-{i}", order(account=acc))
            for i, acc in enumerate(self.ACCOUNTS)
        ]
        ctl = store.controls("submit_order")
        if not watched:
            assert not ctl.breaker_open, ctl.breaker_reason
            assert adapter.execute_calls == 4
            return
        # op-0 brings a new instrument and a new account (one proposal), op-1 and op-2 new
        # accounts: 3 > 2 trips at op-2; op-3 is held.
        assert ctl.breaker_open
        assert "3 proposals with never-seen targets" in (ctl.breaker_reason or "")
        assert "account 'ACC-3'" in (ctl.breaker_reason or "")
        assert adapter.execute_calls == 2 and rows[-1].state is State.VALIDATED

    def test_single_field_form_and_the_targets_known_before(self, store_factory) -> None:
        """``new_target_fields="account"`` is the list ``("account",)``; instruments seen while
        the class watched only its target_field stay known after it watches more."""
        assert submit_class(new_target_fields="account").watched_fields == ("account",)
        assert submit_class().watched_fields == ("instrument",)
        store = store_factory()
        before, _ = gate(store, submit_class(), max_new_targets=5)
        for i, inst in enumerate(["AAA", "BBB", "CCC"]):
            before.submit("submit_order", f"b-{i}", order(instrument=inst))
        after, _ = gate(
            store_factory(),
            submit_class(new_target_fields=["instrument", "account"]),
            max_new_targets=3,
        )
        # The window holds the three new instruments already: a fourth new value trips it.
        after.submit("submit_order", "a-0", order(instrument="BBB"))
        assert not store.controls("submit_order").breaker_open
        after.submit("submit_order", "a-1", order(instrument="BBB", account="ACC-9"))
        ctl = store.controls("submit_order")
        assert ctl.breaker_open and "account 'ACC-9'" in (ctl.breaker_reason or "")

    @pytest.mark.parametrize(
        ("fields", "needle"),
        [
            (("venue",), "new_target_fields names 'venue', not an effect field"),
            (("account", "account"), "names a field twice"),
            ((3,), "must be a list of effect field names"),
            (("action",), "names 'action'"),
        ],
    )
    def test_bad_fields_are_refused(self, fields: object, needle: str) -> None:
        with pytest.raises(RegistryError) as info:
            submit_class(new_target_fields=fields)
        assert needle in info.value.message, info.value.message


class TestServiceConfig:
    """``[classes.NAME]`` in the service config: the key and the watched fields, strictly."""

    KEYED = (
        'target_field = "instrument"\n'
        'new_target_fields = ["instrument", "account"]\n'
        "@@[classes.submit_order.repeat_key]\n"
        'buckets = { quantity = "0.1" }\n'
        'normalise = ["strategy_id"]\n'
    )

    def config(self, replacement: str) -> str:
        """GOOD with the class's target_field line replaced; after ``@@``: appended tables."""
        lines, _, tables = replacement.partition("@@")
        return GOOD.replace('target_field = "instrument"\n', lines, 1) + "\n" + tables

    def test_key_and_fields_reach_the_class(self) -> None:
        ac = parse_config(self.config(self.KEYED), "svc.toml").registry.get("submit_order")
        assert ac.repeat_key is not None
        assert ac.repeat_key.bucket_sizes == {"quantity": Decimal("0.1")}
        assert ac.repeat_key.normalise == ("strategy_id",)
        assert ac.watched_fields == ("instrument", "account")
        plain = parse_config(GOOD, "svc.toml").registry.get("submit_order")
        assert plain.repeat_key is None and plain.watched_fields == ("instrument",)

    def test_single_field_form(self) -> None:
        text = self.config('target_field = "instrument"\nnew_target_fields = "account"\n')
        ac = parse_config(text, "svc.toml").registry.get("submit_order")
        assert ac.watched_fields == ("account",)

    @pytest.mark.parametrize(
        ("old", "new", "needles"),
        [
            ('"0.1"', '"lots"', ("repeat_key.buckets.quantity", "'lots' is not a decimal")),
            ('"0.1"', '"0"', ("repeat_key.buckets.quantity", "finite decimal > 0")),
            ('"0.1"', '"-1"', ("repeat_key.buckets.quantity", "finite decimal > 0")),
            ('"0.1"', "0.1", ("repeat_key.buckets.quantity", "must be a decimal string")),
            ("quantity =", "qty =", ("repeat_key", "names 'qty', not an effect field")),
            ("quantity =", "instrument =", ("repeat_key", "not a decimal or integer field")),
            ('["strategy_id"]', '["limit_price"]', ("repeat_key", "not a text field")),
            ('["strategy_id"]', '"strategy_id"', ("repeat_key.normalise", "list of strings")),
            ("normalise =", "normalize =", ("repeat_key.normalize", "unknown key")),
            ("buckets = {", "buckets = 3\nx = {", ("repeat_key.buckets", "must be a table")),
            ('"account"]', '"venue"]', ("new_target_fields", "'venue', not an effect field")),
            (
                '["instrument", "account"]',
                "[]",
                ("new_target_fields", "a field name or a non-empty list"),
            ),
            ('["instrument", "account"]', "7", ("new_target_fields", "a field name or")),
        ],
    )
    def test_bad_config_names_key_and_line(
        self, old: str, new: str, needles: tuple[str, ...]
    ) -> None:
        text = self.config(self.KEYED.replace(old, new, 1))
        with pytest.raises(ConfigError) as info:
            parse_config(text, "svc.toml")
        message = info.value.message
        assert message.startswith("svc.toml:") and message.split(":")[1].strip().isdigit()
        for needle in needles:
            assert needle in message, message

    def test_empty_key_table_is_refused(self) -> None:
        text = self.config('target_field = "instrument"\n@@[classes.submit_order.repeat_key]\n')
        with pytest.raises(ConfigError) as info:
            parse_config(text, "svc.toml")
        assert "at least one bucketed or normalised field" in info.value.message

    def test_new_target_breaker_accepts_a_class_watching_fields_without_target_field(self) -> None:
        text = self.config('new_target_fields = ["account"]\n')
        cfg = parse_config(text + "\n[controls.submit_order]\nmax_new_targets = 2\n", "svc.toml")
        assert cfg.breakers["submit_order"].max_new_targets == 2
        with pytest.raises(ConfigError) as info:
            parse_config(GOOD + "\n[controls.cancel_order]\nmax_new_targets = 2\n", "svc.toml")
        assert "no target_field or new_target_fields" in info.value.message


class TestGatewayConfig:
    """``[tools.NAME]`` of the MCP gateway reads the same two keys (a retry under a minted id
    with jittered arguments is the gateway's typical repeat)."""

    SCHEMA: dict[str, object] = {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z0-9-]{1,32}$"},
            "account": {"type": "string", "pattern": "^[a-z0-9-]{1,32}$"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
            "note": {"type": "string", "maxLength": 200},
        },
        "required": ["sku", "quantity"],
    }

    def bound(self, key_table: str) -> ActionClass:
        from mcp import types

        from effectgate._doors.gateway._config import bind, parse_gateway, schema_digest

        text = f"""
[store]
url = "sqlite:///:memory:"
[upstreams.shop]
command = "{sys.executable}"
[tools.send]
upstream = "shop"
schema_sha256 = "{schema_digest(self.SCHEMA)}"
effect_class = "non_idempotent_mutation"
visibility_horizon = 5
key_retention = 86400
new_target_fields = ["sku", "account"]
[tools.send.venue]
honours_key = "false"
read_view = "none"
[tools.send.repeat_key]
{key_table}
[policies.send]
"""
        cfg = parse_gateway(text, "gw.toml")
        listing = {"shop": [types.Tool(name="send", inputSchema=self.SCHEMA)]}
        return bind(cfg, listing).service.registry.get("send")

    def test_tool_gets_the_key_and_the_fields(self) -> None:
        ac = self.bound('buckets = { quantity = "5" }\nnormalise = ["note"]')
        assert ac.watched_fields == ("sku", "account")
        assert ac.repeat_key is not None
        assert ac.repeat_key.bucket_sizes == {"quantity": Decimal(5)}  # an integer field
        effect = {"action": "send", "sku": "A-1", "quantity": 6, "note": "Hi  there"}
        assert ac.repeat_key.of(effect) == ac.repeat_key.of({**effect, "quantity": 9})
        assert ac.repeat_key.of(effect) == ac.repeat_key.of({**effect, "note": "hi there"})

    def test_bad_bucket_names_key_and_line(self) -> None:
        with pytest.raises(ConfigError, match=r"gw.toml:\d+: tools.send.repeat_key.buckets.q"):
            self.bound('buckets = { quantity = "-5" }')
