"""``effectgate bench``: each workload's figure, the floor measured beside it, and the ratio."""

from __future__ import annotations

import contextlib
import json
import logging
import platform
import time
from collections.abc import Callable
from typing import Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table

from effectgate.bench.common import Figure, Target

__all__ = ["WORKLOADS", "register", "run_bench"]

WORKLOADS = ("B1", "B2", "B3", "B4", "B5", "B6")

#: Sizes of the full run and of ``--smoke`` (CI: tiny, seconds, asserts nothing about speed).
#: B6's entry is the fleet sizes (agents); its action count is ``--n`` or 30 per agent.
FULL = {"B1": 5000, "B2": 3000, "B3": 10_000, "B4": (500_000, 5_000_000), "B5": 3000, "B6": (256,)}
SMOKE = {"B1": 60, "B2": 40, "B3": 40, "B4": (3_000, 6_000), "B5": 40, "B6": (4,)}


def run_bench(
    url: str | None,
    workloads: list[str],
    *,
    n: int | None = None,
    smoke: bool = False,
    rows: tuple[int, ...] | None = None,
    agents: tuple[int, ...] | None = None,
    latency_ms: float = 100.0,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the workloads; the figures plus a description of the run (JSON-able)."""
    sizes = SMOKE if smoke else FULL
    target = Target(url)
    figures: list[Figure] = []
    skipped: dict[str, str] = {}
    started = time.time()
    try:
        for name in workloads:
            progress(f"running {name} on {target.label}")
            t0 = time.perf_counter()
            if name == "B6":
                from effectgate.bench import b6

                fleets = agents or cast(tuple[int, ...], sizes["B6"])
                out: list[Figure] | str = b6.run(target, n, agents=fleets, latency_ms=latency_ms)
            else:
                out = _one(name, target, n, sizes, smoke, rows)
            if isinstance(out, str):
                skipped[name] = out
            else:
                figures.extend(out)
            progress(f"{name} done in {time.perf_counter() - t0:.1f}s")
    finally:
        target.close()
    return {
        "store": target.dialect,
        "smoke": smoke,
        "started": started,
        "machine": machine(),
        "figures": [f.to_dict() for f in figures],
        "skipped": skipped,
    }


def _one(
    name: str,
    target: Target,
    n: int | None,
    sizes: dict[str, Any],
    smoke: bool,
    rows: tuple[int, ...] | None,
) -> list[Figure] | str:
    if name == "B1":
        from effectgate.bench import b1

        return b1.run(target, n or sizes["B1"])
    if name == "B2":
        if target.dialect != "postgresql":
            return "needs a PostgreSQL store (--store postgresql://...)"
        from effectgate.bench import b2

        return b2.run(target, n or sizes["B2"], smoke=smoke)
    if name == "B3":
        from effectgate.bench import b3

        return b3.run(target, n or sizes["B3"], smoke=smoke)
    if name == "B4":
        from effectgate.bench import b4

        return b4.run(target, rows or sizes["B4"])
    if name == "B5":
        from effectgate.bench import b5

        return b5.run(target, n or sizes["B5"], smoke=smoke)
    raise typer.BadParameter(f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}")


def machine() -> dict[str, Any]:
    import os

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    with contextlib.suppress(ValueError, OSError):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import sqlite3

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit.endswith("/s"):
        return f"{value:,.0f} {unit}"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    return f"{value:g} {unit}"


def _notes(f: dict[str, Any]) -> str:
    notes = f["notes"]
    parts = []
    for key, value in notes.items():
        if isinstance(value, dict):
            inner = ", ".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
            parts.append(f"{key}: {inner}")
        else:
            parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return "; ".join(parts)


def print_report(report: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"effectgate bench on {report['store']}"
        + (" (smoke: sizes too small to mean anything)" if report["smoke"] else "")
    )
    for col in ("workload", "variant", "effectgate", "floor", "ratio", "notes"):
        table.add_column(col, overflow="fold")
    for f in report["figures"]:
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.2f}x"
        table.add_row(
            f["workload"],
            f["variant"],
            _fmt(f["effectgate"], f["unit"]),
            _fmt(f["floor"], f["unit"]),
            ratio,
            _notes(f),
        )
    console.print(table)
    for name, why in report["skipped"].items():
        console.print(f"{name} skipped: {why}")


def register(app: typer.Typer) -> None:
    """Add ``bench`` to the operators' CLI."""

    @app.command()
    def bench(
        store: Annotated[
            str | None,
            typer.Option(
                "--store",
                help="Where to run: sqlite:///PATH (fresh files beside PATH) or "
                "postgresql://... (a fresh schema per workload). Default: a temporary SQLite file.",
            ),
        ] = None,
        workload: Annotated[
            str, typer.Option("--workload", help="Comma-separated workloads: B1,B2,B3,B4,B5,B6.")
        ] = "B1,B3,B4",
        n: Annotated[
            int | None,
            typer.Option("--n", min=1, help="Actions (B1, B2, B5) or operation ids (B3)."),
        ] = None,
        rows: Annotated[
            str | None,
            typer.Option(
                "--rows", help="B4 ledger sizes, comma-separated (default 500000,5000000)."
            ),
        ] = None,
        agents: Annotated[
            str | None,
            typer.Option("--agents", help="B6 fleet sizes, comma-separated (default 256)."),
        ] = None,
        latency_ms: Annotated[
            float,
            typer.Option(
                "--latency-ms", min=0.0, max=30_000.0, help="B6: the venue's answer time (ms)."
            ),
        ] = 100.0,
        smoke: Annotated[
            bool,
            typer.Option(
                "--smoke", help="Tiny sizes: checks the machinery runs, measures nothing."
            ),
        ] = False,
        json_out: Annotated[
            str | None, typer.Option("--json", help="Also write the figures as JSON to this file.")
        ] = None,
    ) -> None:
        """Measure effectgate against the raw-SQL floor on the same store, in the same run."""
        logging.basicConfig(level=logging.CRITICAL)  # divergences are expected in B3/B4
        names = [w.strip().upper() for w in workload.split(",") if w.strip()]
        for name in names:
            if name not in WORKLOADS:
                raise typer.BadParameter(
                    f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}",
                    param_hint="--workload",
                )
        sizes = tuple(int(r) for r in rows.split(",")) if rows else None
        fleets = _counts(agents, "--agents", "fleet sizes", 1 << 16)
        console = Console()
        err = Console(stderr=True)
        report = run_bench(
            store,
            names,
            n=n,
            smoke=smoke,
            rows=sizes,
            agents=fleets,
            latency_ms=latency_ms,
            progress=lambda msg: err.print(f"[dim]{msg}[/dim]"),
        )
        print_report(report, Console(width=max(console.width, 200)))
        if json_out:
            with open(json_out, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)


def _counts(text: str | None, hint: str, what: str, top: int) -> tuple[int, ...] | None:
    """A comma-separated list of whole numbers in 1..top (None: the option was not given)."""
    if text is None:
        return None
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"{what} are whole numbers, comma-separated", param_hint=hint
        ) from None
    if not counts or min(counts) < 1 or max(counts) > top:
        raise typer.BadParameter(f"{what} must be >= 1 and <= {top}", param_hint=hint)
    return counts
