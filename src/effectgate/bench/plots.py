"""Draw the figures of docs/benchmarks.md from ``effectgate bench --json`` outputs.

python -m effectgate.bench.plots --ratios b1.json pg.json b5.json \\
    --b2 pg.json --b4 b4.json --out docs/

Every plot shows effectgate as a ratio to the floor measured in the same run, with the
target as a line, and names the machine it was measured on: the processor model, core count
and Python that ``effectgate bench`` read from the machine itself (``/proc/cpuinfo``) when it
ran. Nothing about the machine is written here.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from effectgate.bench.common import TARGETS, ratio_target


def _report(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        report: dict[str, Any] = json.load(fh)
    return report


def _figures(path: str, workload: str) -> list[dict[str, Any]]:
    return [f for f in _report(path)["figures"] if f["workload"] == workload]


def machine_label(report: dict[str, Any]) -> str:
    """``measured on <cpu>, <n> cores, Python x.y`` from what the run recorded about itself;
    for a report without it, the machine drawing the plot, said as such."""
    m = report.get("machine")
    prefix = "measured on"
    if not m:
        from effectgate.bench.cli import machine

        m, prefix = machine(), "run recorded no machine; plotted on"
    return (
        f"{prefix} {m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python', '?')}"
    )


def _finish(fig: Any, ax: Any, title: str, label: str, out: str, name: str) -> None:
    ax.set_title(title)
    fig.text(0.01, 0.01, label, fontsize=7, color="0.35")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(os.path.join(out, name), dpi=120)
    plt.close(fig)


def plot_ratios(paths: Sequence[str], out: str) -> None:
    """One bar per figure with a floor (B1, B2, B5 ...): its ratio, and each workload's target."""
    rows: list[tuple[str, float, float | None]] = []
    label = ""
    for path in paths:
        report = _report(path)
        label = label or machine_label(report)
        for f in report["figures"]:
            if f.get("ratio") is None:
                continue
            store = "PG" if report.get("store") == "postgresql" else "SQLite"
            rows.append(
                (
                    f"{f['workload']} {store}\n{f['variant']}",
                    f["ratio"],
                    ratio_target(f, report.get("machine", {}).get("cores")),
                )
            )
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows)), 4.5))
    xs = range(len(rows))
    bars = ax.bar(xs, [r[1] for r in rows], color="tab:blue", label="effectgate / floor")
    for x, (_, ratio, target) in zip(xs, rows, strict=True):
        if target is not None:
            ax.hlines(target, x - 0.45, x + 0.45, colors="tab:red", linestyles="--")
        ax.annotate(f"{ratio:.2f}x", (x, ratio), ha="center", va="bottom", fontsize=8)
    ax.plot([], [], "r--", label="target")
    ax.set_xticks(list(xs), [r[0] for r in rows], fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("ratio to the floor (same run)")
    ax.set_ylim(0, max(1.0, max(b.get_height() for b in bars) * 1.15))
    ax.legend(fontsize=8)
    _finish(
        fig,
        ax,
        "effectgate against its floor, each pair in one run",
        label,
        out,
        "bench_ratios.png",
    )


def plot_b2(path: str, out: str) -> None:
    report = _report(path)
    rows = [f for f in report["figures"] if f["workload"] == "B2"]
    workers = [f["notes"]["workers"] for f in rows]
    cores = (report.get("machine") or {}).get("cores")
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(workers, [f["ratio"] for f in rows], "o-", label="effectgate / raw floor")
    ax.axhline(TARGETS["B2"], color="tab:red", linestyle="--", label="target (up to the cores)")
    if cores:
        ax.axvline(cores, color="0.5", linestyle=":", label=f"{cores} cores")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("worker processes")
    ax.set_ylabel("ratio to the floor (same run)")
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=8)
    _finish(
        fig, ax, "B2: PostgreSQL, W workers", machine_label(report), out, "bench_b2_workers.png"
    )


def plot_b4(path: str, out: str) -> None:
    report = _report(path)
    rows = [f for f in report["figures"] if f["workload"] == "B4"]
    first = [f for f in rows if "first" in f["variant"]]
    again = [f for f in rows if "repeat" in f["variant"]]
    sizes = [f["notes"]["rows"] for f in first]
    fig, (t_ax, m_ax) = plt.subplots(1, 2, figsize=(10, 4))
    t_ax.plot(sizes, [f["ratio"] for f in first], "o-", label="first sweep (repairs 2%)")
    t_ax.plot(sizes, [f["ratio"] for f in again], "^-", label="repeat sweep")
    t_ax.axhline(TARGETS["B4"], color="tab:red", linestyle="--", label="target")
    t_ax.set_xscale("log")
    t_ax.set_ylim(0, 1.1)
    t_ax.set_xlabel("ledger rows")
    t_ax.set_ylabel("ratio to raw paging + comparison")
    t_ax.legend(fontsize=8)
    t_ax.grid(alpha=0.3)
    m_ax.plot(sizes, [f["notes"]["peak_rss_mib"] for f in first], "o-", label="effectgate sweep")
    m_ax.plot(sizes, [f["notes"]["floor_peak_rss_mib"] for f in first], "s--", label="raw floor")
    m_ax.set_xscale("log")
    m_ax.set_ylim(0, max(f["notes"]["peak_rss_mib"] for f in first) * 1.5)
    m_ax.set_xlabel("ledger rows")
    m_ax.set_ylabel("peak RSS (MiB)")
    m_ax.set_title("B4: peak memory of the sweeping process")
    m_ax.legend(fontsize=8)
    _finish(
        fig, t_ax, "B4: sweep against its floor", machine_label(report), out, "bench_b4_sweep.png"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ratios", nargs="*", default=[], help="bench JSON files: one bar a figure")
    ap.add_argument("--b2")
    ap.add_argument("--b4")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    if args.ratios:
        plot_ratios(args.ratios, args.out)
    if args.b2:
        plot_b2(args.b2, args.out)
    if args.b4:
        plot_b4(args.b4, args.out)


if __name__ == "__main__":
    main()
