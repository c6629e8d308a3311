"""Draw the two figures of docs/benchmarks.md from ``effectgate bench --json`` outputs.

python benchmarks/plots.py --b2 b2.json --b4 b4.json --out docs/
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _figures(path: str, workload: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [f for f in json.load(fh)["figures"] if f["workload"] == workload]


def plot_b2(path: str, out: str) -> None:
    rows = _figures(path, "B2")
    workers = [f["notes"]["workers"] for f in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(workers, [f["effectgate"] for f in rows], "o-", label="effectgate")
    ax.plot(workers, [f["floor"] for f in rows], "s--", label="raw SQL floor")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("worker processes")
    ax.set_ylabel("actions/s")
    ax.set_title("B2: PostgreSQL throughput vs workers")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bench_b2_workers.png"), dpi=120)


def plot_b4(path: str, out: str) -> None:
    rows = _figures(path, "B4")
    first = [f for f in rows if "first" in f["variant"]]
    again = [f for f in rows if "repeat" in f["variant"]]
    sizes = [f["notes"]["rows"] for f in first]
    fig, (t_ax, m_ax) = plt.subplots(1, 2, figsize=(10, 4))
    t_ax.plot(sizes, [f["notes"]["seconds"] for f in first], "o-", label="sweep (repairs 2%)")
    t_ax.plot(sizes, [f["notes"]["seconds"] for f in again], "^-", label="repeat sweep")
    t_ax.plot(
        sizes, [f["notes"]["floor_seconds"] for f in first], "s--", label="raw paging + comparison"
    )
    t_ax.set_xscale("log")
    t_ax.set_yscale("log")
    t_ax.set_xlabel("ledger rows")
    t_ax.set_ylabel("seconds")
    t_ax.set_title("B4: sweep time")
    t_ax.legend()
    t_ax.grid(alpha=0.3)
    m_ax.plot(sizes, [f["notes"]["peak_rss_mib"] for f in first], "o-", label="effectgate sweep")
    m_ax.plot(sizes, [f["notes"]["floor_peak_rss_mib"] for f in first], "s--", label="raw floor")
    m_ax.set_xscale("log")
    m_ax.set_ylim(0, max(f["notes"]["peak_rss_mib"] for f in first) * 1.5)
    m_ax.set_xlabel("ledger rows")
    m_ax.set_ylabel("peak RSS (MiB)")
    m_ax.set_title("B4: peak memory of the sweeping process")
    m_ax.legend()
    m_ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bench_b4_sweep.png"), dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--b2")
    ap.add_argument("--b4")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    if args.b2:
        plot_b2(args.b2, args.out)
    if args.b4:
        plot_b4(args.b4, args.out)


if __name__ == "__main__":
    main()
