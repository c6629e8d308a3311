"""Shadow mode measured: the agent against the incumbent, on every store (issue 11, item 6).

Agreement is "both did the same thing", inaction included; proposals that policy rejected or
that wait for approval mean the agent would not have acted; the rate is reported per model and
harness version (the intent's `proposed_by` audit field) and per time window. Shadow mode sends
nothing either way (invariant 6: nothing reaches an adapter), which every test checks too.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from effectgate import Dispatcher, Gate, LimitPolicy, Operator, PolicySet, ShadowReport, State
from effectgate._core.controls import ShadowPair
from effectgate._execute.shadow import build_report
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ControlError
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import CountingAdapter, ManualClock


def order(qty: str = "4", model: str = "m-1", harness: str = "h-1") -> dict:
    return {
        **EXAMPLE_ORDER,
        "quantity": qty,
        "proposed_by": {"model": model, "harness_version": harness},
    }


def incumbent(qty: str = "4") -> dict:
    return {k: v for k, v in order(qty).items() if k not in ("intent_version", "action")}


class Shadow:
    def __init__(self, store: Store) -> None:
        self.clock = ManualClock(1_000_000.0)
        self.adapter = CountingAdapter(PaperAdapter(PaperVenue(clock=self.clock)))
        registry = default_registry()
        self.gate = Gate(
            store=store,
            registry=registry,
            adapters={"paper": self.adapter},
            policy=PolicySet(
                {"submit_order": LimitPolicy(Decimal("100000"), approve_above=Decimal("5000"))}
            ),
            clock=self.clock,
        )
        self.op = Operator(store=store, registry=registry, clock=self.clock)
        self.op.set_shadow("submit_order", True, operator="alice")

    def propose(self, cid: str, qty: str = "4", **by: str) -> State:
        return self.gate.submit(
            "submit_order", f"op-{cid}", order(qty, **by), correlation_id=cid
        ).state

    def feed(self, cid: str, qty: str | None) -> None:
        self.op.feed_incumbent(
            cid, "submit_order", None if qty is None else incumbent(qty), source="desk"
        )


@pytest.fixture
def shadow(store: Store) -> Shadow:
    return Shadow(store)


class TestAgreement:
    def test_every_combination_of_acting_and_not_acting(self, shadow: Shadow) -> None:
        """Neither acting is agreement; a rejected or unapproved proposal is the agent not
        acting, compared like any other; nothing is sent (invariant 6)."""
        cases = {
            # cid: (agent's quantity or None for no proposal, incumbent's or None, agrees)
            "same": ("4", "4", True),
            "other": ("4", "5", False),
            "agent-only": ("4", None, False),
            "neither": (None, None, True),
            "incumbent-only": (None, "4", False),
            "rejected-both-idle": ("2000", None, True),  # 200000 > max: rejected
            "rejected-incumbent-acts": ("2000", "4", False),
            "awaiting-both-idle": ("60", None, True),  # 6000 > approve_above: waits
            "awaiting-incumbent-acts": ("60", "60", False),
        }
        for cid, (agent, _, _) in cases.items():
            if agent is not None:
                shadow.propose(cid, agent)
        assert shadow.gate.get("op-rejected-both-idle").state is State.REJECTED
        assert shadow.gate.get("op-awaiting-both-idle").state is State.AWAITING_APPROVAL
        shadow.propose("not-fed-yet", "2000")
        for cid, (_, theirs, _) in cases.items():
            shadow.feed(cid, theirs)
        report = shadow.op.shadow_report("submit_order")
        verdicts = {p.correlation_id: True for p in report.agreed} | {
            p.correlation_id: False for p in report.disagreed
        }
        assert verdicts == {cid: agrees for cid, (_, _, agrees) in cases.items()}
        assert [p.correlation_id for p in report.awaiting_incumbent] == ["not-fed-yet"]
        assert report.agreed_inaction == 3
        assert report.disagreement_rate == pytest.approx(5 / 9)
        agents = {c["correlation_id"]: c["agent"] for c in report.to_dict()["cases"]}  # type: ignore[attr-defined]
        assert agents["rejected-incumbent-acts"] == "rejected"
        assert agents["awaiting-incumbent-acts"] == "awaiting_approval"
        assert agents["incumbent-only"] == "no proposal" and agents["other"] == "shadowed"
        assert shadow.adapter.execute_calls == 0

    def test_an_approved_proposal_becomes_what_it_finally_did(self, shadow: Shadow) -> None:
        """A proposal that waited for approval and was then approved and sent (here by the
        standing dispatcher, in shadow mode) counts as the agent acting, under the
        correlation id it was proposed with."""
        assert shadow.propose("t-1", "60") is State.AWAITING_APPROVAL
        row = shadow.gate.get("op-t-1")
        shadow.op.approve("op-t-1", fingerprint=row.fingerprint, approver="bob")
        assert Dispatcher(shadow.gate).run_once().shadowed == 1
        assert shadow.gate.get("op-t-1").state is State.SHADOWED
        shadow.feed("t-1", "60")
        report = shadow.op.shadow_report()
        assert [(p.correlation_id, p.outcome) for p in report.agreed] == [("t-1", "shadowed")]
        assert shadow.adapter.execute_calls == 0

    def test_pairs_compare_by_fingerprint_and_inaction(self) -> None:
        def pair(agent: str | None, theirs: str | None, fed: bool = True) -> ShadowPair:
            request = {"effect": {}} if agent else None
            return ShadowPair("c", "a", None, None, agent, request, theirs, None, fed)

        assert pair("f1", "f1").agrees is True
        assert pair("f1", "f2").agrees is False
        assert pair("f1", None).agrees is False
        assert pair(None, "f1").agrees is False
        assert pair(None, None).agrees is True
        assert pair("f1", "f1", fed=False).agrees is None


class TestGroups:
    def test_rate_per_model_and_harness_version(self, shadow: Shadow) -> None:
        """Reports group by the proposal's audit fields (model, harness version), so the rate
        of each model is measured on its own; decisions never read them."""
        plan = [
            ("a1", "m-1", "h-1", "4", "4"),
            ("a2", "m-1", "h-1", "4", "5"),
            ("b1", "m-2", "h-1", "4", "4"),
            ("b2", "m-2", "h-1", "2000", None),  # rejected, incumbent idle: agreement
            ("c1", "m-2", "h-2", "4", None),
        ]
        for cid, model, harness, qty, theirs in plan:
            shadow.propose(cid, qty, model=model, harness=harness)
            shadow.feed(cid, theirs)
        shadow.feed("idle", None)  # no proposal at all: no model to attribute it to
        groups = {
            (g.model, g.harness_version): (g.agreed, g.disagreed, g.disagreement_rate)
            for g in shadow.op.shadow_report().groups()
        }
        assert groups == {
            (None, None): (1, 0, 0.0),
            ("m-1", "h-1"): (1, 1, 0.5),
            ("m-2", "h-1"): (2, 0, 0.0),
            ("m-2", "h-2"): (0, 1, 1.0),
        }

    def test_windows_and_a_time_range_for_rerunning_after_a_model_change(
        self, shadow: Shadow
    ) -> None:
        """Per time window, and since/until: the same model's rate before and after a change
        (here a new harness version an hour later) is read from one ledger."""
        start = shadow.clock()
        shadow.propose("early-1", "4")
        shadow.feed("early-1", "5")
        shadow.propose("early-2", "4")
        shadow.feed("early-2", "4")
        shadow.clock.advance(3600)
        shadow.propose("late-1", "4", harness="h-2")
        shadow.feed("late-1", "4")
        report = shadow.op.shadow_report(window=3600)
        rows = [(g.harness_version, g.window_start, g.disagreement_rate) for g in report.groups()]
        first = (start // 3600) * 3600
        assert rows == [("h-1", first, 0.5), ("h-2", first + 3600, 0.0)]
        late = shadow.op.shadow_report(since=start + 1800)
        assert [p.correlation_id for p in late.agreed] == ["late-1"] and late.compared == 1
        early = shadow.op.shadow_report(until=start + 1800)
        assert early.compared == 2 and early.disagreement_rate == 0.5
        data = report.to_dict()
        assert data["window"] == 3600 and data["groups"][0]["window_end"] == first + 3600  # type: ignore[index]

    def test_old_report_fields_are_kept(self) -> None:
        data = ShadowReport(None).to_dict()
        for key in ("action", "compared", "agreed", "disagreed", "awaiting_incumbent"):
            assert key in data
        assert data["disagreement_rate"] is None and data["cases"] == [] and data["groups"] == []

    @pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf")])
    def test_a_bad_window_is_refused(self, bad: float) -> None:
        with pytest.raises(ControlError) as exc:
            build_report([], None, window=bad)
        assert exc.value.field == "window"


class TestFrontDoors:
    def test_http_report_by_model_and_window(self, tmp_path) -> None:
        from fastapi.testclient import TestClient

        from effectgate._doors.http.app import create_app
        from effectgate._service import Service, parse_config
        from servicekit import AGENT_A, OPERATOR, ORDER, bearer, config_text

        svc = Service(
            parse_config(config_text(store_url=f"sqlite:///{tmp_path}/l.db")),
            adapters={"venue": PaperAdapter(PaperVenue())},
        )
        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                ops = bearer(OPERATOR)
                assert client.put("/v1/admin/shadow/submit_order", headers=ops).status_code == 200
                for key, qty, model in (("k1", "4", "m-a"), ("k2", "20", "m-b")):  # 2000 > max
                    body = {**ORDER, "quantity": qty, "proposed_by": {"model": model}}
                    client.post(
                        "/v1/actions/submit_order",
                        content=json.dumps(body),
                        headers=bearer(
                            AGENT_A, **{"Idempotency-Key": key, "Content-Type": "application/json"}
                        ),
                    )
                    client.post(
                        "/v1/admin/shadow/incumbent",
                        headers=ops,
                        json={"correlation_id": key, "action": "submit_order", "intent": None},
                    )
                got = client.get("/v1/admin/shadow/report?window=60", headers=ops)
                assert got.status_code == 200, got.text
                report = got.json()
                assert (report["agreed"], report["disagreed"], report["agreed_inaction"]) == (
                    1,
                    1,
                    1,
                )
                by_model = {g["model"]: g["disagreement_rate"] for g in report["groups"]}
                assert by_model == {"m-a": 1.0, "m-b": 0.0}
                assert all(g["window_end"] - g["window_start"] == 60 for g in report["groups"])
                bad = client.get("/v1/admin/shadow/report?window=0", headers=ops)
                assert bad.status_code == 400
        finally:
            svc.close()

    def test_cli_report_json_and_table(self, tmp_path) -> None:
        import os
        import subprocess
        import sys

        from effectgate import SQLiteStore

        url = f"sqlite:///{tmp_path}/l.db"
        store = SQLiteStore(str(tmp_path / "l.db"))
        try:
            shadow = Shadow(store)
            shadow.propose("x", "4")
            shadow.feed("x", None)
        finally:
            store.close()

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "effectgate", "shadow", "report", *args, "--store", url],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "COLUMNS": "200"},
            )

        out = cli("--json", "--window", "60", "--since", "1970-01-01T00:00:00")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["disagreed"] == 1 and data["groups"][0]["model"] == "m-1"
        table = cli()
        assert table.returncode == 0 and "m-1" in table.stdout and "100.0%" in table.stdout
        assert cli("--since", "yesterday").returncode == 2
