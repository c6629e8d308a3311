#!/usr/bin/env bash
# B1 before (3ac7aa7, the house issue's base) and after (AFTER_SRC), alternating, same run.
# usage: b1_pair.sh AFTER_SRC OUTDIR [PAIRS]
set -euo pipefail
AFTER=${1:?after src}; OUT=${2:?outdir}; PAIRS=${3:-3}
mkdir -p "$OUT"
PG=postgresql://postgres@127.0.0.1:5432/eg_bench
psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS eg_bench WITH (FORCE)" -qc "CREATE DATABASE eg_bench" 2>/dev/null
for i in $(seq 1 "$PAIRS"); do
  for side in before after; do
    src=/work/before/src; [ "$side" = after ] && src="$AFTER"
    PYTHONPATH=$src /work/venv/bin/python -m effectgate bench --workload B1 --n 2000 --json "$OUT/sqlite-$side-$i.json" > "$OUT/sqlite-$side-$i.txt" 2>&1
    PYTHONPATH=$src /work/venv/bin/python -m effectgate bench --store $PG --workload B1 --n 2000 --json "$OUT/pg-$side-$i.json" > "$OUT/pg-$side-$i.txt" 2>&1
  done
done
/work/venv/bin/python - "$OUT" <<'PY'
import json, sys, glob, statistics
out = sys.argv[1]
for store in ("sqlite", "pg"):
    for side in ("before", "after"):
        rows = {}
        for f in sorted(glob.glob(f"{out}/{store}-{side}-*.json")):
            for fig in json.load(open(f))["figures"]:
                r = rows.setdefault(fig["variant"], [])
                r.append((round(fig["ratio"], 3), round(fig["effectgate"]), round(fig["floor"]),
                          fig["notes"].get("cpu_overhead_us_per_action")))
        for v, r in rows.items():
            print(f"{store:6} {side:6} {v:32} ratios={[x[0] for x in r]} median={statistics.median(x[0] for x in r):.3f} eg/s={[x[1] for x in r]} floor/s={[x[2] for x in r]} cpu_over={[x[3] for x in r]}")
PY
