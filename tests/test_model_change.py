"""A model change restarts the measurement (issue 39 item 13), on every store.

A class with ``model_window`` that sees a new ``proposed_by`` model or harness version raises
``model-changed`` and goes into shadow mode for a comparison window, so the new model's
disagreement rate is measured before it acts (seed 001's shadow mode and staged authority:
authority is earned by measured agreement). The proposal that brought the model is itself
shadowed: zero venue calls (invariant 6: nothing reaches an adapter but what may be sent).
"""

from __future__ import annotations

import dataclasses

import pytest

from effectgate import State
from effectgate._core.intent import Registry
from effectgate.store.roles import Store
from test_controls import INTENT, World, make_world


def watched(w: World, window: float = 3600.0) -> World:
    """The world with ``submit_order`` measuring each new model for ``window`` seconds."""
    reg = Registry(
        [
            dataclasses.replace(ac, model_window=window) if ac.name == "submit_order" else ac
            for ac in w.gate.registry
        ]
    )
    w.gate.registry = reg
    w.operator.registry = reg
    return w


def by(model: str, harness: str = "h-1") -> dict[str, object]:
    return {**INTENT, "proposed_by": {"model": model, "harness_version": harness}}


def test_a_new_model_alerts_and_opens_a_shadow_window(store: Store) -> None:
    w = watched(make_world(store))
    first = w.gate.submit("submit_order", "a-1", by("model-a"))
    assert first.state is State.SHADOWED and w.adapter.execute_calls == 0
    assert store.controls("submit_order").shadow
    assert [(a.kind, a.detail["model"]) for a in w.alerts] == [("model-changed", "model-a")]
    (window,) = store.model_windows("submit_order")
    assert (window.model, window.harness_version) == ("model-a", "h-1")
    assert window.closes_at == window.opened_at + 3600.0
    assert [a.kind for a in store.list_alerts()] == ["model-changed"]
    # The same model again: nothing new; once an operator ends shadow mode it acts.
    w.operator.set_shadow("submit_order", False, operator="alice")
    assert w.gate.submit("submit_order", "a-2", by("model-a")).state is State.ACKNOWLEDGED
    assert len(w.alerts) == 1


def test_a_new_model_or_harness_version_measures_again(store: Store) -> None:
    w = watched(make_world(store))
    w.gate.submit("submit_order", "a-1", by("model-a"))
    w.operator.set_shadow("submit_order", False, operator="alice")
    w.clock.advance(10)
    assert w.gate.submit("submit_order", "b-1", by("model-b")).state is State.SHADOWED
    w.operator.set_shadow("submit_order", False, operator="alice")
    assert w.gate.submit("submit_order", "b-2", by("model-b", "h-2")).state is State.SHADOWED
    assert [(x.model, x.harness_version) for x in store.model_windows()] == [
        ("model-a", "h-1"),
        ("model-b", "h-1"),
        ("model-b", "h-2"),
    ]
    assert [a.kind for a in w.alerts] == ["model-changed"] * 3


def test_another_process_sees_the_window_once(store_factory) -> None:
    """Two gates on one ledger: the store decides the first sight, so one window, one alert."""
    one = watched(make_world(store_factory()))
    other = watched(make_world(store_factory()))
    one.gate.submit("submit_order", "x-1", by("model-c"))
    assert other.gate.submit("submit_order", "x-2", by("model-c")).state is State.SHADOWED
    assert len(one.alerts) == 1 and other.alerts == []
    assert len(one.store.model_windows()) == 1


def test_the_window_reports_the_new_model_s_disagreement(store: Store) -> None:
    w = watched(make_world(store))
    w.gate.submit("submit_order", "a-1", by("model-a"), correlation_id="t-1")
    w.operator.feed_incumbent("t-1", "submit_order", None, source="desk")  # it did nothing
    ((window, report),) = w.operator.model_windows("submit_order")
    assert window.model == "model-a" and report.compared == 1
    assert report.disagreement_rate == 1.0


def test_a_class_without_a_window_is_untouched(store: Store) -> None:
    w = make_world(store)
    assert w.gate.submit("submit_order", "a-1", by("model-a")).state is State.ACKNOWLEDGED
    assert w.alerts == [] and store.model_windows() == []


@pytest.mark.parametrize(("value", "ok"), [("604800", True), ("-1", False)])
def test_the_window_is_read_from_the_class_config(value: str, ok: bool) -> None:
    from effectgate._service import parse_config
    from effectgate.errors import ConfigError
    from servicekit import config_text

    text = config_text(store_url="sqlite:///x.db").replace(
        "[classes.submit_order]\n", f"[classes.submit_order]\nmodel_window = {value}\n", 1
    )
    if ok:
        assert parse_config(text, "x.toml").registry.get("submit_order").model_window == 604800.0
    else:
        with pytest.raises(ConfigError, match="model_window"):
            parse_config(text, "x.toml")
