"""``effectgate continue`` and ``effectgate ops show`` over a starter config (real processes):
the CLI front door of continuations (docs/continuations.md). Invariant 9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from effectgate._service._starter import write_starter
from effectgate.examples import EXAMPLE_ORDER

ORDER = {k: v for k, v in EXAMPLE_ORDER.items() if k not in ("order_type", "strategy_id")}


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
        cwd=str(tmp_path),
    )


class TestContinueCommand:
    def test_compensate_through_the_cli_and_show_the_chain(self, tmp_path: Path) -> None:
        """The operator compensates a submitted order with the fence `ops show` printed; a
        stale fence is refused with the error's code and changes nothing."""
        from effectgate._doors.cli.service import service_from

        starter = write_starter(tmp_path)
        config = str(starter.config)
        service = service_from(config, create=True)
        try:
            row = service.gate.submit("submit_order", "op-1", ORDER, principal="agent-1")
        finally:
            service.close()
        assert row.venue_id
        shown = json.loads(_run(tmp_path, "ops", "show", "op-1", "--config", config).stdout)
        chain = shown["continuations"]
        assert chain["next_seq"] == 1 and chain["continuations"] == []
        cancel = {
            "intent_version": "1",
            "action": "cancel_order",
            "instrument": EXAMPLE_ORDER["instrument"],
            "order_ref": row.venue_id,
        }
        common = [
            "--config",
            config,
            "--proof",
            "applied_effect",
            "--evidence",
            "venue_record",
            "--reference",
            row.venue_id,
            "--intent",
            json.dumps(cancel),
        ]
        stale = _run(
            tmp_path, "continue", "compensate", "op-1", *common, "--seq", "1",
            "--predecessor", "0" * 64,
        )  # fmt: skip
        assert stale.returncode == 1, stale.stderr
        assert json.loads(stale.stdout)["reason"] == "stale_predecessor"
        done = _run(
            tmp_path, "continue", "compensate", "op-1", *common, "--seq", "1",
            "--predecessor", chain["predecessor_digest"],
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        out = json.loads(done.stdout)
        assert out["continuation"]["operation_id"] == "cont:op-1:1"
        assert out["chain"]["continuations"][0]["kind"] == "compensate"
        shown = json.loads(_run(tmp_path, "ops", "show", "cont:op-1:1", "--config", config).stdout)
        assert shown["continuation_of"]["original"] == "op-1"
