"""A model change's comparison window ends, and its measurement decides (issue 39 item 13), on
every store.

A window opened for a new ``proposed_by`` model ends by count or by time; the maintenance pass
then judges the disagreement rate of that model's compared cases: at or under the class's limit
the window passes and shadow mode is lifted (authority stays where it was before the change);
over it the window fails and pages, keeping shadow mode on when the class demotes. A window past
its time without its cases pages as overdue and stays open. Invariant 6 (nothing reaches an
adapter but what may be sent): until a window passes, the new model's proposals are shadowed;
invariant 11 (nothing waits silently): an unjudged or overdue window pages.
"""

from __future__ import annotations

import dataclasses

import pytest

from effectgate import State
from effectgate._core.intent import Registry
from effectgate._core.model_window import WindowEnd
from effectgate._execute.maintenance import check_maintenance
from effectgate.errors import RegistryError
from effectgate.store.roles import Store
from test_controls import INTENT, World, make_world

WINDOW = 3600.0
INCUMBENT = {k: v for k, v in INTENT.items() if k not in ("intent_version", "action")}


def watched(store: Store, end: WindowEnd) -> World:
    """A world whose ``submit_order`` measures each new model for an hour, ending as ``end``."""
    w = make_world(store)
    reg = Registry(
        [
            dataclasses.replace(ac, model_window=WINDOW, model_window_end=end)
            if ac.name == "submit_order"
            else ac
            for ac in w.gate.registry
        ]
    )
    w.gate.registry = reg
    w.operator.registry = reg
    return w


def case(w: World, n: int, *, agree: bool, model: str = "model-a") -> None:
    """One proposal by ``model`` in shadow mode and the incumbent's outcome for it."""
    intent = {**INTENT, "proposed_by": {"model": model, "harness_version": "h-1"}}
    row = w.gate.submit("submit_order", f"{model}-{n}", intent, correlation_id=f"{model}-{n}")
    assert row.state is State.SHADOWED
    w.operator.feed_incumbent(
        f"{model}-{n}", "submit_order", INCUMBENT if agree else None, source="desk"
    )


def settle(w: World) -> list[str]:
    return [a.kind for a in check_maintenance(w.store, w.gate.registry, None, now=w.clock())]


def window(w: World, model: str = "model-a"):
    (found,) = [x for x in w.store.model_windows("submit_order") if x.model == model]
    return found


class TestEndsByCount:
    def test_a_window_within_its_limit_passes_and_lifts_shadow_mode(self, store: Store) -> None:
        """Invariant 6: shadowed until the measurement passes; then the model acts again."""
        w = watched(store, WindowEnd(cases=2, max_disagreement=0.5))
        case(w, 1, agree=True)
        assert settle(w) == [] and window(w).closed_at is None  # one of two cases
        case(w, 2, agree=False)
        assert settle(w) == []  # passed: nothing pages
        closed = window(w)
        assert (closed.outcome, closed.compared, closed.disagreement_rate) == ("passed", 2, 0.5)
        assert not store.controls("submit_order").shadow
        again = {**INTENT, "proposed_by": {"model": "model-a", "harness_version": "h-1"}}
        assert w.gate.submit("submit_order", "after", again).state is State.ACKNOWLEDGED
        (entry,) = [e for e in store.iter_audit() if e.kind == "model_window_closed"]
        assert entry.detail["outcome"] == "passed" and entry.detail["shadow_lifted"] is True

    def test_a_window_over_its_limit_pages_and_demotes(self, store: Store) -> None:
        """Invariant 6: a failed measurement keeps the class in shadow mode (demote)."""
        w = watched(store, WindowEnd(cases=2, max_disagreement=0.1))
        case(w, 1, agree=True)
        case(w, 2, agree=False)
        assert settle(w) == ["model-window-failed"]
        assert window(w).outcome == "demoted" and store.controls("submit_order").shadow
        assert settle(w) == []  # closed once, paged once
        assert [a.kind for a in store.list_alerts()].count("model-window-failed") == 1
        assert w.adapter.execute_calls == 0

    def test_a_class_that_only_pages_lifts_shadow_mode_on_a_failure(self, store: Store) -> None:
        w = watched(store, WindowEnd(cases=1, max_disagreement=0.0, on_fail="alert"))
        case(w, 1, agree=False)
        assert settle(w) == ["model-window-failed"]
        assert window(w).outcome == "failed" and not store.controls("submit_order").shadow

    def test_a_window_past_its_time_without_its_cases_is_overdue(self, store: Store) -> None:
        """Invariant 11: the overdue window pages once, stays open in shadow mode, and ends
        when its cases are in."""
        w = watched(store, WindowEnd(cases=3, max_disagreement=0.5))
        case(w, 1, agree=True)
        w.clock.advance(WINDOW + 1)
        assert settle(w) == ["model-window-overdue"]
        assert settle(w) == []
        assert window(w).closed_at is None and store.controls("submit_order").shadow
        case(w, 2, agree=True)
        case(w, 3, agree=True)  # after closes_at: a window ending by count keeps measuring
        assert settle(w) == []
        assert window(w).outcome == "passed" and not store.controls("submit_order").shadow


class TestEndsByTime:
    def test_the_window_is_judged_at_its_time_not_before(self, store: Store) -> None:
        w = watched(store, WindowEnd(max_disagreement=0.0))
        case(w, 1, agree=True)
        w.clock.advance(WINDOW - 1)
        assert settle(w) == [] and window(w).closed_at is None
        w.clock.advance(1)
        assert settle(w) == [] and window(w).outcome == "passed"
        assert not store.controls("submit_order").shadow

    def test_only_the_window_s_own_model_and_time_count(self, store: Store) -> None:
        """Cases of another model, or after the window's time, are not the new model's."""
        w = watched(store, WindowEnd(max_disagreement=0.0))
        case(w, 1, agree=True)
        w.clock.advance(10)
        case(w, 1, agree=False, model="model-b")  # its own window
        w.clock.advance(WINDOW)
        case(w, 2, agree=False)  # past model-a's time: not measured in it
        settle(w)
        assert window(w).outcome == "passed" and window(w).compared == 1
        assert window(w, "model-b").outcome == "demoted"
        assert store.controls("submit_order").shadow  # model-b's demotion holds it

    def test_unjudged_a_window_ends_measured_and_shadow_stays(self, store: Store) -> None:
        """Invariant 11: without a limit the end pages for an operator's judgement."""
        w = watched(store, WindowEnd())
        case(w, 1, agree=False)
        w.clock.advance(WINDOW)
        assert settle(w) == ["model-window-ended"]
        assert window(w).outcome == "measured" and store.controls("submit_order").shadow

    def test_nothing_compared_by_its_time_is_overdue(self, store: Store) -> None:
        w = watched(store, WindowEnd(max_disagreement=0.2))
        intent = {**INTENT, "proposed_by": {"model": "model-a", "harness_version": "h-1"}}
        w.gate.submit("submit_order", "a-1", intent, correlation_id="a-1")  # never fed
        w.clock.advance(WINDOW)
        assert settle(w) == ["model-window-overdue"]
        assert window(w).closed_at is None


class TestShadowIsLiftedOnlyWhenItIsTheModelChanges:
    def test_another_open_window_keeps_shadow_mode_on(self, store: Store) -> None:
        w = watched(store, WindowEnd(cases=1, max_disagreement=0.0))
        intent = {**INTENT, "proposed_by": {"model": "model-b", "harness_version": "h-1"}}
        w.gate.submit("submit_order", "b-1", intent)  # model-b's window opens, never fed
        case(w, 1, agree=True)
        settle(w)
        assert window(w).outcome == "passed" and store.controls("submit_order").shadow

    def test_an_operator_s_change_since_keeps_shadow_mode_on(self, store: Store) -> None:
        w = watched(store, WindowEnd(cases=1, max_disagreement=0.0))
        case(w, 1, agree=True)
        w.operator.set_shadow("submit_order", True, operator="alice")  # the operator's now
        settle(w)
        assert window(w).outcome == "passed" and store.controls("submit_order").shadow


@pytest.mark.parametrize(
    "end",
    [
        {"cases": 0},
        {"cases": True},
        {"max_disagreement": 1.5},
        {"max_disagreement": -0.1},
        {"on_fail": "kill"},
    ],
)
def test_a_bad_end_is_refused_when_declared(end: dict) -> None:
    with pytest.raises(RegistryError, match="model_window_"):
        WindowEnd(**end)


def test_an_end_needs_a_window() -> None:
    (submit, *_) = list(make_world.__globals__["registry"]())
    with pytest.raises(RegistryError, match="needs model_window"):
        dataclasses.replace(submit, model_window_end=WindowEnd(cases=3))


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ("model_window = 600\nmodel_window_cases = 20\nmodel_window_max_disagreement = 0.05\n"
         'model_window_on_fail = "alert"\n', None),
        ("model_window = 600\nmodel_window_max_disagreement = 2\n", "max_disagreement"),
        ("model_window = 600\nmodel_window_cases = 0\n", "model_window_cases"),
        ('model_window = 600\nmodel_window_on_fail = "kill"\n', "model_window_on_fail"),
        ("model_window_cases = 5\n", "model_window"),
    ],
)  # fmt: skip
def test_the_end_is_read_from_the_class_config(lines: str, error: str | None) -> None:
    from effectgate._service import parse_config
    from effectgate.errors import ConfigError
    from servicekit import config_text

    text = config_text(store_url="sqlite:///x.db").replace(
        "[classes.submit_order]\n", f"[classes.submit_order]\n{lines}", 1
    )
    if error is None:
        ac = parse_config(text, "x.toml").registry.get("submit_order")
        assert ac.model_window_end == WindowEnd(20, 0.05, "alert")
    else:
        with pytest.raises(ConfigError, match=error):
            parse_config(text, "x.toml")


def test_the_cli_lists_how_a_window_ended(tmp_path) -> None:
    from effectgate import SQLiteStore
    from servicekit import run_cli

    path = tmp_path / "ledger.db"
    w = watched(SQLiteStore(str(path)), WindowEnd(cases=1, max_disagreement=0.0))
    case(w, 1, agree=False)
    assert settle(w) == ["model-window-failed"]
    w.store.close()
    out = run_cli(
        "shadow", "windows", "submit_order", env={"EFFECTGATE_STORE": f"sqlite:///{path}"}
    )
    assert out.returncode == 0, out.stderr
    assert "model model-a" in out.stdout and "ended demoted" in out.stdout
