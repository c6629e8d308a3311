#!/bin/sh
# The second sitting: per store, B5 before/after, B1 (the library alone, --n 3000), B5
# before/after; each run's start, end and load average go to sitting2.log.
# Usage: sitting2.sh MAIN_SRC BRANCH_SRC OUT_DIR PG_URL
MAIN=$1; BRANCH=$2; OUT=$3; PG=$4
EG=/work/venv/bin/effectgate
run() {  # name pythonpath args...
    name=$1; src=$2; shift 2
    echo "$(date -u +%H:%M:%S) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/sitting2.log"
    PYTHONPATH=$src $EG bench "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
    echo "$(date -u +%H:%M:%S) end   $name rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/sitting2.log"
}
run s2-sqlite-before-3 "$MAIN" --workload B5 --n 2000
run s2-sqlite-after-3 "$BRANCH" --workload B5 --n 2000
run s2-sqlite-b1 "$BRANCH" --workload B1 --n 3000
run s2-sqlite-before-4 "$MAIN" --workload B5 --n 2000
run s2-sqlite-after-4 "$BRANCH" --workload B5 --n 2000
run s2-pg-before-3 "$MAIN" --store "$PG" --workload B5 --n 2000
run s2-pg-after-3 "$BRANCH" --store "$PG" --workload B5 --n 2000
run s2-pg-b1 "$BRANCH" --store "$PG" --workload B1 --n 3000
run s2-pg-before-4 "$MAIN" --store "$PG" --workload B5 --n 2000
run s2-pg-after-4 "$BRANCH" --store "$PG" --workload B5 --n 2000
