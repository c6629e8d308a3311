#!/bin/sh
# The door's CPU per action on both stores, back to back (hb's tree), agents=256.
PG=postgresql://postgres@127.0.0.1:5432/eg_b
run() { tree=$1; label=$2; shift 2
  echo "$(date -u +%H:%M:%S) start $label load $(cat /proc/loadavg)"
  PYTHONPATH=$tree/src /work/venv/bin/effectgate bench "$@" --json "$label.json" > "$label.txt" 2>&1
  echo "$(date -u +%H:%M:%S) end   $label load $(cat /proc/loadavg)"; }
run /work/wt-b b6-pg-after-3 --store $PG --workload B6 --agents 256
run /work/wt-b b6-sqlite-after-2 --workload B6 --agents 256
