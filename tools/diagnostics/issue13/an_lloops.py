import sys, re, collections
tag = sys.argv[1]; O = '/tmp/h13/out/' + tag
states = {int(float(m.group(1))): m.group(2) for m in re.finditer(r'time="([\d.]+)"[^>]*state="([^"]+)"', open(O + '.tls0.xml').read())}
cnt = collections.defaultdict(int)
for m in re.finditer(r'begin="([\d.]+)"[^>]*id="([^"]+)" nVehContrib="(\d+)"', open(O + '.loops.xml').read()):
    cnt[(int(float(m.group(1))), m.group(2))] = int(m.group(3))
bins = collections.defaultdict(lambda: [0, 0]); n = 0
for idx, arms in ((3, ('top0', 'bottom0')), (7, ('right0', 'left0'))):
    prot = lambda s: s[idx] == 'G' and s[idx - 2] != 'G'
    t = 0
    while t < 3600:
        if prot(states.get(t, 'r' * 16)):
            s = t; n += 1
            while t < 3600 and prot(states.get(t, 'r' * 16)): t += 1
            for u in range(s, t):
                for a in arms:
                    bins[(u - s) // 10][0] += cnt[(u, a + '.2')]; bins[(u - s) // 10][1] += 1
        t += 1
print(tag, 'protected-left greens', n, ' left departures per approach-second by 10-s bin:', '  '.join(f'{b*10}-{b*10+10}s {v[0]/v[1]:.2f}' for b, v in sorted(bins.items())))
