#!/bin/sh
# Before (main, /work/main/src) and after (hb, /work/wt-b/src), alternating, same sitting.
PG=postgresql://postgres@127.0.0.1:5432/eg_b
OUT=${OUT:-.}
run() { # tree label args...
  tree=$1; label=$2; shift 2
  echo "$(date -u +%H:%M:%S) start $label load $(cat /proc/loadavg)"
  PYTHONPATH=$tree/src /work/venv/bin/effectgate bench "$@" --json "$OUT/$label.json" > "$OUT/$label.txt" 2>&1
  echo "$(date -u +%H:%M:%S) end   $label load $(cat /proc/loadavg)"
}
for pair in 1 2; do
  run /work/main b6-pg-before-$pair --store $PG --workload B6 --agents 64,256
  run /work/wt-b b6-pg-after-$pair --store $PG --workload B6 --agents 64,256
done
for pair in 1 2; do
  run /work/main b1-pg-before-$pair --store $PG --workload B1 --n 3000
  run /work/wt-b b1-pg-after-$pair --store $PG --workload B1 --n 3000
done
run /work/wt-b b6-sqlite-after-1 --workload B6 --agents 256
run /work/main b1-sqlite-before-1 --workload B1 --n 3000
run /work/wt-b b1-sqlite-after-1 --workload B1 --n 3000
for pair in 1 2; do
  echo "token lookup before $pair: $(PYTHONPATH=/work/main/src /work/venv/bin/python tools/token_lookup.py | tr '\n' ' ') load $(cat /proc/loadavg)"
  echo "token lookup after  $pair: $(PYTHONPATH=/work/wt-b/src /work/venv/bin/python tools/token_lookup.py | tr '\n' ' ') load $(cat /proc/loadavg)"
done
