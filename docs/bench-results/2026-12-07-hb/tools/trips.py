import os, sys, time, threading, statistics
sys.argv = [sys.argv[0]] + sys.argv[1:]
from effectgate.store.postgres import PostgresStore
rec = []
orig = PostgresStore._hot
def _hot(self, statements, what):
    t0 = time.perf_counter()
    try:
        return orig(self, statements, what)
    finally:
        rec.append((time.perf_counter() - t0, len(statements), t0))
PostgresStore._hot = _hot
exec(open('b6ip.py').read())
rec = rec[len(rec)//4: 3*len(rec)//4]
d = sorted(r[0] for r in rec); s = [r[1] for r in rec]
print(f"trips={len(rec)} dur p50={d[len(d)//2]*1e3:.2f}ms p90={d[int(len(d)*.9)]*1e3:.2f} mean={statistics.mean(d)*1e3:.2f} stmts mean={statistics.mean(s):.1f} max={max(s)}")
# in-flight concurrency
ev = sorted([(r[2], 1) for r in rec] + [(r[2]+r[0], -1) for r in rec])
cur = 0; last = ev[0][0]; acc = {}
for t, k in ev:
    acc[cur] = acc.get(cur, 0) + (t - last); cur += k; last = t
tot = sum(acc.values()); print("inflight share", {k: round(v/tot, 2) for k, v in sorted(acc.items())})
import numpy as np
x = np.array([r[1] for r in rec]); y = np.array([r[0] for r in rec])*1e3
b, a = np.polyfit(x, y, 1); print(f"dur_ms = {a:.2f} + {b*1000:.1f}us * stmts")
