"""Environment steps per second from Python: greenwave (embedded and SUMO backends, single
and vectorised) next to sumo-rl with libsumo, alternated in one run.

    python python/benches/env_speed.py [--steps 20000] [--rounds 2]

Needs greenwave (pip install ./python), and for the sumo-rl rows sumo-rl, libsumo and
eclipse-sumo of one version (pip install sumo-rl==1.4.5 libsumo==1.28.0 eclipse-sumo==1.28.0).
Each case runs in its own process (libsumo is one simulation per process). The junctions:
greenwave's built-in `single-4way` (embedded) and SUMO's own `tools/game/cross` (a
four-arm signalised junction shipped with SUMO), 5 s decisions, random actions, one-hour
episodes reset as they end.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def cross_files():
    home = os.environ.get("SUMO_HOME")
    if not home:
        import sumo  # eclipse-sumo's package

        home = os.path.dirname(sumo.__file__)
    game = os.path.join(home, "tools", "game", "cross")
    return os.path.join(game, "cross.net.xml"), os.path.join(game, "cross.rou.xml")


def run_greenwave_single(steps, backend):
    from greenwave import SignalEnv

    if backend == "embedded":
        env = SignalEnv(scenario="single-4way")
    else:
        net, rou = cross_files()
        env = SignalEnv(backend="sumo", net=net, routes=rou)
    env.reset(seed=0)
    n = env.action_space.n
    t = time.perf_counter()
    for k in range(steps):
        _, _, _, trunc, _ = env.step(k * 7 % n)
        if trunc:
            env.reset()
    return steps / (time.perf_counter() - t)


def run_greenwave_vec(steps, n_envs):
    import numpy as np
    from greenwave import VecSignalEnv

    vec = VecSignalEnv(n_envs, scenario="single-4way")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    calls = max(1, steps // n_envs)
    actions = rng.integers(0, 4, size=(calls, n_envs, 1))
    t = time.perf_counter()
    for k in range(calls):
        vec.step(actions[k])
    return calls * n_envs / (time.perf_counter() - t)


def run_sumo_rl(steps):
    os.environ["LIBSUMO_AS_TRACI"] = "1"
    from sumo_rl import SumoEnvironment

    net, rou = cross_files()
    env = SumoEnvironment(
        net_file=net, route_file=rou, use_gui=False, num_seconds=3600,
        delta_time=5, yellow_time=2, min_green=5, single_agent=True, sumo_seed=0,
    )
    env.reset()
    n = env.action_space.n
    t = time.perf_counter()
    for k in range(steps):
        _, _, term, trunc, _ = env.step(k * 7 % n)
        if term or trunc:
            env.reset()
    rate = steps / (time.perf_counter() - t)
    env.close()
    return rate


CASES = {
    "greenwave SignalEnv, embedded single-4way": lambda s: run_greenwave_single(s, "embedded"),
    "greenwave VecSignalEnv(8), embedded single-4way": lambda s: run_greenwave_vec(s, 8),
    "greenwave SignalEnv, SUMO game/cross (TraCI)": lambda s: run_greenwave_single(s // 4, "sumo"),
    "sumo-rl 1.4.5 SumoEnvironment, libsumo, game/cross": lambda s: run_sumo_rl(s // 4),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--case")
    a = p.parse_args()
    if a.case:
        print(json.dumps(CASES[a.case](a.steps)))
        return
    results = {c: [] for c in CASES}
    for _ in range(a.rounds):
        for c in CASES:
            out = subprocess.run(
                [sys.executable, __file__, "--steps", str(a.steps), "--case", c],
                capture_output=True, text=True,
            )
            if out.returncode != 0:
                results[c].append(None)
                print(f"{c}: failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            results[c].append(float(out.stdout.strip().splitlines()[-1]))
    base = [r for r in results["sumo-rl 1.4.5 SumoEnvironment, libsumo, game/cross"] if r]
    print("| case | env steps/s (each round) | vs sumo-rl (mean) |")
    print("|---|---|---:|")
    for c, rs in results.items():
        ok = [r for r in rs if r]
        ratio = (sum(ok) / len(ok)) / (sum(base) / len(base)) if ok and base else float("nan")
        cells = " / ".join(f"{r:,.0f}" if r else "failed" for r in rs)
        print(f"| {c} | {cells} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
