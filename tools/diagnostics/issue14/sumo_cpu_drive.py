import os, sys, time
from greenwave import NativeEnv
G="/work/main/.ci/venv/lib/python3.11/site-packages/sumo/tools/game/cross/"
rw=sys.argv[1]
e=NativeEnv(backend="sumo", net=G+"cross.net.xml", routes=[G+"cross.rou.xml"], reward=rw)
c0=os.times(); t=time.perf_counter()
for ep in range(2):
    e.reset(ep)
    for k in range(720):
        _,_,d=e.step([k*7%e.n_phases()[0]])
        if d: break
e.reset(9)
c1=os.times()
print(f"{rw:12s} {os.environ.get('V','base'):10s} sumo cpu/decision {(c1.children_user+c1.children_system-c0.children_user-c0.children_system)/1440*1000:.2f} ms, self {(c1.user-c0.user)/1440*1000:.2f} ms, wall {(time.perf_counter()-t)/1440*1000:.2f} ms")
