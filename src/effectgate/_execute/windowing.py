"""Key order for venues that do not list by key: a time window, sorted with bounded memory.

Stripe lists by creation time and EC2 by instance; neither lists by the operation key the
reconciler merge-joins on. :func:`sorted_window` takes the records of one time window in the
venue's order and yields them sorted by (operation key, venue id), holding at most ``chunk``
records in memory: a larger window is cut into sorted runs spilled to temporary files and
merged (``heapq.merge``), so a window of any size costs one run in memory plus one record per
run. :func:`judged_in_window` says which ledger rows the window can judge: a row submitted
before the window's start may have its record before it too, so its absence proves nothing.
"""

from __future__ import annotations

import heapq
import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from effectgate._execute.adapter import VenueRecord

__all__ = ["SpillStats", "judged_in_window", "sorted_window"]


class SpillStats:
    """What one sort did: records seen, runs spilled (0: it fitted in memory)."""

    def __init__(self) -> None:
        self.records = 0
        self.spilled_runs = 0


def _spill(run: list[VenueRecord]) -> IO[str]:
    run.sort()
    out = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by the merge
    for rec in run:
        out.write(json.dumps([rec.operation_key, rec.venue_id]) + "\n")
    out.seek(0)
    return out


def _read(file: IO[str]) -> Iterator[VenueRecord]:
    try:
        for line in file:
            key, venue_id = json.loads(line)
            yield VenueRecord(key, venue_id)
    finally:
        file.close()


def sorted_window(
    records: Iterable[VenueRecord], *, chunk: int = 10_000, stats: SpillStats | None = None
) -> Iterator[VenueRecord]:
    """``records`` sorted by (key, venue id), at most ``chunk`` of them in memory at once.

    Every record is yielded once, duplicates included (invariant 5): nothing is merged by key.
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    stats = stats if stats is not None else SpillStats()
    runs: list[IO[str]] = []
    buffer: list[VenueRecord] = []
    try:
        for rec in records:
            stats.records += 1
            buffer.append(rec)
            if len(buffer) >= chunk:
                runs.append(_spill(buffer))
                stats.spilled_runs += 1
                buffer = []
    except BaseException:
        for file in runs:
            file.close()
        raise
    buffer.sort()
    if not runs:
        yield from buffer
        return
    yield from heapq.merge(*(_read(f) for f in runs), iter(buffer))


def judged_in_window(submitted_at: float | None, window_start: float) -> bool:
    """Whether the window's listing can judge a ledger row's absence.

    Only rows submitted at or after the window's start: their record, if any, was created after
    they were journalled (journal before dispatch), so it is inside the window. Older rows are
    left to per-key probes: a listing that no longer shows them (EC2 drops terminated
    instances) is not evidence that they are missing.
    """
    return submitted_at is not None and submitted_at >= window_start
