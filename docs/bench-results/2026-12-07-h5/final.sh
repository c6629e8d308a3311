#!/bin/bash
PG=postgresql://postgres@127.0.0.1:5432/eg_h5
O=/tmp/h5/final
run() { # name tree args...
  local name=$1 t=$2; shift 2
  local P=/tmp/h5/$t/src
  echo "== $name $t start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$P /work/venv/bin/effectgate bench "$@" --json $O/$name-$t.json > $O/$name-$t.txt 2>&1
  echo "   $name $t end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?"
}
for t in before after; do run b6-pg $t --workload B6 --agents 64,256 --store $PG; done
for t in before after; do run b1-pg $t --workload B1 --n 3000 --store $PG; done
for t in before after; do run b5-sqlite $t --workload B5 --n 2000; done
for t in before after; do run b5-pg $t --workload B5 --n 1500 --store $PG; done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
