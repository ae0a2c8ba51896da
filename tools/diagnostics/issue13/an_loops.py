"""Stop-line departures per lane by 10-s bin of each through green (and the pocket lane's during it: permissive lefts)."""
import sys, re, collections
tag = sys.argv[1]; O = '/tmp/h13/out/' + tag
states = {}
for m in re.finditer(r'time="([\d.]+)"[^>]*state="([^"]+)"', open(O + '.tls0.xml').read()):
    states[int(float(m.group(1)))] = m.group(2)
cnt = collections.defaultdict(int)
for m in re.finditer(r'begin="([\d.]+)"[^>]*id="([^"]+)" nVehContrib="(\d+)"', open(O + '.loops.xml').read()):
    cnt[(int(float(m.group(1))), m.group(2))] = int(m.group(3))
# green segments of NS / EW through
segs = []
for idx, arms in ((1, ('top0', 'bottom0')), (5, ('right0', 'left0'))):
    t = 0
    while t < 3600:
        if states.get(t, 'r' * 16)[idx] == 'G':
            s = t
            while t < 3600 and states.get(t, 'r' * 16)[idx] == 'G': t += 1
            segs.append((s, t, arms))
        t += 1
bins = collections.defaultdict(lambda: [0, 0, 0])  # bin -> [through veh, left (pocket) veh, lane-seconds]
for s, e, arms in segs:
    for t in range(s, e):
        b = (t - s) // 10
        for a in arms:
            bins[b][0] += cnt[(t, a + '.0')] + cnt[(t, a + '.1')]
            bins[b][1] += cnt[(t, a + '.2')]
            bins[b][2] += 1
print(tag, 'through greens', len(segs), ' departures per approach-second in each 10-s bin of green (lanes 0+1 | pocket lane):')
print('  ' + '  '.join(f'{b*10:>2d}-{b*10+10}s {v[0]/v[2]:.2f}|{v[1]/v[2]:.2f}' for b, v in sorted(bins.items())))
