"""What waking costs: the same action's CPU after its thread slept, on this machine.

    python -m effectgate.bench.wake_cost [--n 3000] [--sleep-us 100] [--dir /tmp]

Under ``synchronous=FULL`` an action's thread sleeps twice, once in each commit's fsync. On a
virtual machine whose idle vCPU halts at once (no guest halt-polling), the code that runs after
each wake-up finds its caches cold, and the same Python costs more CPU: the wall-clock ratio to
the floor then pays for effectgate's larger working set twice per action. This measures it:

1. ``Gate.submit`` on SQLite with durability off, with and without two short sleeps per action
   (outside the timed call): CPU per action inside ``submit``. Then the raw B1 floor loop the
   same way (its working set is two statements).
2. User and system CPU per action of the B1 loop and of the floor, ``synchronous=OFF`` against
   ``FULL`` (``getrusage``), on the same file, in alternating order.

It prints the kernel's cpuidle governor and guest halt-poll setting where they are exposed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from effectgate.bench.b1 import _gate_loop, _sqlite_floor, floor_row, sqlite_sides

Loop = Callable[[int, int, "list[float] | None"], None]


def _idle_settings() -> dict[str, str]:
    out = {}
    for name, path in (
        ("cpuidle_governor", "/sys/devices/system/cpu/cpuidle/current_governor"),
        ("guest_halt_poll_ns", "/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
    ):
        try:
            out[name] = Path(path).read_text().strip()
        except OSError:
            out[name] = "not exposed"
    return out


def _loops(path: str, synchronous: str) -> tuple[Loop, Loop, Callable[[], None]]:
    store, gate, conn = sqlite_sides(path, synchronous)
    floor = _sqlite_floor(conn, floor_row())
    prefix = f"{synchronous}-{time.time_ns()}-"

    def eg(start: int, count: int, lat: list[float] | None) -> None:
        _gate_loop(gate, prefix, start, count, lat)

    def close() -> None:
        conn.close()
        store.close()

    return eg, floor, close


def _cpu_inside(loop: Loop, start: int, n: int, sleep_s: float) -> float:
    """CPU microseconds per action inside ``loop``, sleeping ``sleep_s`` twice before each."""
    spent = 0.0
    cpu = time.thread_time
    for i in range(start, start + n):
        if sleep_s:
            time.sleep(sleep_s)
            time.sleep(sleep_s)
        t0 = cpu()
        loop(i, 1, None)
        spent += cpu() - t0
    return spent / n * 1e6


def _rusage(loop: Loop, start: int, n: int) -> tuple[float, float, float]:
    """Wall, user and system microseconds per action of ``loop``."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    loop(start, n, None)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    scale = 1e6 / n
    return wall * scale, (r1.ru_utime - r0.ru_utime) * scale, (r1.ru_stime - r0.ru_stime) * scale


def measure(directory: str, n: int, sleep_us: float) -> dict[str, object]:
    """Both measurements; every figure is per action, in microseconds."""
    work = tempfile.mkdtemp(prefix="eg-wake-", dir=directory)
    result: dict[str, object] = {"n": n, "sleep_us": sleep_us, "machine": _idle_settings()}
    try:
        eg, floor, close = _loops(os.path.join(work, "wake.db"), "OFF")
        try:
            eg(0, 300, None)
            floor(0, 300, None)
            woken: dict[str, dict[str, float]] = {}
            for side, loop in (("effectgate", eg), ("floor", floor)):
                hot = _cpu_inside(loop, 1_000, n, 0.0)
                cold = _cpu_inside(loop, 1_000 + n, n, sleep_us / 1e6)
                woken[side] = {"awake": hot, "after_sleeps": cold, "added": cold - hot}
            result["cpu_in_call"] = woken
        finally:
            close()
        by_sync: dict[str, dict[str, dict[str, float]]] = {}
        for synchronous in ("OFF", "FULL"):
            eg, floor, close = _loops(os.path.join(work, f"sync-{synchronous}.db"), synchronous)
            try:
                eg(0, 300, None)
                floor(0, 300, None)
                sides = {}
                for side, loop in (("effectgate", eg), ("floor", floor)):
                    wall, user, system = _rusage(loop, 1_000, n)
                    sides[side] = {"wall": wall, "user": user, "sys": system}
                by_sync[synchronous] = sides
            finally:
                close()
        result["by_synchronous"] = by_sync
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(result: dict[str, object]) -> str:
    """The figures as text, with the ratios that matter."""
    lines = [f"machine: {result['machine']}"]
    woken = result["cpu_in_call"]
    if not isinstance(woken, dict):
        raise TypeError("cpu_in_call missing")
    lines.append(
        f"CPU per action inside the call, awake vs after two {result['sleep_us']:.0f} us sleeps:"
    )
    for side, f in woken.items():
        lines.append(
            f"  {side:<10} {f['awake']:7.1f} us -> {f['after_sleeps']:7.1f} us "
            f"(+{f['added']:.1f} us, x{f['after_sleeps'] / f['awake']:.2f})"
        )
    by_sync = result["by_synchronous"]
    if not isinstance(by_sync, dict):
        raise TypeError("by_synchronous missing")
    lines.append("per action (us): wall, user CPU, system CPU")
    for synchronous, sides in by_sync.items():
        for side, f in sides.items():
            lines.append(
                f"  {synchronous:<4} {side:<10} wall {f['wall']:7.1f}  "
                f"user {f['user']:7.1f}  sys {f['sys']:7.1f}"
            )
    full, off = by_sync["FULL"], by_sync["OFF"]
    lines.append(
        "user CPU, FULL over OFF: "
        + ", ".join(
            f"{side} x{full[side]['user'] / max(off[side]['user'], 1e-9):.2f}" for side in full
        )
        + f"; wall ratio to the floor under FULL: "
        f"{full['floor']['wall'] / full['effectgate']['wall']:.2f}x"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="actions per measurement")
    parser.add_argument("--sleep-us", type=float, default=100.0, help="each of the two sleeps")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="the disk to measure")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    result = measure(args.dir, args.n, args.sleep_us)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
