import sys, re, glob
tag = sys.argv[1]; O = '/tmp/h13/out/' + tag
L = [[m.group(1) for m in re.finditer(r'state="([^"]+)"', open(f).read())] for f in sorted(glob.glob(O + '.tls[0-9].xml'))]
n = min(map(len, L)); agree = 0; cnt = 0
for t in range(n):
    d = [('A' if s[0] == 'G' else 'B') for s in (l[t] for l in L) if 'G' in s and 'y' not in s]
    if len(d) == len(L):
        cnt += 1; agree += len(set(d)) == 1
print(f'{tag}: seconds with all 6 lights green: {cnt}; of those, all 6 serving the same direction: {agree/cnt:.0%}')
