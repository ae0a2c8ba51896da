"""grid6 with only the offsets of its static program changed: alternating (every other light
offset 45 s) and stepped (22 s steps). Run next to SUMO's tools/game/grid6/grid6.net.xml."""
import re

s = open('grid6.net.xml').read()
pat = r'<tlLogic id="(\d+)/(\d+)" type="static" programID="0" offset="0"'
def with_offset(f):
    return re.sub(pat, lambda m: m.group(0).replace(
        'offset="0"', 'offset="%d"' % f(int(m.group(1)), int(m.group(2)))), s)
open('grid6-stagger.net.xml', 'w').write(with_offset(lambda x, y: 45 if (x + y) % 2 else 0))
open('grid6-random.net.xml', 'w').write(with_offset(lambda x, y: 22 * (x + 2 * y) % 90))
