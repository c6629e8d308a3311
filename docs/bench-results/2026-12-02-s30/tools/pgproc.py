"""What pgcpu.py and replay.py share: PostgreSQL's CPU from /proc, and one loop's figures."""

import os
import time

TICK = os.sysconf("SC_CLK_TCK")


def pgcpu():
    """User + system CPU seconds of every process named postgres* (server-wide)."""
    t = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        if not s[s.index("(") + 1 : s.rindex(")")].startswith("postgres"):
            continue
        fields = s[s.rindex(")") + 2 :].split()
        t += int(fields[11]) + int(fields[12])
    return t / TICK


def per_action(fn, n):
    """Run ``fn`` (n actions): wall, this process's CPU and the server's, in us per action."""
    s0, c0, t0 = pgcpu(), time.process_time(), time.perf_counter()
    fn()
    return (
        (time.perf_counter() - t0) / n * 1e6,
        (time.process_time() - c0) / n * 1e6,
        (pgcpu() - s0) / n * 1e6,
    )
