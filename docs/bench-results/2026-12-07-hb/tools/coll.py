import sys, collections
tot=0; selfc=collections.Counter(); cum=collections.Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(' ')
    n=int(n); tot+=n
    frames=stack.split(';')
    selfc[frames[-1]]+=n
    seen=set()
    for f in frames:
        k=f.split(' (')[0]+' ('+f.split('/')[-1] if '/' in f else f
        if k in seen: continue
        seen.add(k); cum[k]+=n
print('total', tot)
print('--- self'); [print(f'{v*100/tot:5.1f} {k}') for k,v in selfc.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 30)]
print('--- cum'); [print(f'{v*100/tot:5.1f} {k}') for k,v in cum.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 60)]
