#!/bin/sh
# Before (main's tree) and after (this branch's tree) alternating, per store; each run's start
# time and load average go to sitting.log. Usage: sitting.sh MAIN_SRC BRANCH_SRC OUT_DIR PG_URL
MAIN=$1; BRANCH=$2; OUT=$3; PG=$4
EG=/work/venv/bin/effectgate
run() {  # name pythonpath args...
    name=$1; src=$2; shift 2
    echo "$(date -u +%H:%M:%S) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/sitting.log"
    PYTHONPATH=$src $EG bench "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
    echo "$(date -u +%H:%M:%S) end   $name rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/sitting.log"
}
for i in 1 2; do
    run sqlite-before-$i "$MAIN" --workload B5 --n 2000
    run sqlite-after-$i "$BRANCH" --workload B5 --n 2000
done
for i in 1 2; do
    run pg-before-$i "$MAIN" --store "$PG" --workload B5 --n 2000
    run pg-after-$i "$BRANCH" --store "$PG" --workload B5 --n 2000
done
