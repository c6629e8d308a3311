import sys, collections, re
path = sys.argv[1]; mode = sys.argv[2] if len(sys.argv) > 2 else "self"
pat = sys.argv[3] if len(sys.argv) > 3 else None
selfc = collections.Counter(); incl = collections.Counter(); total = 0; idle = 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); frames = stack.split(";")
    leaf = frames[-1]
    if re.search(r"select \(selectors|\bselect\b.*selectors|_worker \(concurrent|wait \(threading|_wait_for_tstate_lock|epoll|poll \(selectors", leaf) or "(idle)" in leaf:
        idle += n; continue
    total += n
    selfc[re.sub(r":\d+\)", ")", leaf)] += n
    seen = set()
    for f in frames:
        g = re.sub(r":\d+\)", ")", f)
        if g not in seen:
            seen.add(g); incl[g] += n
print("busy samples", total, "idle", idle)
c = selfc if mode == "self" else incl
for k, v in c.most_common(int(sys.argv[4]) if len(sys.argv) > 4 else 40):
    if pat and not re.search(pat, k): continue
    print(f"{100*v/total:5.1f}% {k}")
