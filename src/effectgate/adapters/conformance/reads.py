"""Conformance check ``reads-bounded``: probe and record listing take a timeout and keep it.

The reconciler, a continuation's admission probe and the sweep's windowed listing each give the
adapter a timeout, bounded by the ceiling on one adapter call (docs/adapters.md). An adapter
whose probe ignores it can hold a reconciler pass for as long as a stuck venue likes; one that
answers "no records" when the venue did not answer turns silence into absence. The kit measures
both against a real loopback server that reads the request and never answers.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from effectgate._execute.adapter import Adapter, Listing

if TYPE_CHECKING:
    from effectgate.adapters.conformance.report import ConformanceReport, VenueDriver

__all__ = ["check_reads_bounded"]

#: The timeout the kit gives each read against the silent server, and the slack it allows.
_GIVEN = 1.0
_SLACK = 2.0


def _takes_timeout(method: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    found = params.get("timeout")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return found is not None and found.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def check_reads_bounded(
    adapter: Adapter, driver: VenueDriver, report: ConformanceReport, prefix: str, texts: list[str]
) -> None:
    names = ["probe", "records"] + (
        ["window_records"] if adapter.listing is Listing.TIME_WINDOW else []
    )
    missing = [n for n in names if not _takes_timeout(getattr(adapter, n))]
    if missing:
        report.add(
            "reads-bounded",
            "fail",
            f"{', '.join(missing)} take(s) no timeout keyword: a stuck venue would hold the "
            "reconciler",
        )
        return
    point = getattr(driver, "pointed_at", None)
    from effectgate.adapters.conformance.transport_faults import FaultServer

    with FaultServer("hang") as server:
        silent = point(server.url("http")) if point is not None else None
        if silent is None:
            report.add(
                "reads-bounded",
                "pass",
                "probe and listing take a timeout (not measured: the driver cannot point the "
                "adapter at a silent server)",
            )
            return
        try:
            problems: list[str] = []
            seen: list[str] = []
            reads: list[tuple[str, Callable[[], object]]] = [
                ("probe", lambda: silent.probe(f"{prefix}:silent", timeout=_GIVEN))
            ]
            if silent.listing is Listing.KEY_ORDER:
                reads.append(("records", lambda: silent.records(None, 10, timeout=_GIVEN)))
            elif silent.listing is Listing.TIME_WINDOW:
                now = time.time()
                reads.append(
                    (
                        "window_records",
                        lambda: list(silent.window_records(now - 60, now, timeout=_GIVEN)),
                    )
                )
            for name, read in reads:
                started = time.monotonic()
                try:
                    got = read()
                    problems.append(
                        f"{name} answered {got!r} though the venue never answered (silence "
                        "read as absence)"
                    )
                except Exception as exc:  # raising is the right answer; how long it took matters
                    texts.extend([str(exc), repr(exc)])
                took = time.monotonic() - started
                seen.append(f"{name} gave up after {took:.1f}s")
                if took > _GIVEN + _SLACK:
                    problems.append(f"{name} took {took:.1f}s with a {_GIVEN:g}s timeout")
        finally:
            close = getattr(silent, "close", None)
            if callable(close):
                close()
    report.add(
        "reads-bounded",
        "fail" if problems else "pass",
        "; ".join(problems) if problems else ", ".join(seen) + f" (timeout {_GIVEN:g}s)",
    )
