#!/bin/bash
PG=postgresql://postgres@127.0.0.1:5432/eg_h5
O=/tmp/h5/final
for i in 1 2 3; do for t in before after; do
  echo "== b1-pg $t $i start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/h5/$t/src /work/venv/bin/effectgate bench --workload B1 --n 3000 --store $PG --json $O/b1-pg-$t-r$i.json > /dev/null 2>&1
done; done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
