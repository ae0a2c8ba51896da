import sys, re, glob, collections
tag = sys.argv[1]; O = '/tmp/h13/out/' + tag
allg = []; clear = 0; tot = 0
for f in sorted(glob.glob(O + '.tls[0-9].xml')):
    st = [m.group(1) for m in re.finditer(r'state="([^"]+)"', open(f).read())]
    runs = []; p = None; n = 0
    for s in st:
        if s != p:
            if p is not None: runs.append((p, n))
            p, n = s, 0
        n += 1
    runs.append((p, n))
    g = [n for s, n in runs if 'G' in s and 'y' not in s]
    allg += g[1:-1]; clear += sum(n for s, n in runs if 'G' not in s or 'y' in s); tot += sum(n for _, n in runs)
allg.sort(); k = len(allg)
h = collections.Counter(min(d // 10 * 10, 60) for d in allg)
print(f'{tag}: {k} greens (6 lights, 1 h); median {allg[k//2]} s, mean {sum(allg)/k:.1f} s; share of time in yellow/red (no G) {clear/tot:.1%}; histogram', dict(sorted(h.items())))
