"""Mean delay (timeLoss + departDelay, over every vehicle in SUMO's tripinfo, unfinished
ones included) on held-out seeds 1000-1004 with every traffic light off (`--tls.all-off`:
the junctions run on their priority rules) or on the net's own static program.

    python3 lights_off_floor.py NET ROUTES off|static

A floor for what a signal controller can give on a lightly loaded net (tools/README.md,
"Training on real networks", finding 39). Needs SUMO's `sumo` on PATH.
"""
import subprocess
import sys
import xml.etree.ElementTree as ET

net, routes, mode = sys.argv[1], sys.argv[2], sys.argv[3]
means = []
for seed in [1000, 1001, 1002, 1003, 1004]:
    out = f"tripinfo-{mode}-{seed}.xml"
    args = ["sumo", "-n", net, "-r", routes, "-b", "0", "-e", "3601", "--seed", str(seed),
            "--tripinfo-output", out, "--tripinfo-output.write-unfinished",
            "--no-step-log", "--duration-log.disable", "--no-warnings"]
    if mode == "off":
        args.append("--tls.all-off")
    subprocess.run(args, check=True)
    trips = list(ET.parse(out).getroot().iter("tripinfo"))
    delays = [float(t.get("timeLoss")) + max(0.0, float(t.get("departDelay"))) for t in trips]
    means.append(sum(delays) / len(delays))
    print(seed, len(delays), "vehicles", round(means[-1], 2), "s")
print(mode, "mean over the seeds", round(sum(means) / len(means), 2), "s")
