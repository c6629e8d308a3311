"""B6's plot for docs/benchmarks.md: throughput and p99 against the fleet size, per door.

python -m effectgate.bench.plot_b6 sqlite.json pg.json --out docs/

The ideal line is A / L (the boundary adds nothing); the machine named is the one each run
recorded about itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from effectgate.bench.plots import _finish, _report, machine_label

__all__ = ["plot_b6"]


def _series(report: dict[str, Any], door: str) -> list[dict[str, Any]]:
    rows = [f for f in report["figures"] if f["workload"] == "B6" and f", {door}," in f["variant"]]
    return sorted(rows, key=lambda f: f["notes"]["agents"])


def plot_b6(paths: Sequence[str], out: str) -> None:
    import matplotlib.pyplot as plt  # after plots set the Agg backend

    fig, (t_ax, l_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    label, latency = "", 0.0
    ideal: dict[int, float] = {}
    for path in paths:
        report = _report(path)
        label = machine_label(report)
        for door, marker in (("in-process", "o-"), ("HTTP", "s--")):
            rows = _series(report, door)
            if not rows:
                continue
            agents = [f["notes"]["agents"] for f in rows]
            store = rows[0]["variant"].split(",")[0]
            t_ax.plot(agents, [f["effectgate"] for f in rows], marker, label=f"{store}, {door}")
            l_ax.plot(
                agents, [f["notes"]["p99_ms"] for f in rows], marker, label=f"{store}, {door}"
            )
            ideal.update({f["notes"]["agents"]: f["floor"] for f in rows})
            latency = rows[0]["notes"]["latency_ms"]
    xs = sorted(ideal)
    t_ax.plot(xs, [ideal[x] for x in xs], ":", color="0.3", label="ideal: agents / latency")
    l_ax.axhline(latency, color="0.3", linestyle=":", label=f"the venue's {latency:g} ms")
    for ax in (t_ax, l_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("agents (concurrent callers)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    t_ax.set_yscale("log")
    t_ax.set_ylabel("actions/s")
    l_ax.set_ylabel("p99 end-to-end (ms)")
    l_ax.set_title("B6: p99 latency")
    _finish(fig, t_ax, "B6: a fleet against a slow venue", label, out, "bench_b6_fleet.png")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+", help="effectgate bench --workload B6 --json files")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    plot_b6(args.reports, args.out)


if __name__ == "__main__":
    main()
