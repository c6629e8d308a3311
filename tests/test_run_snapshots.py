"""Recovery snapshots: canonical, digested, bounded, verified offline, kept side by side."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785

from effectgate import RunCallRef, verify_run_snapshot
from effectgate._core import run_snapshot as snap
from effectgate.errors import RunNotFound, RunNotSealed, RunSnapshotInvalid, RunSnapshotTooLarge
from effectgate.examples import EXAMPLE_ORDER
from effectgate.store.roles import Store
from runkit import RUN, SCOPE, completion, gate_for, model_call, receipt, tool_call

H = "harness-1"


def sealed_run(store: Store) -> None:
    """A run with a finished model call, an unfinished one with a provider receipt, and a
    tool call with a bound effect; then sealed."""
    m1, m2, t1 = model_call("m-1"), model_call("m-2"), tool_call("t-1")
    for c in (m1, m2, t1):
        store.record_run_call(SCOPE, c, now=1.0, actor=H)
    store.complete_run_call(SCOPE, m1.ref, completion("answer"), now=2.0, actor=H)
    store.put_provider_receipt(SCOPE, RUN, "m-2", receipt(m2), now=3.0, actor=H)
    gate, _ = gate_for(store)
    gate.submit("submit_order", "op-1", EXAMPLE_ORDER, run_call=t1.ref, dispatch=False)
    store.seal_run(SCOPE, RUN, actor="ops-1", reason="run ended", now=4.0)


class TestTakingASnapshot:
    def test_it_covers_every_call_return_receipt_and_binding(self, store: Store) -> None:
        sealed_run(store)
        document, digest, stored = store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        assert stored
        doc = json.loads(document)
        assert doc["digest"] == digest
        assert [c["call"]["slot"] for c in doc["calls"]] == ["m-1", "m-2", "t-1"]
        assert doc["calls"][0]["completion"]["result_bytes"] == len("answer")
        assert [r["slot"] for r in doc["provider_receipts"]] == ["m-2"]
        assert doc["effects"][0]["operation_id"] == "op-1"
        assert doc["effects"][0]["state"] == "validated"
        assert doc["seal"]["actor"] == "ops-1"
        summary = verify_run_snapshot(document)
        assert summary["digest"] == digest and summary["unfinished_calls"] == 2

    def test_the_document_is_rfc8785_canonical(self, store: Store) -> None:
        sealed_run(store)
        document, _, _ = store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        assert rfc8785.dumps(json.loads(document)) == document

    def test_an_unsealed_or_unknown_run_has_no_snapshot(self, store: Store) -> None:
        store.record_run_call(SCOPE, tool_call("t-1"), now=1.0, actor=H)
        with pytest.raises(RunNotSealed):
            store.snapshot_run(SCOPE, RUN, now=2.0, actor="ops-1")
        with pytest.raises(RunNotFound):
            store.snapshot_run(SCOPE, "nope", now=2.0, actor="ops-1")

    def test_an_empty_sealed_run_has_a_snapshot(self, store: Store) -> None:
        store.seal_run(SCOPE, "empty", actor="ops-1", reason="never ran", now=1.0)
        document, _, _ = store.snapshot_run(SCOPE, "empty", now=2.0, actor="ops-1")
        assert verify_run_snapshot(document)["calls"] == 0

    def test_disagreeing_snapshots_are_kept_side_by_side(self, store: Store) -> None:
        sealed_run(store)
        first = store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        assert not store.snapshot_run(SCOPE, RUN, now=6.0, actor="ops-1")[2], "same: kept once"
        # A late return after the seal changes the journal: a new snapshot, the old one kept.
        store.complete_run_call(
            SCOPE, RunCallRef(RUN, "t-1", "t-1-c1"), completion("tool"), now=7.0, actor=H
        )
        second = store.snapshot_run(SCOPE, RUN, now=8.0, actor="ops-1")
        assert second[1] != first[1] and second[2]
        kept = [d for d, *_ in store.list_run_snapshots(SCOPE, RUN)]
        assert kept == [first[1], second[1]]
        assert store.get_run_snapshot(SCOPE, RUN, first[1]) == first[0]


class TestBounds:
    """Exactly at each bound is a snapshot; one over is an error, never a truncation."""

    @pytest.mark.slow
    def test_the_entry_bound_through_the_store(self, store: Store) -> None:
        calls = [model_call(f"m-{i:05d}") for i in range(snap.MAX_ENTRIES)]
        for c in calls:
            store.record_run_call(SCOPE, c, now=1.0, actor=H)
        store.seal_run(SCOPE, RUN, actor="ops-1", reason="big", now=2.0)
        document, _, _ = store.snapshot_run(SCOPE, RUN, now=3.0, actor="ops-1")
        assert verify_run_snapshot(document)["calls"] == snap.MAX_ENTRIES
        # One receipt more (late proof is still written after the seal): one over the bound.
        store.put_provider_receipt(SCOPE, RUN, "m-00000", receipt(calls[0]), now=4.0, actor=H)
        with pytest.raises(RunSnapshotTooLarge):
            store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        assert len(store.list_run_snapshots(SCOPE, RUN)) == 1

    def test_the_entry_bound(self) -> None:
        seal = {"run_id": RUN}
        call = {"call": {"slot": "x", "run_id": RUN, "kind": "tool"}}
        snap.build(seal, [call] * snap.MAX_ENTRIES, [], [])
        with pytest.raises(RunSnapshotTooLarge):
            snap.build(seal, [call] * (snap.MAX_ENTRIES - 1), [{}], [{}])

    def test_the_byte_bound(self) -> None:
        def size(pad: int) -> int:
            return len(snap.build({"run_id": RUN, "pad": "x" * pad}, [], [], [])[0])

        exact = snap.MAX_BYTES - size(0)
        assert size(exact) == snap.MAX_BYTES
        with pytest.raises(RunSnapshotTooLarge):
            size(exact + 1)


def edits(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every leaf of the document (but the digest), as a path and its value."""
    out: list[tuple[str, Any]] = []

    def walk(path: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{path}/{k}", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(f"{path}/{i}", v)
        else:
            out.append((path, value))

    walk("", {k: v for k, v in doc.items() if k != "digest"})
    return out


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip("/").split("/")
    node: Any = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


class TestVerification:
    def test_any_changed_field_changes_the_digest(self, store: Store) -> None:
        sealed_run(store)
        document, digest, _ = store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        doc = json.loads(document)
        leaves = edits(doc)
        assert len(leaves) > 50
        for path, value in leaves:
            changed = json.loads(document)
            set_path(changed, path, "changed" if value != "changed" else "other")
            body = {k: v for k, v in changed.items() if k != "digest"}
            assert snap.sha256_hex(snap.canonical_json(body)) != digest, path
            # Offline verification refuses the edited file, digest left as it was.
            with pytest.raises(RunSnapshotInvalid):
                verify_run_snapshot(snap.canonical_json(changed))

    def test_a_file_that_is_not_canonical_or_not_a_snapshot_is_refused(self, store: Store) -> None:
        sealed_run(store)
        document, _, _ = store.snapshot_run(SCOPE, RUN, now=5.0, actor="ops-1")
        pretty = json.dumps(json.loads(document), indent=2).encode()
        for bad in (pretty, b"{}", b"not json", document[:-1], b'{"a":1,"a":2}'):
            with pytest.raises(RunSnapshotInvalid):
                verify_run_snapshot(bad)

    def test_a_binding_to_a_call_the_snapshot_lacks_is_refused(self) -> None:
        seal = {"run_id": RUN}
        effect = snap.effect_entry("op", "t-9", "c", 1.0, "a", "f", "validated", None)
        document, _ = snap.build(seal, [], [], [effect])
        with pytest.raises(RunSnapshotInvalid, match="no tool call"):
            verify_run_snapshot(document)
