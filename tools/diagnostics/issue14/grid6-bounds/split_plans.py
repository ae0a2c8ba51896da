#!/usr/bin/env python3
"""game/grid6 under static programs whose green split differs between the middle column's
lights (1/0, 1/1) and the side columns' (tools/README.md, finding 33), run by SUMO alone.

    python3 split_plans.py NAME NS_SIDE_S NS_MIDDLE_S [CYCLE_S]

writes ./NAME.net.xml (the net with only the six programs' two greens edited: north-south
green NS_SIDE_S or NS_MIDDLE_S, east-west green CYCLE_S - 6 - that, offsets 0) and prints the
mean delay over seeds 1000-1004 counted as greenwave counts it (timeLoss + departDelay of every
vehicle SUMO lists in its tripinfo with --tripinfo-output.write-unfinished, plus, for every
vehicle never inserted, the time it has waited), and the vehicles never inserted.
`split_plans.py own` runs the net as it is (334.44 s, greenwave's figure to the hundredth).
Needs SUMO_HOME (SUMO 1.28 from PyPI) and about 30 s a plan.
"""
import os
import re
import statistics
import sys
import xml.etree.ElementTree as ET

S = os.environ["SUMO_HOME"]
sys.path.insert(0, os.path.join(S, "tools"))
import traci  # noqa: E402

G = os.path.join(S, "tools", "game", "grid6")
LIGHTS = ["0/0", "0/1", "1/0", "1/1", "2/0", "2/1"]


def make(name, ns_side, ns_mid, cycle=90):
    out = open(os.path.join(G, "grid6.net.xml")).read()
    for tl in LIGHTS:
        ns = ns_mid if tl.startswith("1/") else ns_side
        ew = cycle - 6 - ns
        pat = re.compile(
            r'(<tlLogic id="%s" type="static" programID="0" offset="0">\s*<phase duration=")42'
            r'(" state="GGrrGGrr"/>\s*<phase duration="3"  state="yyrryyrr"/>\s*<phase duration=")42'
            r'(" state="rrGGrrGG"/>)' % re.escape(tl)
        )
        out, n = pat.subn(lambda m: f"{m.group(1)}{ns}{m.group(2)}{ew}{m.group(3)}", out)
        assert n == 1, (tl, n)
    path = f"{name}.net.xml"
    open(path, "w").write(out)
    return path


def run(net, seed, tag):
    tripinfo = f"tripinfo-{tag}-{seed}.xml"
    traci.start([os.path.join(S, "bin", "sumo"), "-n", net, "-r", os.path.join(G, "grid6.rou.xml"),
                 "--seed", str(seed), "--no-step-log", "--no-warnings", "--end", "3600",
                 "--tripinfo-output", tripinfo, "--tripinfo-output.write-unfinished"], label=tag)
    traci.simulationStep(3600)
    pending = [traci.vehicle.getDepartDelay(v) for v in traci.simulation.getPendingVehicles()]
    traci.close()
    n, total = 0, 0.0
    for t in ET.parse(tripinfo).getroot().iter("tripinfo"):
        n += 1
        total += max(0.0, float(t.get("timeLoss"))) + max(0.0, float(t.get("departDelay")))
    os.remove(tripinfo)
    return (total + sum(max(0.0, w) for w in pending)) / (n + len(pending)), len(pending)


if __name__ == "__main__":
    name = sys.argv[1]
    net = os.path.join(G, "grid6.net.xml") if name == "own" else make(
        name, int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 90)
    runs = [run(net, s, name) for s in range(1000, 1005)]
    print(f"{name}: mean delay {statistics.mean(r[0] for r in runs):.2f} s, "
          f"never inserted {statistics.mean(r[1] for r in runs):.0f}")
