"""Invariant 8: the audit log is tamper-evident, and with anchors also against an attacker who
truncates its tail or forges it and re-chains consistently (issue 20). On both stores; the
providers are real: a file, a local HTTP object store, a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from effectgate._evidence.anchor import (
    AnchorProvider,
    Checkpoint,
    CommandAnchor,
    FileAnchor,
    HttpAnchor,
    anchor_heads,
    verify_against_anchors,
)
from effectgate._evidence.audit import chain_hash, content_digest
from effectgate.errors import ConfigError
from effectgate.store.roles import Store
from test_audit_chain import _is_sqlite, fill, sql

KEY = b"anchor-key-for-tests"


class _Objects(BaseHTTPRequestHandler):
    objects: dict[str, bytes] = {}

    def do_PUT(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        self.objects[self.path] = self.rfile.read(n)
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        body = self.objects.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def object_store() -> Iterator[str]:
    handler = type("Objects", (_Objects,), {"objects": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/bucket/eg"
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["file", "http", "command"])
def provider(request: pytest.FixtureRequest, tmp_path: Path, object_store: str) -> AnchorProvider:
    if request.param == "file":
        return FileAnchor(tmp_path / "anchors.jsonl")
    if request.param == "http":
        return HttpAnchor(object_store)
    target = tmp_path / "cmd-anchor.json"
    write = [
        sys.executable,
        "-c",
        f"import sys; open({str(target)!r}, 'w').write(sys.stdin.read())",
    ]
    return CommandAnchor(write, read_argv=["cat", str(target)])


def truncate_tail(store: Store) -> None:
    """Delete the newest entry of its lane and point the lane's head at the one before."""
    entries = store.audit_entries(limit=10_000)
    # The newest entry that has a predecessor in its lane (PostgreSQL spreads lanes).
    last = next(
        e for e in reversed(entries) if any(p.lane == e.lane for p in entries if p.seq < e.seq)
    )
    before = [e for e in entries if e.lane == last.lane and e.seq < last.seq][-1]
    sql(store, "DELETE FROM audit_log WHERE seq = ?", last.seq)
    sql(
        store,
        "UPDATE audit_heads SET seq = ?, hash = ? WHERE lane = ?",
        before.seq,
        before.hash,
        last.lane,
    )
    if _is_sqlite(store):
        sql(store, "UPDATE operations SET audit_seq = NULL, audit_hash = NULL")


def forge_tail(store: Store) -> None:
    """Rewrite the newest entry and re-chain it and the head consistently."""
    last = store.audit_entries(limit=10_000)[-1]
    text = json.dumps({"forged": True})
    digest = content_digest(last.lane, last.at, last.scope, last.operation_id, last.kind, text)
    new_hash = chain_hash(last.prev_hash, digest)
    sql(store, "UPDATE audit_log SET detail = ?, hash = ? WHERE seq = ?", text, new_hash, last.seq)
    sql(store, "UPDATE audit_heads SET hash = ? WHERE lane = ?", new_hash, last.lane)
    if _is_sqlite(store):
        sql(store, "UPDATE operations SET audit_seq = NULL, audit_hash = NULL")


class TestAnchoredVerification:
    """Invariant 8: a truncated or forged tail is caught against the last anchors."""

    def test_an_untouched_log_verifies_against_its_anchor(
        self, store: Store, provider: AnchorProvider
    ) -> None:
        fill(store)
        heads = store.audit_heads()
        checkpoint, where = anchor_heads(store, [provider], key=KEY)
        assert where and checkpoint.heads == heads
        store.append_audit("note", {"later": 1}, now=99.0, scope="default", operation_id="op-1")
        result, found = verify_against_anchors(store, [provider], key=KEY)
        assert result.ok, result.findings
        assert [c.digest for c in found] == [checkpoint.digest]

    @pytest.mark.parametrize("attack", [truncate_tail, forge_tail])
    def test_a_tampered_tail_is_caught(
        self, store: Store, provider: AnchorProvider, attack
    ) -> None:
        op = fill(store)
        anchor_heads(store, [provider], key=KEY)
        # The anchoring's own entry follows the heads it anchored, so (like any entry written
        # since) only the next anchoring covers it: strip it first, then attack what was
        # anchored.
        assert store.audit_entries(limit=10_000)[-1].kind == "audit_anchored"
        truncate_tail(store)
        attack(store)
        assert op.verify_audit().ok  # consistent with itself: only the anchor can tell
        result, _ = verify_against_anchors(store, [provider], key=KEY)
        assert not result.ok
        problems = {f.problem for f in result.findings}
        assert problems & {"truncated", "head"}, result.findings

    def test_an_edited_checkpoint_is_a_finding(self, store: Store, tmp_path: Path) -> None:
        fill(store)
        anchor = FileAnchor(tmp_path / "a.jsonl")
        anchor_heads(store, [anchor], key=KEY)
        doc = json.loads(anchor.path.read_text())
        first = next(iter(doc["heads"]))
        doc["heads"][first]["seq"] = 1
        anchor.path.write_text(json.dumps(doc) + "\n")
        result, found = verify_against_anchors(store, [anchor], key=KEY)
        assert not found and [f.problem for f in result.findings] == ["anchor"]

    def test_a_wrong_key_does_not_verify(self, store: Store, tmp_path: Path) -> None:
        fill(store)
        anchor = FileAnchor(tmp_path / "a.jsonl")
        checkpoint, _ = anchor_heads(store, [anchor], key=KEY)
        with pytest.raises(ConfigError, match="signature"):
            Checkpoint.from_dict(checkpoint.to_dict(), key=b"other")


class TestAnchoringIsAudited:
    """Invariant 8: every anchoring, whatever the provider (file, HTTP object store, command),
    is itself a chained audit entry naming the heads anchored, where, and who asked."""

    def test_each_anchoring_is_a_chained_entry(
        self, store: Store, provider: AnchorProvider
    ) -> None:
        fill(store)
        heads = store.audit_heads()
        checkpoint, where = anchor_heads(store, [provider], key=KEY, by="alice")
        last = store.audit_entries(limit=100_000)[-1]
        assert last.kind == "audit_anchored"
        detail = json.loads(last.detail_text)
        assert detail["by"] == "alice" and detail["digest"] == checkpoint.digest
        assert detail["locations"] == where
        assert {int(k): (v["seq"], v["hash"]) for k, v in detail["heads"].items()} == heads
        # The entry follows the heads it anchors: the chain and the anchor both still verify.
        result, found = verify_against_anchors(store, [provider], key=KEY)
        assert result.ok, result.findings
        assert [c.digest for c in found] == [checkpoint.digest]

    def test_an_anchoring_that_fails_records_nothing(self, store: Store, tmp_path: Path) -> None:
        fill(store)
        before = store.audit_heads()
        dead = HttpAnchor("http://127.0.0.1:9/bucket", timeout=1.0)
        with pytest.raises(httpx.ConnectError):  # refused: nothing anchored, nothing recorded
            anchor_heads(store, [dead], key=KEY, by="alice")
        assert store.audit_heads() == before

    def test_the_scheduled_job_does_not_re_anchor_its_own_entry(
        self, store: Store, tmp_path: Path
    ) -> None:
        from effectgate._service._anchor_config import AnchorConfig, AnchorJob

        fill(store)
        job = AnchorJob(store, AnchorConfig(0, files=(str(tmp_path / "a.jsonl"),)))
        first = job.once()
        count = len(store.audit_entries(limit=100_000))
        assert job.once() == first  # only its own entry since: nothing new to anchor
        assert len(store.audit_entries(limit=100_000)) == count
        store.append_audit("note", {"later": 1}, now=99.0, scope="default", operation_id="op-1")
        assert job.once() != first
        kinds = [e.kind for e in store.audit_entries(limit=100_000)]
        assert kinds.count("audit_anchored") == 2
        by = json.loads(store.audit_entries(limit=100_000)[-1].detail_text)["by"]
        assert by == "system:anchor"


class TestAnchorCLI:
    """``effectgate audit anchor`` and ``--verify`` over a real ledger file; exit 3 on tamper."""

    def test_anchor_then_verify_then_tamper(self, tmp_path: Path) -> None:
        from effectgate.store import SQLiteStore

        path = tmp_path / "ledger.db"
        store = SQLiteStore(str(path))
        try:
            fill(store)
        finally:
            store.close()
        anchors = tmp_path / "anchors.jsonl"
        env = {**os.environ, "EG_ANCHOR_KEY": "k1", "COLUMNS": "200"}

        def run(*extra: str) -> subprocess.CompletedProcess[str]:
            args = ["audit", "anchor", "--store", f"sqlite:///{path}", "--file", str(anchors)]
            return subprocess.run(
                [sys.executable, "-m", "effectgate", *args, "--key-env", "EG_ANCHOR_KEY", *extra],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                check=False,
            )

        missing = run("--verify")
        assert missing.returncode == 3 and "no checkpoint" in missing.stderr
        done = run()
        assert done.returncode == 0, done.stderr
        assert "anchored" in done.stdout
        ok = run("--verify")
        assert ok.returncode == 0, ok.stderr
        store = SQLiteStore(str(path))
        try:
            # The anchoring is recorded, naming who ran it (no token: the OS user).
            last = store.audit_entries(limit=10_000)[-1]
            assert last.kind == "audit_anchored"
            assert json.loads(last.detail_text)["by"].startswith("os:")
            truncate_tail(store)  # that entry: only the next anchoring covers it
            truncate_tail(store)  # an anchored one
        finally:
            store.close()
        bad = run("--verify", "--json")
        assert bad.returncode == 3
        assert {f["problem"] for f in json.loads(bad.stdout)["findings"]} & {"truncated", "head"}


class TestScheduledAnchoring:
    """``[anchor]`` in the service config: checkpoints on a schedule, beside the reconciler."""

    def test_the_service_anchors_on_its_schedule(self, tmp_path: Path) -> None:
        import time

        from effectgate._service import Service, parse_config
        from effectgate.adapters.paper import PaperAdapter, PaperVenue
        from servicekit import config_text

        target = tmp_path / "anchors.jsonl"
        text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db")
        text += f'\n[anchor]\ninterval = 0.2\nfiles = ["{target}"]\n'
        svc = Service(parse_config(text, "t.toml"), adapters={"venue": PaperAdapter(PaperVenue())})

        def lines() -> int:
            return len(target.read_text().splitlines()) if target.exists() else 0

        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and lines() < n:
                time.sleep(0.1)

        try:
            svc.start_reconciler()
            wait_for(1)
            assert lines() == 1
            # Nothing written since but its own audit_anchored entry: no new checkpoint.
            time.sleep(0.7)
            assert lines() == 1
            svc.store.append_audit("note", {"n": 1}, now=1.0, scope="default", operation_id="x")
            wait_for(2)
            assert lines() == 2
            result, found = verify_against_anchors(svc.store, [FileAnchor(target)])
            assert result.ok and found
        finally:
            svc.close()

    def test_an_anchor_section_without_a_provider_is_refused(self, tmp_path: Path) -> None:
        from effectgate._service import parse_config
        from servicekit import config_text

        text = config_text(store_url=f"sqlite:///{tmp_path}/l.db") + "\n[anchor]\ninterval = 5\n"
        with pytest.raises(ConfigError, match="files, urls or command"):
            parse_config(text, "t.toml")
