"""Blocking work off the event loop, on the request path: one executor hop per call.

Starlette's ``run_in_threadpool`` goes through anyio's worker-thread machinery (a capacity
limiter, a cancel scope and checkpoints around every call). On the action path that cost
about twice a plain executor hop (measured: 110 against 57 us of CPU per hop at 16 concurrent
callers, ``docs/benchmarks.md``), and each request makes two (the token lookup, the action).
:func:`offload` is the plain hop, with the caller's context variables (trace context) carried
into the worker. A cancelled caller stops waiting; the call itself runs to its end (a thread
cannot be interrupted), as the journal requires: the outcome is in the ledger either way.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from effectgate.errors import ConfigError

__all__ = ["WORKERS", "offload"]

P = ParamSpec("P")
T = TypeVar("T")


#: Sized for calls in flight, not for cores: a worker waiting on a venue that answers in 100 ms
#: holds no lock, no ledger connection and almost no CPU, so 256 agents against such a venue need
#: 256 workers or the door caps throughput at workers / latency (40 workers: 400/s). Threads are
#: started on demand, so a quiet service holds few. ``EFFECTGATE_REQUEST_WORKERS`` overrides it.
def _workers(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 4096:
        raise ConfigError(f"EFFECTGATE_REQUEST_WORKERS must be an integer in 1..4096, got {raw!r}")
    return int(raw)


WORKERS = _workers(os.environ.get("EFFECTGATE_REQUEST_WORKERS", "256"))

# Built at import: the executor starts its threads on demand, so an idle process holds none.
_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="effectgate-request")


async def offload(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread, in a copy of the caller's context."""
    ctx = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, lambda: ctx.run(fn, *args, **kwargs))
