import sys, re, collections
for fn in sys.argv[1:]:
    txt = open(fn).read()
    threads = re.split(r'\nThread ', txt)
    c = collections.Counter()
    for t in threads[1:]:
        lines = [l.strip() for l in t.splitlines()[1:] if l.strip()]
        if not lines: c['<empty>'] += 1; continue
        # top frame and first effectgate frame
        top = lines[0].split(' (')[0]
        eg = next((l for l in lines if 'effectgate' in l), '')
        egf = eg.split(' (')[0] + ' ' + (re.search(r'/([\w_]+\.py:\d+)', eg).group(1) if eg else '')
        c[(top, egf)] += 1
    print(fn, sum(c.values()))
    for k, v in c.most_common(15): print(f"  {v:4d} {k}")
