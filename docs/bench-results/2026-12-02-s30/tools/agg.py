import collections
import sys

self_c = collections.Counter()
incl = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    line = line.rstrip()
    if not line:
        continue
    stack, _, cnt = line.rpartition(" ")
    cnt = int(cnt)
    frames = stack.split(";")
    # keep only frames inside the timed loop
    if not any("_gate_loop" in f for f in frames):
        continue
    total += cnt
    leaf = frames[-1]
    self_c[leaf] += cnt
    seen = set()
    for f in frames:
        k = f.split(" (")[0]
        if k not in seen:
            incl[k] += cnt
            seen.add(k)
print(f"samples in the loop: {total}\n\nself (leaf frame), top 25:")
for k, v in self_c.most_common(25):
    print(f"{100 * v / total:5.1f}%  {k}")
print("\ninclusive, top 30:")
for k, v in incl.most_common(30):
    print(f"{100 * v / total:5.1f}%  {k}")
