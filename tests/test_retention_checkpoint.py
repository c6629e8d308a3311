"""Retention on a ledger made by ``effectgate init`` (issue 41 part 3): a prune carries the
entries still in force (the live tokens written first, a grant) into its checkpoint instead of
stopping at them, so history older than the retention window goes on SQLite too. Invariant 8
after every prune: the chain verifies, an anchored head from before the prune is explained by
the checkpoint, and an edited or forged checkpoint is a finding. On both stores."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from effectgate import Gate, LimitPolicy, PolicySet
from effectgate._core.chain import chain_hash, content_digest, lane_for
from effectgate._core.governed_policy import canonical_text, document_of, policy_hash
from effectgate._core.grants import parse_spec
from effectgate._evidence.anchor import FileAnchor, anchor_heads, verify_against_anchors
from effectgate._evidence.audit import verify_store
from effectgate._execute.retention import min_ages, prune
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import run_cli
from test_audit_chain import _is_sqlite, sql

KEY = b"anchor-key-for-tests"
N = 24


class Ledger:
    """What ``effectgate init`` writes (the agent's and the operator's tokens, first), a grant
    and a loaded policy, then orders: ``old`` settled past the retention window, ``recent``
    inside it."""

    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.store, self.tmp = store, tmp_path
        self.clock = ManualClock()
        now = self.clock()
        self.agent = store.create_principal("agent", "agent", "default", created_by="me", now=now)
        self.operator = store.create_principal(
            "operator", "operator", "*", created_by="me", now=now
        )
        spec = parse_spec({"actions": ["submit_order"], "expires_in": 10**9}, now=now)
        self.grant = store.create_grant("agent", spec, created_by="operator", now=now)
        doc = document_of({"submit_order": LimitPolicy(Decimal("100000"))})
        self.policy = store.load_policy(canonical_text(doc), policy_hash(doc), by="me", now=now)
        self.gate = Gate(
            store=store,
            registry=default_registry(),
            adapters={"paper": PaperAdapter(PaperVenue())},
            policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
            clock=self.clock,
        )
        self.window = max(min_ages(self.gate.registry).values())
        self.orders("old", N)

    def orders(self, prefix: str, n: int) -> None:
        for i in range(n):
            order = {**EXAMPLE_ORDER, "quantity": "1"}
            self.gate.submit("submit_order", f"{prefix}-{i}", order)
            self.clock.advance(1)

    def age(self) -> None:
        self.clock.advance(self.window + 60)

    def prune(self, *, key: bytes | None = None):  # type: ignore[no-untyped-def]
        return prune(
            self.store,
            self.gate.registry,
            [FileAnchor(self.tmp / "anchors.jsonl")],
            before=self.clock(),
            by="alice",
            key=key,
            clock=self.clock,
        )


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.audit_entries(limit=100_000)]


def checkpoints(store: Store) -> list:  # type: ignore[type-arg]
    return [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_pruned"]


def carried(store: Store) -> list[dict[str, object]]:
    return list(checkpoints(store)[-1].detail["carried"])


def left(store: Store, prefix: str) -> set[str]:
    return {
        str(e.operation_id)
        for e in store.audit_entries(limit=100_000)
        if str(e.operation_id).startswith(f"{prefix}-")
    }


def rechain_from(store: Store, seq: int, detail: dict[str, object]) -> None:
    """The attacker who can write the store: replace entry ``seq``'s detail and re-chain it
    and every later entry of its lane, and the lane's head, consistently."""
    entries = store.audit_entries(limit=100_000)
    target = next(e for e in entries if e.seq == seq)
    prev = target.prev_hash
    for e in (e for e in entries if e.lane == target.lane and e.seq >= seq):
        text = json.dumps(detail, sort_keys=True) if e.seq == seq else e.detail_text
        h = chain_hash(prev, content_digest(e.lane, e.at, e.scope, e.operation_id, e.kind, text))
        sql(
            store,
            "UPDATE audit_log SET detail = ?, prev_hash = ?, hash = ? WHERE seq = ?",
            text,
            prev,
            h,
            e.seq,
        )
        last, prev = e.seq, h
    sql(store, "UPDATE audit_heads SET seq = ?, hash = ? WHERE lane = ?", last, prev, target.lane)
    if _is_sqlite(store):
        sql(store, "UPDATE operations SET audit_seq = NULL, audit_hash = NULL")


class TestPruneAnInitLedger:
    """Invariant 8 after a prune of a ledger made like ``init`` does."""

    def test_old_history_goes_tokens_grant_and_policy_are_carried_and_still_read(
        self, store: Store, tmp_path: Path
    ) -> None:
        ledger = Ledger(store, tmp_path)
        ledger.age()
        ledger.orders("recent", 3)  # inside the window: they stay
        report, after = ledger.prune()
        assert after.ok, after.findings
        # Every old order's history goes; SQLite's one lane used to stop at the first token.
        assert report.operations > 0 and left(store, "recent") == {f"recent-{i}" for i in range(3)}
        if _is_sqlite(store):
            assert report.operations == N and left(store, "old") == set()
        assert len(left(store, "old")) == N - report.operations
        # The entries in force are gone from the log and restated whole in the checkpoint.
        assert "principal_created" not in kinds(store)
        assert "grant_created" not in kinds(store)
        restated = {
            (e["kind"], json.loads(str(e["detail_text"])).get("name")) for e in carried(store)
        }
        assert {("principal_created", "agent"), ("principal_created", "operator")} <= restated
        assert any(k == "grant_created" for k, _ in restated)
        assert {"policy_loaded", "policy_activated"} <= {k for k, _ in restated}
        assert report.carried == len(carried(store)) >= 3
        # Their readers read their own tables: the tokens authenticate, the grant counts.
        assert store.principal_for_token(ledger.agent.token) is not None
        assert store.principal_for_token(ledger.operator.token) is not None
        assert [g.grant_id for g in store.live_grants_for("agent", ledger.clock())] == [
            ledger.grant.grant_id
        ]
        active = store.active_policy()
        assert active is not None and active.policy_hash == ledger.policy.policy_hash
        # And the gate still runs on the pruned ledger.
        ledger.orders("after", 1)
        assert verify_store(store).ok

    def test_a_held_operation_is_kept_with_its_trail(self, store: Store, tmp_path: Path) -> None:
        ledger = Ledger(store, tmp_path)
        ledger.age()
        held = f"old-{N - 1}"
        store.place_hold("default", held, by="alice", reason="matter 7", now=ledger.clock())
        report, after = ledger.prune()
        assert after.ok, after.findings
        assert held in left(store, "old")
        trail = store.audit_entries(scope="default", operation_id=held)
        assert trail[0].kind == "transition" and "proposed" in trail[0].detail_text
        assert any("legal hold" in why for why in report.stopped.values())
        if _is_sqlite(store):  # one lane: everything before the held order goes
            assert left(store, "old") == {held}
        assert [h.operation_id for h in store.list_holds()] == [held]

    def test_an_anchored_head_from_before_the_prune_is_explained(
        self, store: Store, tmp_path: Path
    ) -> None:
        ledger = Ledger(store, tmp_path)
        early = FileAnchor(tmp_path / "early.jsonl")  # an anchor the prune does not write to
        first, _ = anchor_heads(store, [early], key=KEY, clock=ledger.clock)
        ledger.orders("more", 4)
        ledger.age()
        _, after = ledger.prune(key=KEY)
        assert after.ok, after.findings
        pruned = {lane: seq for lane, (seq, _) in store.audit_starts().items()}
        gone = {lane for lane, (seq, _) in first.heads.items() if seq <= pruned.get(lane, 0)}
        assert gone and (not _is_sqlite(store) or gone == {0})
        result, found = verify_against_anchors(store, [early], key=KEY)
        assert result.ok, result.findings
        assert found == [first]
        (checkpoint,) = checkpoints(store)
        assert {(lane, seq) for lane, seq, _ in result.covered} == {
            (lane, first.heads[lane][0]) for lane in gone
        }
        assert {by for _, _, by in result.covered} == {checkpoint.seq}
        # The same head given by hand (`audit verify --expect-head`) is explained too.
        assert verify_store(store, expect_heads=dict(first.heads)).ok
        # A head the chain never recorded below the cut is not: it is reported.
        lane = next(iter(gone))
        made_up = {lane: (first.heads[lane][0], "f" * 64)}
        problems = [f.problem for f in verify_store(store, expect_heads=made_up).findings]
        assert problems == ["head"]

    def test_invariant_8_heads_named_by_an_anchoring_the_prune_keeps_are_recorded(
        self, store: Store, tmp_path: Path
    ) -> None:
        """Simulator, PostgreSQL seed 59: an anchoring's entry (operators' lane) is that lane's
        anchored head, so it stays; the heads it names in other lanes are cut all the same,
        and the checkpoint must record them (SQLite's one lane explains them by its start)."""
        ledger = Ledger(store, tmp_path)
        early = FileAnchor(tmp_path / "early.jsonl")  # an anchor the prune does not write to
        first, _ = anchor_heads(store, [early], key=KEY, clock=ledger.clock)
        (kept,) = [e for e in store.audit_entries(limit=100_000) if e.kind == "audit_anchored"]
        lanes = 1 if _is_sqlite(store) else 16
        # Later orders only in lanes other than the operators' lane: its head stays the
        # anchoring entry until the prune's own anchoring.
        more = [k for k in (f"more-{i}" for i in range(60)) if lane_for("default", k, lanes)][:40]
        for op in more:
            ledger.gate.submit("submit_order", op, {**EXAMPLE_ORDER, "quantity": "1"})
            ledger.clock.advance(1)
        ledger.age()
        _, after = ledger.prune(key=KEY)
        assert after.ok, after.findings
        starts = store.audit_starts()
        if not _is_sqlite(store):
            assert (kept.lane, kept.seq) in {(e.lane, e.seq) for e in store.audit_entries()}
            passed = {
                lane
                for lane, (seq, _) in first.heads.items()
                if lane != kept.lane and seq < starts.get(lane, (0, ""))[0]
            }
            assert passed  # the case: heads the cuts passed, named by an entry that stays
        result, _ = verify_against_anchors(store, [early], key=KEY)
        assert result.ok, result.findings
        gone = {
            lane for lane, (seq, _) in first.heads.items() if seq <= starts.get(lane, (0, ""))[0]
        }
        assert {(lane, seq) for lane, seq, _ in result.covered} == {
            (lane, first.heads[lane][0]) for lane in gone
        }


class TestAnchoringAfterThePrune:
    def test_a_failed_second_anchoring_says_the_prune_was_done(
        self, store: Store, tmp_path: Path
    ) -> None:
        from effectgate._evidence.anchor import Checkpoint
        from effectgate.errors import ConfigError

        class DownAfterOne(FileAnchor):
            puts = 0

            def put(self, checkpoint: Checkpoint) -> str:
                self.puts += 1
                if self.puts > 1:
                    raise ConfigError("anchor unreachable")
                return super().put(checkpoint)

        ledger = Ledger(store, tmp_path)
        ledger.age()
        with pytest.raises(ConfigError, match="pruned, but anchoring the checkpoint entry failed"):
            prune(
                store,
                ledger.gate.registry,
                [DownAfterOne(tmp_path / "a.jsonl")],
                before=ledger.clock(),
                by="alice",
                clock=ledger.clock,
            )
        assert checkpoints(store) and verify_store(store).ok


class TestASecondPrune:
    """The next prune absorbs the checkpoint: what is still in force is carried again, byte
    for byte, what is no longer in force is dropped, and old anchors stay explained."""

    def test_carries_the_carried_again_and_drops_what_expired(
        self, store: Store, tmp_path: Path
    ) -> None:
        ledger = Ledger(store, tmp_path)
        early = FileAnchor(tmp_path / "early.jsonl")
        anchor_heads(store, [early], clock=ledger.clock)
        ledger.age()
        _, after = ledger.prune()
        assert after.ok, after.findings
        (p1,) = checkpoints(store)
        before = {(e["seq"], e["hash"]): e for e in carried(store)}
        # The operator's token is revoked; past the window it is no longer in force.
        store.revoke_principal("operator", revoked_by="me", now=ledger.clock())
        ledger.orders("second", 5)
        ledger.age()
        ledger.orders("late", 1)
        _, after = ledger.prune()
        assert after.ok, after.findings
        assert len(checkpoints(store)) == 1  # the first was absorbed
        p2 = checkpoints(store)[0]
        assert p2.detail["previous"] == {"seq": p1.seq, "hash": p1.hash}
        again = {(e["seq"], e["hash"]): e for e in carried(store)}
        names = {
            json.loads(str(e["detail_text"])).get("name")
            for e in again.values()
            if e["kind"] == "principal_created"
        }
        assert names == {"agent"}  # the revoked operator's entry is dropped
        assert "principal_revoked" not in {e["kind"] for e in again.values()}
        assert "principal_revoked" not in kinds(store)
        # What is carried again is exactly what was carried (seq, hash, content).
        for k, e in again.items():
            if k in before:
                assert e == before[k]
        assert any(e["kind"] == "grant_created" for e in again.values())
        assert store.principal_for_token(ledger.agent.token) is not None
        result, _ = verify_against_anchors(store, [early])
        assert result.ok and result.covered, result.findings
        assert {by for _, _, by in result.covered} == {p2.seq}


class TestATamperedCheckpoint:
    """Invariant 8: a checkpoint edited in place, forged and re-chained, or contradicted by a
    moved checkpoint row is a finding."""

    def pruned(self, store: Store, tmp_path: Path, key: bytes | None = None):  # type: ignore[no-untyped-def]
        ledger = Ledger(store, tmp_path)
        ledger.age()
        report, after = ledger.prune(key=key)
        assert after.ok and report.carried, after.findings
        return ledger, checkpoints(store)[-1]

    def test_an_edited_carried_entry_breaks_the_chain(self, store: Store, tmp_path: Path) -> None:
        _, checkpoint = self.pruned(store, tmp_path)
        detail = dict(checkpoint.detail)
        detail["carried"][0]["detail_text"] = json.dumps({"name": "mallory"})
        sql(
            store,
            "UPDATE audit_log SET detail = ? WHERE seq = ?",
            json.dumps(detail),
            checkpoint.seq,
        )
        problems = {f.problem for f in verify_store(store).findings}
        assert "edited" in problems

    def test_a_re_chained_forgery_is_caught_by_its_own_checks(
        self, store: Store, tmp_path: Path
    ) -> None:
        _, checkpoint = self.pruned(store, tmp_path)
        detail = dict(checkpoint.detail)
        detail["carried"][0]["detail_text"] = json.dumps({"name": "mallory"})
        rechain_from(store, checkpoint.seq, detail)
        messages = [f.message for f in verify_store(store).findings if f.problem == "checkpoint"]
        assert any("digest" in m for m in messages), messages
        assert any("content does not match its hash" in m for m in messages), messages

    def test_a_forgery_consistent_but_for_the_key_fails_the_signature(
        self, store: Store, tmp_path: Path
    ) -> None:
        from effectgate._core.chain import ChainEntry
        from effectgate._core.prune_checkpoint import checkpoint_detail

        ledger, checkpoint = self.pruned(store, tmp_path, key=KEY)
        old = checkpoint.detail
        first = dict(old["carried"][0])
        # Forge a carried entry whose content, hash and digest all agree: only the key tells.
        first["detail_text"] = json.dumps({"name": "mallory"})
        digest = content_digest(
            first["lane"], first["at"], first["scope"], None, first["kind"], first["detail_text"]
        )
        first["hash"] = chain_hash(first["prev_hash"], digest)

        forged = checkpoint_detail(
            {k: old[k] for k in ("cuts", "entries", "operations", "stopped")},
            by=old["by"],
            before=old["before"],
            starts={int(k): (v["seq"], v["hash"]) for k, v in old["starts"].items()},
            carried=[ChainEntry.from_dict(first)]
            + [ChainEntry.from_dict(e) for e in old["carried"][1:]],
            anchored={int(k): [tuple(p) for p in v] for k, v in old["anchored"].items()},
            previous=None,
            key=b"not the key",
        )
        rechain_from(store, checkpoint.seq, forged)
        assert verify_store(store).ok  # consistent with itself: without the key, only anchors
        with_key = verify_store(store, key=KEY)
        assert [f.problem for f in with_key.findings] == ["checkpoint"]
        assert "signature" in with_key.findings[0].message
        result, _ = verify_against_anchors(
            store, [FileAnchor(ledger.tmp / "anchors.jsonl")], key=KEY
        )
        assert not result.ok

    def test_a_checkpoint_row_moved_past_a_deletion_contradicts_the_checkpoint(
        self, store: Store, tmp_path: Path
    ) -> None:
        self.pruned(store, tmp_path)
        # Delete the first remaining entry of lane 0 and move the lane's checkpoint row onto
        # it: the chain alone now links (the next entry follows the row), the checkpoint not.
        first = next(e for e in store.audit_entries(limit=100_000) if e.lane == 0)
        sql(store, "DELETE FROM audit_log WHERE seq = ?", first.seq)
        sql(
            store,
            "UPDATE audit_checkpoints SET seq = ?, hash = ? WHERE lane = 0",
            first.seq,
            first.hash,
        )
        if _is_sqlite(store):
            sql(store, "UPDATE operations SET audit_seq = NULL, audit_hash = NULL")
        findings = verify_store(store).findings
        assert [f.problem for f in findings] == ["checkpoint"], findings
        assert "checkpoint rows" in findings[0].message


class TestTheCheckpointValue:
    """The pure checkpoint's own checks (``PruneCheckpoint.problems``), entry by entry."""

    def entry(self, seq: int, *, op: str | None = None):  # type: ignore[no-untyped-def]
        from effectgate._core.chain import ChainEntry

        text = json.dumps({"name": f"t{seq}"})
        digest = content_digest(0, float(seq), "default", op, "principal_created", text)
        prev = "0" * 64
        return ChainEntry(
            seq,
            0,
            float(seq),
            "default",
            op,
            "principal_created",
            text,
            prev,
            chain_hash(prev, digest),
        )

    def check(self, carried, starts, key=None, verify_key=None):  # type: ignore[no-untyped-def]
        from effectgate._core.prune_checkpoint import PruneCheckpoint, checkpoint_detail

        detail = checkpoint_detail(
            {"cuts": {}},
            by="alice",
            before=1.0,
            starts=starts,
            carried=carried,
            anchored={},
            previous=None,
            key=key,
        )
        parsed = PruneCheckpoint.parse(json.loads(json.dumps(detail)))
        assert parsed is not None
        return parsed.problems(key=verify_key)

    def test_a_sound_checkpoint_has_no_problem(self) -> None:
        assert self.check([self.entry(2), self.entry(5)], {0: (9, "a" * 64)}, KEY, KEY) == []

    @pytest.mark.parametrize(
        ("why", "carried", "starts"),
        [
            ("past the lane's cut", [2, 12], {0: (9, "a" * 64)}),
            ("past the lane's cut", [2], {}),
            ("not its start's hash", [9], {0: (9, "a" * 64)}),
        ],
    )
    def test_a_carried_entry_outside_its_cut_is_a_problem(
        self, why: str, carried: list[int], starts: dict[int, tuple[int, str]]
    ) -> None:
        problems = self.check([self.entry(s) for s in carried], starts)
        assert any(why in p for p in problems), problems

    def test_carried_entries_reordered_are_a_problem(self) -> None:
        from effectgate._core.prune_checkpoint import PruneCheckpoint, checkpoint_detail

        detail = checkpoint_detail(
            {"cuts": {}},
            by="alice",
            before=1.0,
            starts={0: (9, "a" * 64)},
            carried=[self.entry(2), self.entry(5)],
            anchored={},
            previous=None,
            key=None,
        )
        detail["carried"] = list(reversed(detail["carried"]))  # type: ignore[call-overload]
        parsed = PruneCheckpoint.parse(detail)
        assert parsed is not None
        problems = parsed.problems(key=None)
        assert any("out of order" in p for p in problems), problems
        assert any("digest" in p for p in problems), problems

    def test_an_operations_entry_is_never_carried(self) -> None:
        problems = self.check([self.entry(2, op="op-1")], {0: (9, "a" * 64)})
        assert any("about an operation" in p for p in problems), problems

    def test_the_signature_needs_the_key(self) -> None:
        carried, starts = [self.entry(2)], {0: (9, "a" * 64)}
        assert self.check(carried, starts, None, KEY) == [
            "its signature does not verify with the anchor key"
        ]
        assert self.check(carried, starts, b"other", KEY) == [
            "its signature does not verify with the anchor key"
        ]
        assert self.check(carried, starts, KEY, None) == []

    def test_an_old_prune_entry_is_not_a_checkpoint(self) -> None:
        from effectgate._core.prune_checkpoint import PruneCheckpoint

        assert PruneCheckpoint.parse({"by": "alice", "cuts": {}}) is None
        with pytest.raises(ValueError, match="format"):
            PruneCheckpoint.parse({"format": "effectgate-prune/9"})
        with pytest.raises(ValueError, match="malformed"):
            PruneCheckpoint.parse({"format": "effectgate-prune/2", "starts": {}})


class TestTheCLIOnAnInitLedger:
    """``effectgate init``, orders, then ``effectgate audit prune`` removes the old history
    (it removed nothing before), and ``audit verify --expect-head`` explains an old anchor."""

    def test_init_then_prune_then_verify(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import subprocess
        import time
        import types
        from datetime import UTC, datetime

        from effectgate._service import _starter
        from effectgate.store import SQLiteStore

        t0 = time.time() - 10 * 86400  # init ran ten days ago
        monkeypatch.setattr(_starter, "time", types.SimpleNamespace(time=lambda: t0))
        starter = _starter.write_starter(tmp_path)
        store = SQLiteStore(str(tmp_path / _starter.LEDGER_FILE))
        clock = ManualClock(t0 + 60)
        try:
            gate = Gate(
                store=store,
                registry=default_registry(),
                adapters={"paper": PaperAdapter(PaperVenue())},
                policy=PolicySet({"submit_order": LimitPolicy(Decimal("100000"))}),
                clock=clock,
            )
            for i in range(6):
                gate.submit("submit_order", f"old-{i}", {**EXAMPLE_ORDER, "quantity": "1"})
                clock.advance(1)
            early, _ = anchor_heads(store, [FileAnchor(tmp_path / "early.jsonl")], clock=clock)
        finally:
            store.close()
        url = f"sqlite:///{tmp_path / _starter.LEDGER_FILE}"
        env = {"EFFECTGATE_OPERATOR_TOKEN": starter.operator_token}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args, env=env)

        cutoff = datetime.fromtimestamp(time.time() - 2 * 86400, UTC).strftime("%Y-%m-%d")
        anchors = str(tmp_path / "anchors.jsonl")
        done = cli(
            "audit", "prune", "--store", url, "--before", cutoff, "--file", anchors, "--json"
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["operations"] == 6 and report["carried"] == 2, report
        assert report["verify"]["ok"]
        (seq, h) = early.heads[0]
        checked = cli("audit", "verify", "--store", url, "--expect-head", f"0:{seq}:{h}", "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert [c["seq"] for c in json.loads(checked.stdout)["covered"]] == [seq]
        against = cli(
            "audit", "anchor", "--verify", "--store", url, "--file", str(tmp_path / "early.jsonl")
        )
        assert against.returncode == 0, against.stdout + against.stderr
        assert "covered by checkpoint" in against.stdout
        # The tokens init printed still authenticate after the prune.
        store = SQLiteStore(str(tmp_path / _starter.LEDGER_FILE))
        try:
            assert store.principal_for_token(starter.agent_token) is not None
        finally:
            store.close()
