"""game/grid6 under a synchronous adaptive rule (tools/README.md, finding 26).

    python sync_control.py static SEED                  # the net's own program
    python sync_control.py sync SEED GMIN_S GMAX_S RATIO

`sync`: all six lights show the same phase (north-south or east-west green). Every 5 s,
once the green has run GMIN_S, the lights change (3 s yellow, as the net's program) when
the halted vehicles on the red axis's approaches exceed RATIO times those on the green
axis's, or when it has run GMAX_S. Needs SUMO 1.28's `traci` (PYTHONPATH=$SUMO_HOME/tools)
and G=$SUMO_HOME/tools/game. Prints the mean delay as greenwave's SUMO backend counts it:
timeLoss + departDelay over every vehicle whose departure time has come in the hour, a
vehicle never inserted with the time it has waited (on seed 1000 the `static` line gives
337.18 s, `greenwave sim --controller fixed-time` 337.2 s)."""
import os, sys, traci, xml.etree.ElementTree as ET
G = os.environ["G"]
mode, seed = sys.argv[1], int(sys.argv[2])
gmin, gmax, ratio = (float(x) for x in sys.argv[3:6]) if len(sys.argv) > 3 else (10, 90, 1.0)
out = f"/tmp/g6ti-{os.getpid()}.xml"
traci.start(["sumo", "-n", f"{G}/grid6/grid6.net.xml", "-r", f"{G}/grid6/grid6.rou.xml",
             "--begin", "0", "--end", "3600", "--seed", str(seed), "--no-step-log",
             "--tripinfo-output", out, "--tripinfo-output.write-unfinished",
             "--tripinfo-output.write-undeparted", "--duration-log.disable"])
tls = traci.trafficlight.getIDList()
lanes = {0: set(), 2: set()}
for t in tls:
    state = traci.trafficlight.getCompleteRedYellowGreenDefinition(t)[0].phases[0].state
    for i, links in enumerate(traci.trafficlight.getControlledLinks(t)):
        for l in links:
            lanes[0 if state[i] in "Gg" else 2].add(l[0])
def q(p): return sum(traci.lane.getLastStepHaltingNumber(l) for l in lanes[p])
phase, since, yellow = 0, 0.0, None
if mode == "sync":
    for t in tls: traci.trafficlight.setPhase(t, 0); traci.trafficlight.setPhaseDuration(t, 1e6)
t_s = 0
while t_s < 3600:
    traci.simulationStep(); t_s = traci.simulation.getTime()
    if mode != "sync": continue
    if yellow is not None:
        if t_s >= yellow:
            phase = 2 - phase; since = t_s; yellow = None
            for t in tls: traci.trafficlight.setPhase(t, phase); traci.trafficlight.setPhaseDuration(t, 1e6)
        continue
    if int(t_s) % 5: continue
    g = t_s - since
    if g >= gmax or (g >= gmin and q(2 - phase) > ratio * q(phase)):
        yellow = t_s + 3
        for t in tls: traci.trafficlight.setPhase(t, phase + 1); traci.trafficlight.setPhaseDuration(t, 1e6)
traci.close()
tot = n = 0
for e in ET.parse(out).getroot():
    if e.tag != "tripinfo": continue
    dd = float(e.get("departDelay")); tl = float(e.get("timeLoss", 0))
    tot += max(dd, 0) + max(tl, 0); n += 1
os.remove(out)
print(mode, seed, gmin, gmax, ratio, round(tot / n, 2), n)
