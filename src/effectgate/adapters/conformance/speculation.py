"""The conformance kit's ``speculation-leaves-no-effect`` check: a dry run is read for at the
venue before and after, and nothing may appear (docs/speculation.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from effectgate._execute.adapter import Adapter, Listing, VenueRecord, speculator
from effectgate.adapters.conformance.report import ConformanceReport, VenueDriver

__all__ = ["check_speculation_leaves_no_effect"]


def check_speculation_leaves_no_effect(
    adapter: Adapter,
    driver: VenueDriver,
    report: ConformanceReport,
    prefix: str,
    listing: Callable[[], list[VenueRecord]],
    horizon: float,
    texts: list[str],
) -> None:
    """A dry run must have no effect at the venue (docs/speculation.md): the venue is read
    before and after one, and nothing may appear, under the dry run's key or any other."""
    dry_runner = speculator(adapter)
    if dry_runner is None:
        report.add("speculation-leaves-no-effect", "n/a", "the adapter cannot speculate")
        return
    key = f"{prefix}:dry"
    readable = adapter.listing is not Listing.PROBE
    before = {r.venue_id for r in listing()} if readable else set()
    try:
        dry = dry_runner.speculate(driver.request(key), attempt=1, timeout=10.0)
        texts.append(repr(dry))
        said = f"verdict {dry.verdict}"
    except Exception as exc:  # no verdict is allowed (a timeout); an effect never is
        texts += [str(exc), repr(exc)]
        said = f"no verdict ({type(exc).__name__})"
    if not readable:
        n = driver.delivered(key)
        if n is None:
            report.add("speculation-leaves-no-effect", "n/a", f"{said}; no way to read the venue")
        else:
            status = "pass" if n == 0 else "fail"
            report.add("speculation-leaves-no-effect", status, f"{said}; {n} deliveries counted")
        return
    # A lagging read view could hide the effect for a while: wait as the listing check does.
    time.sleep(min(horizon, 0.5))
    after = {r.venue_id for r in listing()}
    under_key = adapter.probe(key)
    new = sorted(after - before)
    ok = not new and not under_key
    report.add(
        "speculation-leaves-no-effect",
        "pass" if ok else "fail",
        f"{said}; venue listed {len(before)} records before and {len(after)} after, "
        f"{len(under_key)} under the dry run's key"
        + (f"; new: {', '.join(new[:3])}" if new else ""),
    )
