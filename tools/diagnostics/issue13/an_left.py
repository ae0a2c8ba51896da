import sys, re
O = '/tmp/h13/out/' + sys.argv[1]
st = [(int(float(m.group(1))), m.group(2)) for m in re.finditer(r'time="([\d.]+)"[^>]*state="([^"]+)"', open(O + '.tls0.xml').read())]
for name, i in (('NS', 3), ('EW', 7)):
    starts = [t for (t, s), (_, p) in zip(st[1:], st) if s[i] == 'G' and s[i-2] != 'G' and not (p[i] == 'G' and p[i-2] != 'G')]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    print(f'{sys.argv[1]} protected left {name}: {len(starts)} starts, spacing min {min(gaps)} mean {sum(gaps)/len(gaps):.0f} max {max(gaps)} s')
