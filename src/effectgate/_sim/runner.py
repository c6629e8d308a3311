"""Many seeds: run them (in worker processes), shrink a failing one to its shortest failing
prefix, sum the digests in seed order."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat

from effectgate._sim.simulator import DEFAULT_STEPS, SeedResult, run_seed

__all__ = ["RunSeed", "Summary", "default_jobs", "seed_runner", "shrink", "simulate"]

#: Runs one seed for a number of steps (:func:`run_seed`, or one bound to a store or actors).
RunSeed = Callable[[int, int], SeedResult]


def seed_runner(store: str | None = None) -> RunSeed:
    """:func:`run_seed` on ``store`` (``None``: a temporary SQLite ledger per seed; a
    ``postgresql://`` URL: a fresh schema there), picklable for the worker processes."""
    return run_seed if store in (None, "sqlite") else partial(run_seed, store=store)


def shrink(failed: SeedResult, *, run: RunSeed = run_seed) -> SeedResult:
    """The shortest prefix of ``failed``'s steps that still fails (bisection).

    A run of ``k`` steps is the first ``k`` steps of the longer run, then the final phase; the
    step after which the violation was seen is an upper bound, and no steps at all never fails.
    """
    if not failed.violations:
        raise ValueError("nothing to shrink: the seed did not fail")
    hi = min(failed.failed_at or failed.steps, failed.steps)
    best = failed if hi == failed.steps else run(failed.seed, hi)
    if not best.violations:  # not reproducible at that length: keep what we have
        return failed
    lo = 0
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        attempt = run(failed.seed, mid)
        if attempt.violations:
            hi, best = mid, attempt
        else:
            lo = mid
    return best


@dataclass
class Summary:
    """What ``effectgate simulate`` prints: ``failures`` are shrunk; ``drove`` and ``faults``
    sum the seeds' counts (the full runs')."""

    seeds: int
    first_seed: int
    steps: int
    digest: str
    seconds: float
    failures: list[SeedResult] = field(default_factory=list)
    drove: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    jobs: int = 1

    @property
    def violations(self) -> int:
        return sum(len(f.violations) for f in self.failures)

    @property
    def seeds_per_s(self) -> float:
        return self.seeds / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        """What it drove, the faults it injected, then ``seeds=N violations=K ...``."""
        return [
            "drove " + _counts(self.drove),
            "faults " + _counts(self.faults),
            f"seeds={self.seeds} violations={self.violations} "
            f"history_digest={self.digest} seeds_per_s={self.seeds_per_s:.1f} jobs={self.jobs}",
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "seeds": self.seeds,
            "first_seed": self.first_seed,
            "steps": self.steps,
            "violations": self.violations,
            "history_digest": self.digest,
            "seeds_per_s": round(self.seeds_per_s, 2),
            "jobs": self.jobs,
            "drove": dict(sorted(self.drove.items())),
            "faults": dict(sorted(self.faults.items())),
            "failures": [
                {
                    "seed": f.seed,
                    "steps": f.steps,
                    "history_digest": f.digest,
                    "first_violation": {
                        "invariant": f.violations[0].invariant,
                        "message": f.violations[0].message,
                    },
                    "violations": [
                        {"invariant": v.invariant, "message": v.message} for v in f.violations
                    ],
                    "history": f.history,
                    "replay": f.replay,
                }
                for f in self.failures
            ],
        }


def _counts(counts: Counter[str]) -> str:
    return " ".join(f"{k}={n}" for k, n in sorted(counts.items())) or "nothing"


def default_jobs() -> int:
    """The cores this process may run on (``--jobs``'s default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _results(run: RunSeed, seeds: range, steps: int, jobs: int) -> Iterator[SeedResult]:
    """Each seed's result, in seed order, from ``jobs`` worker processes (1: this one).

    Each seed is a fresh world built inside its worker from the seed alone, so where it runs
    changes nothing in its history. Workers start from a fresh interpreter (forkserver, else
    spawn): a planted bug patched in this process does not reach them.
    """
    if jobs <= 1:
        yield from (run(seed, steps) for seed in seeds)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(["effectgate._sim.simulator", "effectgate._sim.actors"])
    # Chunks amortise the hand-over; small enough that both workers stay busy to the end.
    chunk = max(1, min(16, len(seeds) // (jobs * 8)))
    with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        yield from pool.map(run, seeds, repeat(steps), chunksize=chunk)


def simulate(
    seeds: int,
    *,
    first_seed: int = 0,
    steps: int = DEFAULT_STEPS,
    jobs: int = 1,
    run: RunSeed = run_seed,
    progress: Callable[[SeedResult], None] | None = None,
) -> Summary:
    """Run seeds ``first_seed .. first_seed + seeds - 1`` on ``jobs`` worker processes (at most
    one per seed); shrink each that fails, here.

    ``run(seed, steps)`` runs one seed (with ``jobs > 1`` it must be picklable: a module-level
    function or a :func:`functools.partial` of one, as :func:`seed_runner` gives). The digest
    is sha256 over the seeds' history digests in seed order (of the full runs, so it does not
    depend on shrinking, nor on ``jobs``).
    """
    if seeds < 1:
        raise ValueError("seeds must be at least 1")
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    jobs = min(jobs, seeds)
    total = hashlib.sha256()
    failures: list[SeedResult] = []
    drove: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    started = time.perf_counter()  # for seeds/s only: never part of a history
    for result in _results(run, range(first_seed, first_seed + seeds), steps, jobs):
        total.update(result.digest.encode())
        drove.update(result.drove)
        faults.update(result.faults)
        if progress is not None:
            progress(result)
        if result.violations:
            failures.append(shrink(result, run=run))
    return Summary(
        seeds,
        first_seed,
        steps,
        total.hexdigest(),
        time.perf_counter() - started,
        failures,
        drove,
        faults,
        jobs,
    )
