"""Many seeds: run them, shrink a failing one to its shortest failing prefix, sum the digests."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from effectgate._sim.simulator import DEFAULT_STEPS, SeedResult, run_seed

__all__ = ["Summary", "shrink", "simulate"]


def shrink(failed: SeedResult, store: str | None = None) -> SeedResult:
    """The shortest prefix of ``failed``'s steps that still fails (bisection).

    A run of ``k`` steps is the first ``k`` steps of the longer run, then the final phase; the
    step after which the violation was seen is an upper bound, and no steps at all never fails.
    """
    if not failed.violations:
        raise ValueError("nothing to shrink: the seed did not fail")
    hi = min(failed.failed_at or failed.steps, failed.steps)
    best = failed if hi == failed.steps else run_seed(failed.seed, hi, store=store)
    if not best.violations:  # not reproducible at that length: keep what we have
        return failed
    lo = 0
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        attempt = run_seed(failed.seed, mid, store=store)
        if attempt.violations:
            hi, best = mid, attempt
        else:
            lo = mid
    return best


@dataclass
class Summary:
    """What ``effectgate simulate`` prints: ``failures`` are shrunk."""

    seeds: int
    first_seed: int
    steps: int
    digest: str
    seconds: float
    failures: list[SeedResult] = field(default_factory=list)
    #: Faults that fired over every seed, by kind (the ledger's: ``ledger-busy``, ...).
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def violations(self) -> int:
        return sum(len(f.violations) for f in self.failures)

    @property
    def seeds_per_s(self) -> float:
        return self.seeds / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"seeds={self.seeds} violations={self.violations} "
            f"history_digest={self.digest} seeds_per_s={self.seeds_per_s:.1f}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "seeds": self.seeds,
            "first_seed": self.first_seed,
            "steps": self.steps,
            "violations": self.violations,
            "history_digest": self.digest,
            "seeds_per_s": round(self.seeds_per_s, 2),
            "faults": dict(sorted(self.faults.items())),
            "failures": [
                {
                    "seed": f.seed,
                    "steps": f.steps,
                    "violations": [
                        {"invariant": v.invariant, "message": v.message} for v in f.violations
                    ],
                    "history": f.history,
                    "replay": f.replay,
                }
                for f in self.failures
            ],
        }


def simulate(
    seeds: int,
    *,
    first_seed: int = 0,
    steps: int = DEFAULT_STEPS,
    progress: Callable[[SeedResult], None] | None = None,
    store: str | None = None,
) -> Summary:
    """Run seeds ``first_seed .. first_seed + seeds - 1``; shrink each that fails.

    The digest is sha256 over the seeds' history digests in seed order (of the full runs, so it
    does not depend on shrinking). ``store``: a ``postgresql://`` URL runs each seed on a fresh
    schema there (default: a temporary SQLite file).
    """
    if seeds < 1:
        raise ValueError("seeds must be at least 1")
    total = hashlib.sha256()
    failures: list[SeedResult] = []
    faults: Counter[str] = Counter()
    started = time.perf_counter()  # for seeds/s only: never part of a history
    for seed in range(first_seed, first_seed + seeds):
        result = run_seed(seed, steps, store=store)
        total.update(result.digest.encode())
        faults.update(result.faults)
        if progress is not None:
            progress(result)
        if result.violations:
            failures.append(shrink(result, store))
    seconds = time.perf_counter() - started
    return Summary(seeds, first_seed, steps, total.hexdigest(), seconds, failures, faults)
