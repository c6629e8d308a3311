"""The examples/ agents (issue 17) run as a user runs them: each pauses for an approval, an
approver principal approves, the run resumes and the venue shows exactly one effect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class TestEachFrameworkExampleRuns:
    @pytest.mark.parametrize(
        "script", ["langgraph_agent.py", "openai_agents_agent.py", "pydantic_ai_agent.py"]
    )
    def test_paused_approved_resumed_one_effect(self, script: str) -> None:
        out = subprocess.run(
            [sys.executable, str(EXAMPLES / script)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert "paused:" in out.stdout
        assert "outcome: done" in out.stdout
        assert out.stdout.rstrip().endswith("effects at the venue: 1"), out.stdout
