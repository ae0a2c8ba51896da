import os, sys, time, traci
R="/work/main/.ci/venv/lib/python3.11/site-packages/sumo"
G=R+"/tools/game/cross/"
extra=sys.argv[1:]
c0=os.times()
for ep in range(2):
    traci.start([R+"/bin/sumo","-n",G+"cross.net.xml","-r",G+"cross.rou.xml","--no-step-log","--seed",str(ep)]+extra)
    tls=traci.trafficlight.getIDList()[0]
    prog=traci.trafficlight.getAllProgramLogics(tls)[0]
    states=[p.state for p in prog.phases if 'y' not in p.state]
    for k in range(720):
        traci.trafficlight.setRedYellowGreenState(tls, states[k*7%len(states)])
        traci.simulationStep((k+1)*5)
    traci.close()
c1=os.times()
print("bare traci", extra, f"sumo cpu/decision {(c1.children_user+c1.children_system-c0.children_user-c0.children_system)/1440*1000:.2f} ms")
