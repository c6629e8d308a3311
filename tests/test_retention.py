"""Retention with legal holds (issue 20): prune removes terminal history only from the start of
each audit lane, only after anchoring, never across a hold or a live row, and the chain still
verifies from the checkpoint (invariant 8). On both stores."""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from effectgate import Gate, LimitPolicy, PolicySet, State
from effectgate._evidence.anchor import FileAnchor, verify_against_anchors
from effectgate._evidence.audit import verify_store
from effectgate._execute.retention import min_ages, prune
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, ControlError, OperationNotFound
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import run_cli
from test_audit_chain import sql

N = 40


def settled(store: Store, *, uncertain: tuple[int, ...] = ()) -> tuple[Gate, ManualClock]:
    clock = ManualClock()
    venue = PaperVenue()
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(venue)},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
        clock=clock,
    )
    for i in range(N):
        if i in uncertain:
            venue.fail_next(1, after_apply=False)
        gate.submit("submit_order", f"op-{i}", {**EXAMPLE_ORDER, "quantity": "1"})
        clock.advance(1)
    clock.advance(max(min_ages(gate.registry).values()) + 60)
    return gate, clock


def rows(store: Store) -> set[str]:
    return {
        e.operation_id
        for e in store.audit_entries(limit=100_000)
        if e.operation_id is not None and store.get("default", e.operation_id) is not None
    }


def run_prune(store: Store, gate: Gate, clock: ManualClock, tmp_path: Path, before: float):
    return prune(
        store,
        gate.registry,
        [FileAnchor(tmp_path / "anchors.jsonl")],
        before=before,
        by="alice",
        clock=clock,
    )


class TestPrune:
    """Invariant 8 after a prune: the chain verifies from each lane's checkpoint."""

    def test_prunes_from_the_start_and_still_verifies(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store)
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        assert report.operations > 0 and report.entries > 0
        left = rows(store)
        assert len(left) == N - report.operations
        # Only whole operations go, oldest first in each lane; the rest keep their full trail.
        for op_id in left:
            trail = store.audit_entries(scope="default", operation_id=op_id)
            assert trail[0].kind == "transition" and "proposed" in trail[0].detail_text
        assert set(store.audit_starts()) == set(report.cuts)
        pruned = [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_pruned"]
        assert pruned and pruned[-1].detail["by"] == "alice"
        # The anchors written by the prune verify too.
        checked, _ = verify_against_anchors(store, [FileAnchor(tmp_path / "anchors.jsonl")])
        assert checked.ok, checked.findings

    def test_nothing_settled_after_the_cut_off_goes(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store)
        report, after = run_prune(store, gate, clock, tmp_path, before=0.0)
        assert after.ok and report.operations == 0 and len(rows(store)) == N

    def test_a_tampered_chain_is_not_pruned(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store)
        first = store.audit_entries(limit=1)[0]
        sql(store, "UPDATE audit_log SET detail = ? WHERE seq = ?", '{"x":1}', first.seq)
        with pytest.raises(ConfigError, match="does not verify"):
            run_prune(store, gate, clock, tmp_path, clock())
        assert len(rows(store)) == N

    def test_no_anchor_no_prune(self, store: Store) -> None:
        gate, clock = settled(store)
        with pytest.raises(ConfigError, match="anchor"):
            prune(store, gate.registry, [], before=clock(), by="alice", clock=clock)

    def test_a_checkpoint_row_moved_to_hide_a_deletion_is_caught(
        self, store: Store, tmp_path: Path
    ) -> None:
        gate, clock = settled(store)
        report, _ = run_prune(store, gate, clock, tmp_path, clock())
        lane = next(iter(report.cuts))
        sql(store, "UPDATE audit_checkpoints SET hash = ? WHERE lane = ?", "0" * 64, lane)
        assert not verify_store(store).ok


class TestNeverPruned:
    """Holds, non-terminal rows: the prefix stops there, whatever comes after."""

    def test_never_across_a_hold(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store)
        hold = store.place_hold("default", "op-0", by="alice", reason="matter 12", now=clock())
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok and "op-0" in rows(store)
        assert any("legal hold" in why for why in report.stopped.values())
        lane_of_op0 = store.audit_entries(scope="default", operation_id="op-0")[0].lane
        assert lane_of_op0 not in report.cuts  # op-0 is the first of its lane: nothing before
        store.release_hold(hold.hold_id, by="alice", reason="matter closed", now=clock())
        run_prune(store, gate, clock, tmp_path, clock())
        assert "op-0" not in rows(store)

    def test_a_scope_hold_stops_everything(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store)
        store.place_hold("default", None, by="alice", reason="litigation", now=clock())
        report, _ = run_prune(store, gate, clock, tmp_path, clock())
        assert report.operations == 0 and len(rows(store)) == N

    def test_never_a_non_terminal_row(self, store: Store, tmp_path: Path) -> None:
        gate, clock = settled(store, uncertain=(0,))
        assert store.get("default", "op-0").state is State.SUBMITTED  # type: ignore[union-attr]
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok and "op-0" in rows(store)
        assert any("not terminal" in why for why in report.stopped.values())

    def test_holds_are_audited_and_listed(self, store: Store) -> None:
        hold = store.place_hold("default", None, by="alice", reason="audit 2026", now=5.0)
        assert [h.hold_id for h in store.list_holds()] == [hold.hold_id]
        store.release_hold(hold.hold_id, by="bob", reason="done", now=6.0)
        assert store.list_holds() == []
        (released,) = store.list_holds(active_only=False)
        assert released.released_by == "bob"
        kinds = [e.kind for e in store.audit_entries(limit=1000)]
        assert kinds[-2:] == ["legal_hold_placed", "legal_hold_released"]
        with pytest.raises(OperationNotFound):
            store.release_hold(hold.hold_id, by="bob", reason="again", now=7.0)
        with pytest.raises(ControlError):
            store.place_hold("default", None, by="system:x", reason="r", now=1.0)


class TestRetentionCLI:
    def test_hold_and_prune(self, tmp_path: Path) -> None:
        from effectgate.store import SQLiteStore

        path = tmp_path / "ledger.db"
        store = SQLiteStore(str(path))
        try:
            settled(store)
        finally:
            store.close()
        url = f"sqlite:///{path}"

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args)

        placed = cli("audit", "hold", "place", "--store", url, "--reason", "matter 9")
        assert placed.returncode == 0, placed.stderr
        listed = json.loads(cli("audit", "hold", "list", "--store", url, "--json").stdout)
        (hold,) = listed["holds"]
        anchors = str(tmp_path / "a.jsonl")
        args = ("audit", "prune", "--store", url, "--before", "2999-01-01", "--file", anchors)
        refused = cli(*args)
        assert refused.returncode == 2 and "future" in refused.stderr
        args = ("audit", "prune", "--store", url, "--before", "1970-02-01", "--file", anchors)
        held = json.loads(cli(*args, "--json").stdout)
        assert held["operations"] == 0
        released = cli(
            "audit", "hold", "release", hold["hold_id"], "--store", url, "--reason", "over"
        )
        assert released.returncode == 0, released.stderr
        done = cli(*args, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["operations"] > 0
        assert cli("audit", "verify", "--store", url).returncode == 0


class TestRunBoundOperations:
    """Invariant 13's journals stay whole: an operation bound to an unsealed run is never
    pruned; once the run is sealed it is history like any other."""

    def test_an_unsealed_runs_operation_stays(self, store: Store, tmp_path: Path) -> None:
        from effectgate.store._retention import prunable_operation
        from runkit import RUN, SCOPE, tool_call

        clock = ManualClock()
        call = tool_call("t-1")
        store.record_run_call(SCOPE, call, now=clock(), actor="harness-1")
        gate = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
            clock=clock,
        )
        gate.submit("submit_order", "op-run", dict(EXAMPLE_ORDER), run_call=call.ref)
        clock.advance(max(min_ages(gate.registry).values()) + 60)

        def verdict() -> str | None:
            return store._run(  # type: ignore[attr-defined]
                lambda tx, _: prunable_operation(
                    tx,
                    SCOPE,
                    "op-run",
                    before=clock(),
                    now=clock(),
                    min_age=min_ages(gate.registry),
                ),
                "test",
            )

        assert "unsealed run" in (verdict() or "")
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok and "op-run" in rows(store) and report.operations == 0
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=clock())
        assert verdict() is None


class TestContinuationChains:
    """Invariant 9's chains stay whole: an original whose retry or compensation has not
    settled is never pruned, nor is that continuation; once the chain has settled it may go."""

    def test_a_live_continuation_keeps_its_chain(self, store: Store) -> None:
        from effectgate.store._retention import has_live_continuation
        from effectgate.store.base import NewOperation

        gate, clock = settled(store)
        parsed = gate.registry.parse("submit_order", {**EXAMPLE_ORDER, "quantity": "1"})
        follow = "cont:op-3:1"
        store.insert_operation(
            NewOperation(
                scope="default",
                operation_id=follow,
                action="submit_order",
                fingerprint=parsed.fingerprint,
                intent=parsed.snapshot,
                effect=parsed.effect,
                tier="validate",
                reason="r",
                policy_version="p",
            ),
            [State.PROPOSED, State.VALIDATED],
            now=clock(),
        )

        def link(tx, _):  # type: ignore[no-untyped-def]
            tx.write(
                "INSERT INTO continuations VALUES (?, ?, 1, 'retry', ?, 'submit_order', "
                "'d', '{}', 'ops-1', ?)",
                ("default", "op-3", follow, clock()),
            )

        store._run(link, "test")  # type: ignore[attr-defined]

        def live(op: str) -> bool:
            return bool(
                store._run(  # type: ignore[attr-defined]
                    lambda tx, _: has_live_continuation(tx, "default", op), "test"
                )
            )

        assert live("op-3") and live(follow)
        assert not live("op-4")  # no chain at all
        store.transition("default", follow, State.VALIDATED, State.REJECTED, now=clock())
        assert not live("op-3") and not live(follow)


def controls_then_orders(store: Store, *, keep: str | None = None) -> tuple[Gate, ManualClock]:
    """A ledger that starts with entries not about an operation (a revoked token, a released
    hold, kill-switch changes later superseded), then N settled orders, then the kill switch's
    latest change. ``keep``: also start with one entry that stays in force ("token": a live
    principal; "hold": an active hold on another scope)."""
    clock = ManualClock()
    if keep == "token":
        store.create_principal("live-agent", "agent", "default", created_by="alice", now=clock())
    if keep == "hold":
        store.place_hold("elsewhere", None, by="alice", reason="litigation", now=clock())
    store.create_principal("old-agent", "agent", "default", created_by="alice", now=clock())
    store.revoke_principal("old-agent", revoked_by="alice", now=clock())
    hold = store.place_hold("default", "op-x", by="alice", reason="review", now=clock())
    store.release_hold(hold.hold_id, by="alice", reason="done", now=clock())
    store.set_kill("submit_order", True, operator="alice", reason="drill", now=clock())
    clock.advance(1)
    store.set_kill("submit_order", False, operator="alice", reason="drill over", now=clock())
    clock.advance(1)
    gate, _ = settled_with(store, clock)
    store.set_kill("submit_order", True, operator="alice", reason="later", now=clock())
    clock.advance(1)
    return gate, clock


def settled_with(store: Store, clock: ManualClock) -> tuple[Gate, ManualClock]:
    gate = Gate(
        store=store,
        registry=default_registry(),
        adapters={"paper": PaperAdapter(PaperVenue())},
        policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
        clock=clock,
    )
    for i in range(N):
        gate.submit("submit_order", f"op-{i}", {**EXAMPLE_ORDER, "quantity": "1"})
        clock.advance(1)
    clock.advance(max(min_ages(gate.registry).values()) + 60)
    return gate, clock


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.audit_entries(limit=100_000)]


def carried(store: Store) -> list[dict[str, object]]:
    """The entries the latest prune checkpoint restates (``audit_pruned``'s ``carried``)."""
    pruned = [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_pruned"]
    return list(pruned[-1].detail["carried"]) if pruned else []


def carried_kinds(store: Store) -> list[str]:
    return [str(e["kind"]) for e in carried(store)]


class TestEntriesNoLongerInForce:
    """docs/evidence.md, "Entries not about an operation": a prune cuts past controls,
    principals and holds that are no longer in force and keeps every one that is; the chain
    still verifies from the checkpoint (invariant 8)."""

    def test_superseded_controls_revoked_tokens_and_released_holds_go(
        self, store: Store, tmp_path: Path
    ) -> None:
        gate, clock = controls_then_orders(store)
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        # Each lane keeps its head entry (PostgreSQL: sixteen lanes, so a few orders stay);
        # on SQLite's one lane the head is the last kill switch change, and every order goes.
        assert report.operations > 0 and len(rows(store)) == N - report.operations
        if type(store).__name__ == "SQLiteStore":
            assert report.operations == N
        assert 0 in report.cuts  # the lane of the entries not about an operation
        left = kinds(store)
        for gone in ("principal_created", "principal_revoked", "legal_hold_placed"):
            assert gone not in left
        # The kill switch's latest change is in force: it stays, and so does its state.
        assert "kill_switch_on" in left and store.controls("submit_order").killed
        assert "kill_switch_off" not in left

    def test_a_superseded_anchoring_is_absorbed_and_its_heads_recorded(
        self, store: Store, tmp_path: Path
    ) -> None:
        from effectgate._evidence.anchor import anchor_heads

        early = ManualClock()
        # The first entry of the log: an anchoring (audit_anchored). The prune's checkpoint
        # absorbs it: the entry goes, the heads it anchored are recorded in the checkpoint.
        first, _ = anchor_heads(
            store, [FileAnchor(tmp_path / "early.jsonl")], by="alice", clock=early
        )
        gate, clock = controls_then_orders(store)
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        assert 0 in report.cuts
        anchorings = [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_anchored"]
        # The prune anchors before its cut and again after its checkpoint: both stay.
        assert len(anchorings) == 2
        assert all(e.detail["by"] == "alice" and e.at == clock() for e in anchorings)
        (pruned,) = [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_pruned"]
        assert anchorings[0].seq < pruned.seq < anchorings[1].seq
        recorded = {int(k): [tuple(p) for p in v] for k, v in pruned.detail["anchored"].items()}
        for lane, head in first.heads.items():
            assert head in recorded[lane]

    def test_a_live_token_is_carried_and_still_authenticates(
        self, store: Store, tmp_path: Path
    ) -> None:
        gate, clock = controls_then_orders(store, keep="token")
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        # The live token's entry no longer stops the prefix: it is carried, whole, in the
        # checkpoint, and the orders after it go (SQLite: all of them, one lane).
        assert not any("live" in why for why in report.stopped.values())
        assert "principal_created" not in kinds(store)
        live = [e for e in carried(store) if e["kind"] == "principal_created"]
        assert [json.loads(str(e["detail_text"]))["name"] for e in live] == ["live-agent"]
        assert report.carried >= 1
        if type(store).__name__ == "SQLiteStore":
            assert report.operations == N
        # Its reader reads the principals table, not the log: the token is still live.
        assert "live-agent" in {p.name for p in store.list_principals()}

    def test_an_active_hold_is_carried_and_still_held(self, store: Store, tmp_path: Path) -> None:
        gate, clock = controls_then_orders(store, keep="hold")
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        assert "legal_hold_placed" not in kinds(store)
        placed = [e for e in carried(store) if e["kind"] == "legal_hold_placed"]
        assert [json.loads(str(e["detail_text"]))["scope"] for e in placed] == ["elsewhere"]
        assert [h.scope for h in store.list_holds()] == ["elsewhere"]
        assert not any("hold is active" in why for why in report.stopped.values())

    def test_a_token_revoked_too_recently_stays(self, store: Store, tmp_path: Path) -> None:
        gate, clock = controls_then_orders(store)
        # Cut-off before the revocation: the token's entries are still in force.
        report, after = run_prune(store, gate, clock, tmp_path, before=1.0)
        assert after.ok and report.operations == 0
        assert "principal_created" in kinds(store)

    def test_a_run_goes_once_sealed_snapshotted_and_past_retention(
        self, store: Store, tmp_path: Path
    ) -> None:
        from runkit import RUN, SCOPE, tool_call

        clock = ManualClock()
        store.record_run_call(SCOPE, tool_call("t-1"), now=clock(), actor="harness-1")
        gate, _ = settled_with(store, clock)

        def run_entries() -> list[str]:
            return [k for k in kinds(store) if k.startswith("run_")]

        # Unsealed: the run's journal is in force; it is carried in the checkpoint (it no
        # longer stops the prefix), and the orders after it go.
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        assert "run_call_recorded" not in run_entries()
        assert "run_call_recorded" in carried_kinds(store) and report.operations > 0
        assert not any("unsealed" in why for why in report.stopped.values())
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="done", now=clock())
        # Sealed, not yet snapshotted: still in force, so the next checkpoint carries it again.
        clock.advance(max(min_ages(gate.registry).values()) + 60)
        run_prune(store, gate, clock, tmp_path, clock())
        assert "run_call_recorded" in carried_kinds(store)
        store.snapshot_run(SCOPE, RUN, now=clock(), actor="ops-1")
        clock.advance(max(min_ages(gate.registry).values()) + 60)
        store.set_kill("submit_order", True, operator="alice", reason="head", now=clock())
        clock.advance(1)
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        # Sealed, snapshotted, past retention: no longer in force, so it is not carried again.
        assert "run_call_recorded" not in run_entries()
        assert "run_call_recorded" not in carried_kinds(store)


class TestSupersedingEntriesAreReadOnce:
    """Whether a control change is superseded is decided from one read of those kinds per
    lane batch (``_retention_rules.Superseding``): not one read per entry, and
    not an index on the audit log that every action's own entries would have to maintain."""

    def test_one_read_per_lane_answers_every_entry(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from effectgate.store import _retention_rules

        made: list[_retention_rules.Superseding] = []

        class Counting(_retention_rules.Superseding):
            def __init__(self, tx: object) -> None:
                super().__init__(tx)  # type: ignore[arg-type]
                made.append(self)

        monkeypatch.setattr("effectgate.store._prune.Superseding", Counting)
        gate, clock = controls_then_orders(store)
        for i in range(6):  # more control entries for the one read to answer
            on = i % 2 == 0
            store.set_kill("cancel_order", on, operator="alice", reason=f"r{i}", now=clock())
        report, after = run_prune(store, gate, clock, tmp_path, clock())
        assert after.ok, after.findings
        assert report.operations > 0  # the prefix went past the superseded changes
        assert made and all(s.reads <= 1 for s in made)
        assert sum(s.reads for s in made) >= 1
        # The latest change of each kill switch is still in force and stays.
        assert "kill_switch_on" in kinds(store)
