"""Run docs/quickstart.md's five commands as pasted, on the bare install (issue 39 item 1).

In a scratch git copy of this checkout (tracked and unignored files), the first ```sh block
runs in one bash: it makes its own .venv with `pip install -e .`, no extra. After a line that
starts a server in the background the runner waits for its port, as a reader would see its
first line. Then: the reconcile must exit 3 naming the orphan, the commands the prose names
must work, the venv must hold none of the server extra, and git must see nothing untracked.
Standard library only; run by .ci/run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT = (
    "for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; "
    "sleep 0.1; done"
)


def pasted_block() -> str:
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    found = re.search(r"```sh\n(.*?)```", text, re.S)
    if found is None:
        sys.exit("docs/quickstart.md has no ```sh block")
    lines = []
    for line in found.group(1).splitlines():
        lines.append(line)
        port = re.search(r"--port (\d+).*&\s*$", line)
        if port:
            lines.append(WAIT.format(port=port.group(1)))
    return "\n".join(lines)


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="quickstart-"))
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, scratch / name)
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=scratch, check=True)
    subprocess.run([*git, "add", "-A"], cwd=scratch, check=True)
    subprocess.run([*git, "commit", "-qm", "checkout"], cwd=scratch, check=True)
    after = (
        "rc=$?\n"
        'echo "== reconcile exit $rc"\n'
        "effectgate divergences --config effectgate.toml || exit 90\n"
        "effectgate alerts list --config effectgate.toml || exit 91\n"
        "python -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in "
        '("fastapi", "uvicorn", "mcp", "jinja2")))\' || exit 92\n'
        'kill $(jobs -p) 2>/dev/null; wait; exit "$rc"\n'
    )
    script = pasted_block() + "\n" + after
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script], cwd=scratch, capture_output=True, text=True, timeout=600
    )
    print(done.stdout, done.stderr, sep="\n")
    problems = []
    if done.returncode != 3:
        problems.append(f"the quickstart exited {done.returncode}, not 3 (the orphan's alarm)")
    if "ALARM orphan key=default:op-outside" not in done.stderr:
        problems.append("no orphan alarm for default:op-outside")
    if "Traceback" in done.stdout + done.stderr:
        problems.append("a traceback")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=scratch, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if status.strip():
        problems.append(f"left in git status:\n{status}")
    shutil.rmtree(scratch, ignore_errors=True)
    if problems:
        sys.exit("quickstart FAILED: " + "; ".join(problems))
    print(f"quickstart ran as pasted on the bare install ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
