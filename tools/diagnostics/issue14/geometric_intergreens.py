"""Prototype (tools/README.md, finding 30): RiLSA-style intergreens from a SUMO net's connection shapes, against a program.

Usage: python3 geometric_intergreens.py NET.net.xml[.gz] TLS_ID [ADDITIONAL_WITH_TLLOGIC] [-v] [-w OUT]
(-w writes `link link seconds` for every pair, rounded up, at most 12: the file
intergreen-geometry.patch reads from GW_EXP_IG_FILE)
Per ordered pair of links whose paths cross or end together: t = t_u + s_r / v_r - s_e / v_e at the
worst crossing (vehicles clear at 10 m/s straight, 7 m/s turning, 6 m long, t_u 3 s, enter at
11.1 m/s; pedestrians clear at 1.2 m/s from the far kerb, t_u 0, enter at once), against the
shortest gap the program keeps between the pair (any order, no stage filter).
"""
import gzip, sys, math, xml.etree.ElementTree as ET
net_path, tls_id = sys.argv[1], sys.argv[2]
add = sys.argv[3] if len(sys.argv) > 3 else None
root = ET.parse(gzip.open(net_path) if net_path.endswith('.gz') else net_path).getroot()
lanes = {}
for e in root.iter('edge'):
    for l in e.iter('lane'):
        lanes[l.get('id')] = dict(shape=[tuple(map(float, p.split(','))) for p in l.get('shape').split()],
                                  width=float(l.get('width', 3.2)), func=e.get('function', ''))
conns = list(root.iter('connection'))
def via_chain(c):
    pts = []
    v = c.get('via')
    while v:
        pts += lanes[v]['shape']
        edge, idx = v.rsplit('_', 1)
        nxt = [d for d in conns if d.get('from') == edge and d.get('fromLane') == idx]
        v = nxt[0].get('via') if nxt else None
    return pts
links = {}
for c in conns:
    if c.get('tl') != tls_id:
        continue
    for key in ('linkIndex', 'linkIndex2'):
        if c.get(key) is None: continue
        k = int(c.get(key))
        if key == 'linkIndex2':
            continue  # the indirect turn's second stage: its own link index handles it
        frm = c.get('from')
        if frm.startswith(':') and lanes.get(c.get('to') + '_0', {}).get('func') == 'crossing':
            lane = lanes[c.get('to') + '_0']
            links[k] = dict(kind='ped', path=lane['shape'], width=lane['width'], dir='s')
        else:
            pts = [tuple(map(float, p.split(','))) for p in c.get('shape').split()] if c.get('shape') else via_chain(c)
            w = lanes.get(frm + '_' + c.get('fromLane'), {}).get('width', 3.2)
            links[k] = dict(kind='veh', path=pts, width=w, dir=c.get('dir'))
def seg_inter(p, q, r, s):
    d = (q[0]-p[0])*(s[1]-r[1]) - (q[1]-p[1])*(s[0]-r[0])
    if abs(d) < 1e-12: return None
    t = ((r[0]-p[0])*(s[1]-r[1]) - (r[1]-p[1])*(s[0]-r[0])) / d
    u = ((r[0]-p[0])*(q[1]-p[1]) - (r[1]-p[1])*(q[0]-p[0])) / d
    if 0 <= t <= 1 and 0 <= u <= 1: return t, u
    return None
def conflicts(a, b):
    """Distances along a and b of every crossing of the two paths, and their common end (a merge)."""
    out = []
    sa = 0.0
    for i in range(len(a)-1):
        la = math.dist(a[i], a[i+1])
        sb = 0.0
        for j in range(len(b)-1):
            lb = math.dist(b[j], b[j+1])
            x = seg_inter(a[i], a[i+1], b[j], b[j+1])
            if x:
                out.append((sa + x[0]*la, sb + x[1]*lb))
            sb += lb
        sa += la
    if math.dist(a[-1], b[-1]) < 1.0:
        out.append((length(a), length(b)))
    return out
def length(p): return sum(math.dist(p[i], p[i+1]) for i in range(len(p)-1))
def intergreen(i, j):
    a, b = links[i], links[j]
    if a['kind'] == 'ped' and b['kind'] == 'ped': return None
    cs = conflicts(a['path'], b['path'])
    if not cs: return None
    return max(tz(a, b, si, sj) for si, sj in cs)
def tz(a, b, si, sj):
    if a['kind'] == 'veh':
        t_u, v_r, l = 3.0, (10.0 if a['dir'] == 's' else 7.0), 6.0
        s_r = si + b['width']/2 + l
    else:
        t_u, v_r = 0.0, 1.2
        s_r = max(si, length(a['path']) - si) + b['width']/2
    if b['kind'] == 'veh':
        t_e = max(0.0, sj - a['width']/2) / 11.1
    else:
        t_e = 0.0
    return t_u + s_r / v_r - t_e
# The program (an additional's tlLogic overrides the net's).
prog = None
for r in ([ET.parse(add).getroot()] if add else []) + [root]:
    for t in r.iter('tlLogic'):
        if t.get('id') == tls_id and prog is None:
            prog = [(float(p.get('duration')), p.get('state')) for p in t.iter('phase')]
def green(k, l): return prog[k % len(prog)][1][l] in 'gG'
def program_gap(i, j):
    n = len(prog); best = None
    for k in range(n):
        if not green(k, i) or green(k+1, i) or green(k+1, j): continue
        gap = 0.0
        for q in range(k+1, k+1+n):
            if green(q, j):
                best = gap if best is None else min(best, gap); break
            if green(q, i): break
            gap += prog[q % n][0]
    return best
rows = []
for i in sorted(links):
    for j in sorted(links):
        if i == j: continue
        g = intergreen(i, j)
        if g is None: continue
        rows.append((i, j, links[i]['kind'], links[j]['kind'], g, program_gap(i, j)))
print('links', len(links), 'pairs with a conflict point', len(rows))
import collections
cmp = [(g, p) for (_, _, _, _, g, p) in rows if p is not None and p <= 12]
print('pairs the program keeps ≤12 s apart:', len(cmp))
diff = [math.ceil(g) - p for g, p in cmp]
print('geometry (ceil) - program: mean %.2f, median %.1f, min %.1f, max %.1f' % (sum(diff)/len(diff), sorted(diff)[len(diff)//2], min(diff), max(diff)))
print('geometry ≥ program on', sum(d >= 0 for d in diff), 'of', len(diff))
print('distribution of ceil(geometry):', sorted(collections.Counter(math.ceil(max(g,0)) for *_, g, _ in rows).items()))
for r in rows[:0]: print(r)
if '-v' in sys.argv:
    for (i,j,ka,kb,g,p) in rows:
        print(i,j,ka,kb,round(g,1),p)
if '-w' in sys.argv:
    out = open(sys.argv[sys.argv.index('-w') + 1], 'w')
    for (i, j, ka, kb, g, p) in rows:
        if g > 0:
            out.write('%d %d %d\n' % (i, j, min(12, math.ceil(g))))
