"""Pocket-junction diagnostics from SUMO outputs of one run (tag): phase greens, pocket blocking, delay by movement."""
import sys, re, collections, xml.etree.ElementTree as ET
tag = sys.argv[1]; O = '/tmp/h13/out/' + tag
arms = ['top0', 'right0', 'bottom0', 'left0']
POCKET_LEN = float(sys.argv[2]) if len(sys.argv) > 2 else 64.0
split = sys.argv[3] if len(sys.argv) > 3 else '320.00'
# --- phase greens from SaveTLSStates (one line per step)
runs = []; prev = None; start = 0.0
for m in re.finditer(r'time="([\d.]+)"[^>]*state="([^"]+)"', open(O + '.tls0.xml').read()):
    t, s = float(m.group(1)), m.group(2)
    if s != prev:
        if prev is not None: runs.append((prev, t - start))
        prev, start = s, t
runs.append((prev, 3600 - start))
def kind(s):
    if 'y' in s: return None
    thru = [i for i in (1, 5, 9, 13) if s[i] == 'G']
    left = [i + 2 for i in (1, 5, 9, 13) if s[i + 2] == 'G']
    if thru: return 'through NS' if thru[0] in (1, 9) else 'through EW'
    if left: return 'left NS' if left[0] in (3, 11) else 'left EW'
    return 'red'
g = collections.defaultdict(list)
for s, d in runs:
    k = kind(s)
    if k: g[k].append(d)
print(f'== {tag}')
tot = sum(sum(v) for v in g.values())
for k in sorted(g):
    v = g[k]
    print(f'  {k:11s} greens {len(v):4d}  mean {sum(v)/len(v):5.1f} s  share of time {sum(v)/3600:5.1%}')
print(f'  yellow/red share {1 - tot/3600:5.1%}')
# --- queue output: pocket full, left-turner stuck at the split (internal lane into the pocket)
full = collections.Counter(); stuck = collections.Counter(); thrufull = collections.Counter(); n = 0
for ev, el in ET.iterparse(O + '.queue.xml'):
    if el.tag != 'data': continue
    n += 1
    q = {l.get('id'): float(l.get('queueing_length')) for l in el.iter('lane')}
    for a in arms:
        e = f'{a}A0.{split}'
        pf = q.get(e + '_2', 0) >= POCKET_LEN - 7.5
        full[a] += pf
        # a vehicle queued on the connector from upstream lane 1 into the pocket = a left-turner waiting to enter a full pocket, blocking lane 1
        stuck[a] += pf and q.get(f':{e}_0_2', 0) > 0
        thrufull[a] += min(q.get(e + '_0', 0), q.get(e + '_1', 0)) >= POCKET_LEN - 7.5
    el.clear()
print(f'  steps {n}: pocket full {sum(full.values())/4/n:5.1%} of time; pocket full with a left-turner queued at its entry (blocking upstream lane 1) {sum(stuck.values())/4/n:5.1%}; both through lanes full to the split {sum(thrufull.values())/4/n:5.1%}')
# --- tripinfo: time loss by movement
turn = {('top0','bottom0'):'t',('bottom0','top0'):'t',('left0','right0'):'t',('right0','left0'):'t'}
order = {a: i for i, a in enumerate(arms)}
def mv(o, d):
    if turn.get((o, d)): return 'through'
    # arms clockwise top,right,bottom,left; coming from o heading to d
    return 'right' if (order[d] - order[o]) % 4 == 3 else 'left'
acc = collections.defaultdict(lambda: [0, 0.0, 0.0])
for ev, el in ET.iterparse(O + '.trip.xml'):
    if el.tag != 'tripinfo': continue
    o = el.get('departLane').split('A0')[0]; d = el.get('arrivalLane')
    dst = d.split('_')[0][2:] if d and d.startswith('A0') else None
    if dst is None:  # unfinished: use vType-less route guess from id not available; count separately
        key = 'unfinished'
    else: key = mv(o, dst)
    a = acc[key]; a[0] += 1; a[1] += float(el.get('timeLoss')); a[2] += float(el.get('departDelay'))
    el.clear()
for k in ('through', 'left', 'right', 'unfinished'):
    if k in acc:
        c, tl, dd = acc[k]
        print(f'  {k:10s} n {c:5d}  time loss {tl/c:6.1f} s  depart delay {dd/c:6.1f} s')
