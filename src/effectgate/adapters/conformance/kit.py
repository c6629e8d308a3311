"""The adapter conformance kit: does an adapter, against a real venue or sandbox, keep
effectgate's promises? Public through :mod:`effectgate.testing` and the ``effectgate`` pytest
plugin; docs/adapters.md explains each check and how to run it.

The kit *measures*; it never takes a venue's documentation on trust. Each check ends ``pass``,
``fail`` (the adapter breaks effectgate's contract: fix it), ``not-kept`` (the venue does not
keep a promise; the report says what effectgate does about it) or ``n/a`` (the driver cannot
exercise it). The report (adapter, versions, venue, date, results, a SHA-256 digest of the rest)
is what a class's ``[classes.NAME.venue] conformance_report`` names; ``effectgate check`` claims
exactly-once only for a class whose venue declares ``honours_key = "true"`` and whose report
verifies and measured the key honoured.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from effectgate._core.receipts import proof_text
from effectgate._core.resolution import Proof
from effectgate._execute.adapter import Adapter, Listing, Outcome, VenueRecord
from effectgate._execute.adapter import iter_records as _iter_records
from effectgate._execute.windowing import SpillStats, sorted_window
from effectgate.adapters.conformance.reads import check_reads_bounded
from effectgate.adapters.conformance.report import ConformanceReport, VenueDriver, _digest
from effectgate.adapters.conformance.speculation import check_speculation_leaves_no_effect
from effectgate.errors import AdapterError, ConfigError

__all__ = [
    "AT_MOST_ONCE",
    "EXACTLY_ONCE",
    "ConformanceReport",
    "VenueDriver",
    "delivery_claim",
    "read_report",
    "run_conformance",
]

EXACTLY_ONCE = "exactly-once"
AT_MOST_ONCE = "at-most-once dispatch with reconciliation"


def adapter_kind(adapter: Adapter) -> str:
    """What a report names: the adapter's ``kind`` where it has one (an adapter whose ``name``
    is per instance, such as the MCP gateway's ``mcp-upstream``), else its ``name``."""
    kind = getattr(adapter, "kind", None)
    return kind if isinstance(kind, str) and kind else adapter.name


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("effectgate")
    except PackageNotFoundError:
        return "unknown"


def read_report(path: str | Path) -> ConformanceReport:
    """A report as written by :meth:`ConformanceReport.write`; its digest must verify."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        body = {
            k: raw[k]
            for k in (
                "adapter",
                "venue",
                "listing",
                "honours_key",
                "measured_lag",
                "versions",
                "date",
                "results",
            )
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"conformance report {str(path)!r} cannot be read: {type(exc).__name__}: {exc}"
        ) from None
    if raw.get("digest") != _digest(body):
        raise ConfigError(f"conformance report {str(path)!r}: digest does not verify (edited?)")
    rep = ConformanceReport(
        adapter=body["adapter"],
        venue=body["venue"],
        listing=body["listing"],
        results=body["results"],
        honours_key=body["honours_key"],
        measured_lag=body["measured_lag"],
        versions=body["versions"],
        date=body["date"],
    )
    rep.digest = raw["digest"]
    return rep


def _listing(
    adapter: Adapter, start: float, end: float, stats: SpillStats | None = None
) -> list[VenueRecord]:
    if adapter.listing is Listing.KEY_ORDER:
        return list(_iter_records(adapter, page_size=3))
    if adapter.listing is Listing.TIME_WINDOW:
        # A tiny chunk forces the spill path: bounded memory is part of what is checked.
        return list(sorted_window(adapter.window_records(start, end), chunk=2, stats=stats))
    return []


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def run_conformance(
    adapter: Adapter,
    driver: VenueDriver,
    *,
    horizon: float = 5.0,
    prefix: str | None = None,
    versions: dict[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> ConformanceReport:
    """Run every check against ``adapter`` and ``driver``'s venue; return the report."""
    prefix = prefix or f"kit{int(clock() * 1000) % 10**9}"
    report = ConformanceReport(
        adapter=adapter_kind(adapter),
        venue=driver.venue,
        listing=adapter.listing.value,
        versions={
            "effectgate": _version(),
            "python": platform.python_version(),
            **(versions or {}),
        },
        date=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    capture = _Capture()
    root = logging.getLogger()
    root.addHandler(capture)
    texts: list[str] = [repr(adapter)]
    try:
        _run(adapter, driver, report, horizon, prefix, clock, texts)
    finally:
        root.removeHandler(capture)
    leaked = [s for s in driver.secrets() if s and any(s in t for t in texts + capture.lines)]
    report.add(
        "credentials-never-leak",
        "fail" if leaked else "pass",
        f"{len(leaked)} secret(s) found"
        if leaked
        else f"searched {len(texts)} receipts/errors/reprs and {len(capture.lines)} log lines",
    )
    report.seal()
    return report


def _run(
    adapter: Adapter,
    driver: VenueDriver,
    report: ConformanceReport,
    horizon: float,
    prefix: str,
    clock: Callable[[], float],
    texts: list[str],
) -> None:
    start = clock() - 5
    key = f"{prefix}:twice"
    receipts = [adapter.execute(driver.request(key), timeout=10.0) for _ in range(2)]
    texts += [repr(r) for r in receipts]
    ids = {r.venue_id for r in receipts if r.outcome is Outcome.APPLIED}
    # Read back, waiting up to the horizon for a lagging read view.
    seen: list[str] = []
    waited = 0.0
    began = clock()
    while adapter.listing is not Listing.PROBE or driver.delivered(key) is None:
        seen = adapter.probe(key)
        if seen or clock() - began >= horizon:
            break
        time.sleep(0.2)
    waited = clock() - began
    if adapter.listing is Listing.PROBE:
        n = driver.delivered(key)
        if n is None:
            report.add("same-key-twice", "n/a", "no read view and no way to count deliveries")
        else:
            _key_verdict(report, n, "deliveries counted at the far end", readable=False)
    else:
        report.measured_lag = round(waited, 3)
        if not seen:
            report.add(
                "same-key-twice",
                "fail",
                f"nothing visible under the key after {horizon:g}s (the horizon)",
            )
        else:
            _key_verdict(report, len(seen), f"receipts named {len(ids)} id(s)")
        report.add(
            "read-lag-within-horizon",
            "pass" if seen else "fail",
            f"visible after {waited:.2f}s; horizon {horizon:g}s",
        )
    # Listing: every record once, duplicates included, bounded memory; probe agrees.
    other = f"{prefix}:once"
    one = adapter.execute(driver.request(other), timeout=10.0)
    texts.append(repr(one))
    orphan_id = driver.direct_effect()
    if adapter.listing is Listing.PROBE:
        report.add(
            "listing",
            "n/a",
            "probe-only venue: nothing to list; uncertain rows wait for an operator",
        )
        report.add("probe-agrees-with-listing", "n/a", "no listing")
        report.add(
            "orphan-visible",
            "not-kept" if orphan_id is None else "n/a",
            "no read view: an effect made directly at the venue cannot be seen",
        )
    else:
        time.sleep(min(horizon, 0.5))
        stats = SpillStats()
        listed = _listing(adapter, start, clock() + 5, stats)
        venue_ids = [r.venue_id for r in listed]
        in_order = listed == sorted(listed)
        unique = len(venue_ids) == len(set(venue_ids))
        ours = sorted(r.venue_id for r in listed if r.operation_key == key)
        ok = in_order and unique and ours == sorted(seen)
        report.add(
            "listing",
            "pass" if ok else "fail",
            f"{len(listed)} records, key order {in_order}, each once {unique}, "
            f"{len(ours)} under the doubled key"
            + (
                f", {stats.spilled_runs} runs spilled"
                if adapter.listing is Listing.TIME_WINDOW
                else ""
            ),
        )
        probes_ok = all(
            adapter.probe(k) == sorted(r.venue_id for r in listed if r.operation_key == k)
            for k in (key, other)
        )
        report.add(
            "probe-agrees-with-listing",
            "pass" if probes_ok else "fail",
            "probe(key) equals the listing's records under key",
        )
        if orphan_id is None:
            report.add("orphan-visible", "n/a", "the driver cannot make a direct effect")
        else:
            hit = [r for r in listed if r.venue_id == orphan_id]
            good = len(hit) == 1 and ":" not in hit[0].operation_key.partition("/")[0]
            report.add(
                "orphan-visible",
                "pass" if good else "fail",
                f"direct effect {orphan_id} listed under {hit[0].operation_key if hit else None!r}",
            )
    check_speculation_leaves_no_effect(
        adapter,
        driver,
        report,
        prefix,
        lambda: _listing(adapter, start, clock() + 5),
        horizon,
        texts,
    )
    # Unknown stays unknown; only a provable refusal is not_applied.
    try:
        dead = driver.unreachable()
        r = dead.execute(driver.request(f"{prefix}:dead"), timeout=2.0)
        texts.append(repr(r))
        if r.outcome is Outcome.UNKNOWN:
            # The protocol's other way to say "unknown": a receipt the gate leaves uncertain.
            report.add(
                "unreachable-is-unknown",
                "pass",
                "returned an unknown receipt (the row stays uncertain)",
            )
        elif r.outcome is Outcome.NOT_APPLIED and r.proof:
            # Allowed only with proof that nothing was sent; transport-classification
            # measures whether the adapter claims that only when it is true.
            report.add(
                "unreachable-is-unknown", "pass", f"not_applied with proof: {_said(r.proof)}"
            )
        else:
            report.add(
                "unreachable-is-unknown",
                "fail",
                f"returned {r.outcome.value} instead of raising or an unknown receipt",
            )
    except AdapterError as exc:
        texts += [str(exc), repr(exc)]
        report.add(
            "unreachable-is-unknown", "pass", "raised AdapterError (the row stays uncertain)"
        )
    except Exception as exc:
        texts += [str(exc), repr(exc)]
        report.add(
            "unreachable-is-unknown",
            "pass",
            f"raised {type(exc).__name__} (treated as unknown by the gate)",
        )
    _transport_classification(driver, report, prefix, texts)
    check_reads_bounded(adapter, driver, report, prefix, texts)
    bad = driver.refused_request(f"{prefix}:refused")
    if bad is None:
        report.add("refusal-is-not-applied", "n/a", "the driver has no provably refused request")
    else:
        try:
            r = adapter.execute(bad, timeout=10.0)
            texts.append(repr(r))
            status = "pass" if r.outcome is Outcome.NOT_APPLIED and r.proof else "fail"
            report.add("refusal-is-not-applied", status, f"{r.outcome.value}: {_said(r.proof)}")
        except AdapterError as exc:
            texts += [str(exc), repr(exc)]
            report.add(
                "refusal-is-not-applied",
                "fail",
                "a provable refusal raised (unknown) instead of not_applied",
            )


def _transport_classification(
    driver: VenueDriver, report: ConformanceReport, prefix: str, texts: list[str]
) -> None:
    """Each transport failure, produced for real on loopback: ``not_applied`` is allowed only
    where no request byte can have left (refused, TLS handshake reset); where the request was
    or may have been written (a reset after connecting, a timeout) the outcome must be unknown."""
    from effectgate.adapters.conformance.transport_faults import FaultServer, refused_url

    point = getattr(driver, "pointed_at", None)
    if point is None or point(refused_url()) is None:
        report.add("transport-classification", "n/a", "the driver cannot point the adapter")
        return
    seen: list[str] = []
    wrong: list[str] = []

    def attempt(name: str, url: str, may_prove: bool) -> None:
        adapter = point(url)
        try:
            r = adapter.execute(driver.request(f"{prefix}:tx-{name}"), timeout=1.0)
            texts.append(repr(r))
            got = r.outcome.value
            if r.outcome is Outcome.APPLIED or not may_prove or not r.proof:
                wrong.append(f"{name} gave {got}")
        except Exception as exc:  # any raise is "unknown" to the gate
            texts.extend([str(exc), repr(exc)])
            got = "unknown"
        finally:
            close = getattr(adapter, "close", None)
            if callable(close):
                close()
        seen.append(f"{name}: {got}")

    attempt("refused", refused_url(), True)
    for name, mode, scheme, may_prove in (
        ("tls-handshake-reset", "reset-before", "https", True),
        # Races the connect (not_applied if it lands there, else unknown): both are right.
        ("reset-at-connect", "reset-before", "http", True),
        ("reset-after-request", "reset-after", "http", False),
        ("timeout-after-request", "hang", "http", False),
    ):
        with FaultServer(mode) as server:  # type: ignore[arg-type]
            attempt(name, server.url(scheme), may_prove)
    report.add(
        "transport-classification",
        "fail" if wrong else "pass",
        ("; ".join(wrong) + " (not_applied without proof of non-execution)")
        if wrong
        else ", ".join(seen),
    )


def _key_verdict(report: ConformanceReport, n: int, how: str, *, readable: bool = True) -> None:
    if n == 1:
        report.honours_key = "true"
        report.add("same-key-twice", "pass", f"one effect for two sends ({how})")
    else:
        report.honours_key = "false"
        report.add(
            "same-key-twice",
            "not-kept",
            f"{n} effects for two sends ({how}): the venue ignores the key; "
            + (
                "the sweep reports duplicate-effect and opens the class's breaker"
                if readable
                else "no read view, so no sweep can see a duplicate: declare honours_key = false"
            )
            + "; claim: "
            + AT_MOST_ONCE,
        )


def delivery_claim(honours_key: str, report_path: str | None, adapter: str) -> tuple[str, str]:
    """(claim, why) for one class: exactly-once only where declared and verified by a report."""
    if honours_key != "true":
        return AT_MOST_ONCE, f"the venue contract says honours_key = {honours_key!r}"
    if report_path is None:
        return AT_MOST_ONCE, "honours_key is declared but no conformance_report verifies it"
    try:
        rep = read_report(report_path)
    except ConfigError as exc:
        return AT_MOST_ONCE, exc.message
    if rep.adapter != adapter:
        return AT_MOST_ONCE, f"the report is for adapter {rep.adapter!r}, not {adapter!r}"
    if rep.honours_key != "true" or rep.results.get("same-key-twice", {}).get("status") != "pass":
        return AT_MOST_ONCE, f"the report ({rep.date}, {rep.venue}) measured the key not honoured"
    if rep.failed:
        return AT_MOST_ONCE, f"the report has failed checks: {', '.join(rep.failed)}"
    return EXACTLY_ONCE, f"key honoured, verified by {report_path} ({rep.date}, {rep.venue})"


def _said(proof: Proof | None) -> str:
    """A receipt's proof as one line of a report."""
    return "none" if proof is None else f"{proof.kind.value}: {proof_text(proof)}"
