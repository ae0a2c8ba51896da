import os, sys, traci
import traci.constants as tc
R="/work/main/.ci/venv/lib/python3.11/site-packages/sumo"
G=R+"/tools/game/cross/"
mode=sys.argv[1]
c0=os.times()
res_counts=[]
for ep in range(2):
    traci.start([R+"/bin/sumo","-n",G+"cross.net.xml","-r",G+"cross.rou.xml","--no-step-log","--seed",str(ep)])
    tls=traci.trafficlight.getIDList()[0]
    j=tls
    prog=traci.trafficlight.getAllProgramLogics(tls)[0]
    states=[p.state for p in prog.phases if 'y' not in p.state]
    V=[tc.VAR_TIMELOSS, tc.VAR_LANE_ID, tc.VAR_DEPARTURE, tc.VAR_LANEPOSITION]
    if mode=="forever": traci.junction.subscribeContext(j, tc.CMD_GET_VEHICLE_VARIABLE, 250, V)
    for k in range(720):
        t=(k+1)*5
        traci.trafficlight.setRedYellowGreenState(tls, states[k*7%len(states)])
        if mode=="window": traci.junction.subscribeContext(j, tc.CMD_GET_VEHICLE_VARIABLE, 250, V, begin=t, end=t)
        traci.simulationStep(t)
        r=traci.junction.getContextSubscriptionResults(j)
        res_counts.append(len(r) if r else 0)
    traci.close()
c1=os.times()
print(mode, f"sumo cpu/decision {(c1.children_user+c1.children_system-c0.children_user-c0.children_system)/1440*1000:.2f} ms", "mean vehicles in results", sum(res_counts)/len(res_counts))
