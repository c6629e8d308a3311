"""What one hop from the event loop to a worker thread costs: anyio's against a plain executor.

The HTTP door runs each blocking call of a request (the token lookup, the action) in a worker
thread. This times N hops of a no-op both ways, alone and from C concurrent callers, in one
process, and prints wall and CPU time per hop::

    python -m effectgate.bench.hop_cost --n 20000 --callers 1,16
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool

from effectgate._doors._shared.offload import offload

__all__ = ["main", "measure"]


def _noop(x: int) -> int:
    return x


async def measure(hop: Callable[[], Awaitable[int]], n: int, callers: int) -> tuple[float, float]:
    """(wall us, CPU us) per hop over ``n`` hops from ``callers`` concurrent tasks."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await hop()

    per = max(1, n // callers)
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller(per) for _ in range(callers)))
    total = per * callers
    return 1e6 * (time.perf_counter() - t0) / total, 1e6 * (time.process_time() - c0) / total


async def _run(n: int, callers: list[int]) -> None:
    hops: dict[str, Callable[[], Awaitable[int]]] = {
        "anyio (run_in_threadpool)": lambda: run_in_threadpool(_noop, 1),
        "executor (offload)": lambda: offload(_noop, 1),
    }
    for name, hop in hops.items():
        await measure(hop, 500, 1)  # warm-up: threads started, code paths hot
        for c in callers:
            wall, cpu = await measure(hop, n, c)
            print(f"{name:28} callers={c:<3} wall {wall:7.1f} us  cpu {cpu:7.1f} us per hop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--callers", default="1,16")
    args = parser.parse_args()
    asyncio.run(_run(args.n, [int(c) for c in args.callers.split(",")]))


if __name__ == "__main__":
    main()
