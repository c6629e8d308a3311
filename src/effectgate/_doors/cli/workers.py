"""``effectgate serve --workers N``: N server processes sharing one listening socket.

One process holds the GIL for every request it serves; with a slow venue and many agents the
door is CPU-bound in that one interpreter (docs/benchmarks.md, B6). Several processes on one
ledger scale where the ledger allows concurrent writers (PostgreSQL; SQLite serialises them on
its write lock, so there it mostly adds contention).

The parent binds the socket, then forks the workers *before* any of them opens the ledger (no
connection or thread is shared across a fork) and only supervises: it forwards SIGINT/SIGTERM
and waits. Worker 0 alone runs the standing reconciler and dispatcher, so a fleet of workers
does not reconcile the same rows N times over. If any worker dies the others are stopped and
``serve`` fails: a silently shrunken fleet is worse than a restart by the process manager.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType

__all__ = ["MAX_WORKERS", "supervise"]

#: More processes than this on one host is a configuration mistake, not a deployment.
MAX_WORKERS = 64


def supervise(workers: int, sock: socket.socket, serve_one: Callable[[int], None]) -> int:
    """Fork ``workers`` processes that each run ``serve_one(index)``; the exit code to return.

    0 when every worker stopped cleanly after a signal; 1 when one failed or died on its own.
    """
    children: dict[int, int] = {}  # pid -> worker index
    for index in range(workers):
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                serve_one(index)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # reported by the logging set up before the fork
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
        children[pid] = index
    sock.close()  # the parent never accepts; the workers hold the socket
    stopping = False

    def forward(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            _signal(pid, signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    failed = False
    try:
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            children.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            # uvicorn re-raises the signal it stopped on once it has shut down cleanly.
            clean = code == 0 or (stopping and -code in (signal.SIGINT, signal.SIGTERM))
            if not clean or not stopping:
                # A worker that stops on its own leaves the fleet short: stop the rest too.
                failed = True
                if not stopping:
                    stopping = True
                    for other in children:
                        _signal(other, signal.SIGTERM)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 1 if failed else 0


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already: the wait loop collects it
        os.kill(pid, signum)
