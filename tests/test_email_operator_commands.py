"""The operator's commands in docs/adapters/email.md, run exactly as written: an uncertain email
(delivered, reply lost) is taken over into the quarantine queue and resolved applied with the
recipient's confirmation, against an aiosmtpd relay and the starter's ledger
(``effectgate init --venue email``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from effectgate import State
from effectgate._service import Service, load_config
from effectgate.adapters.email import message_id
from effectgate.testing import SimulatedCrash, crash_at
from venuekit import Mailbox, start_smtp, stop_smtp

DOC = Path(__file__).parents[1] / "docs" / "adapters" / "email.md"
OP = "refund-mail-42"
MAIL = {
    "action": "send_email",
    "intent_version": "1",
    "to": "customer@example.test",
    "subject": "Your refund",
    "body": "It is on its way.",
}


def documented_commands() -> list[str]:
    """The command lines of the doc's operator section (its first ``sh`` block)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Settling an uncertain email") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the operator section has no sh block"
    return [
        line for line in block.group(1).splitlines() if line.startswith(("effectgate ", "python "))
    ]


@pytest.fixture(scope="module")
def relay() -> Iterator[Mailbox]:
    box = start_smtp()
    yield box
    stop_smtp(box)


def run(line: str, cwd: Path, token: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line)
    argv = [sys.executable, "-m", "effectgate", *argv[1:]] if argv[0] == "effectgate" else argv
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EFFECTGATE_OPERATOR_TOKEN": token, "COLUMNS": "200"},
    )


def starter(tmp_path: Path, relay: Mailbox) -> str:
    """``effectgate init --venue email``, pointed at the test relay; the operator's token."""
    made = subprocess.run(
        [sys.executable, "-m", "effectgate", "init", "--dir", str(tmp_path), "--venue", "email"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    token = re.search(r"operator:\s+(\S+)", made.stdout)
    assert token, made.stdout
    config = tmp_path / "effectgate.toml"
    text = config.read_text()
    for old, new in (
        ('host = "smtp.example.com"', 'host = "127.0.0.1"'),
        ("port = 587", f"port = {relay.port}"),
        ("starttls = true", "starttls = false"),
        ('username = "agent@example.com"\n', ""),
        ('credential_env = "SMTP_PASSWORD"    # the NAME of the variable\n', ""),
    ):
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text)
    return token.group(1)


class TestTheDocumentedCommandsSettleAnUncertainEmail:
    def test_take_over_show_and_resolve_applied_with_the_recipients_confirmation(
        self, tmp_path: Path, relay: Mailbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Invariant 10 (a quarantined row leaves the queue only by an operator's resolution
        with evidence) for a venue with no read view: the email was delivered and no reading
        can tell; the documented commands settle it once, audited, and send nothing."""
        relay.reset()
        token = starter(tmp_path, relay)
        monkeypatch.chdir(tmp_path)
        service = Service(load_config(str(tmp_path / "effectgate.toml")))
        try:
            with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
                service.gate.submit("send_email", OP, MAIL)
            assert service.gate.get(OP).state is State.SUBMITTED
        finally:
            service.close()
        key = f"default:{OP}"
        assert relay.count(key) == 1  # delivered; the ledger cannot know
        mid = message_id(key, "example.com")

        commands = documented_commands()
        assert [shlex.split(c)[:3] for c in commands if c.startswith("effectgate")] == [
            ["effectgate", "quarantine", "take-over"],
            ["effectgate", "quarantine", "list"],
            ["effectgate", "quarantine", "show"],
            ["effectgate", "quarantine", "resolve"],
        ]
        out: dict[str, str] = {}
        for line in commands:
            done = run(line, tmp_path, token)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            name = "message-id" if line.startswith("python ") else shlex.split(line)[2]
            out[name] = done.stdout
        assert f"{key}: quarantined" in out["take-over"]
        assert key in out["list"] and "1 row(s)" in out["list"]
        assert f"ledger key : {key}" in out["show"]
        assert out["message-id"].strip() == mid  # the python one-liner prints the Message-ID
        assert f"{key}: acknowledged (applied, recipient_confirmation)" in out["resolve"]

        service = Service(load_config(str(tmp_path / "effectgate.toml")))
        try:
            row = service.gate.get(OP)
            assert row.state is State.ACKNOWLEDGED
            trail = service.store.audit_entries(scope="default", operation_id=OP, limit=100)
        finally:
            service.close()
        resolved = [e for e in trail if e.detail.get("resolution")]
        assert len(resolved) == 1
        proof = resolved[0].detail["resolution"]["proof"]  # type: ignore[index]
        assert proof["kind"] == "recipient_confirmation" and proof["reference"] == mid
        taker = [e for e in trail if "operator-take-over" in e.detail_text]
        assert taker, "the take-over is audited"
        assert relay.count(key) == 1  # settled by evidence: nothing was sent again
