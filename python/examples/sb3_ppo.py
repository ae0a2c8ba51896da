"""Stable-Baselines3 PPO on one of greenwave's built-in junctions, then export for the
roadside controller.

    pip install ./python stable-baselines3
    python python/examples/sb3_ppo.py --steps 100000 --out export/sb3.onnx
    greenwave bundle export/sb3.onnx --key keys/site.key --out bundles/sb3
    greenwave-controller run --bundle bundles/sb3 --trust keys/site.pub --scenario single-4way

Trains with the sequencer's safety rules in the loop (requests it will not honour are
simply not honoured), evaluates the greedy policy on held-out seeds with greenwave's
episode metrics, and writes the policy in greenwave's contract with `export_sb3`.
"""

import argparse

import numpy as np
import torch
from stable_baselines3 import PPO

from greenwave import SignalEnv, export_sb3


def evaluate(model, scenario: str, seeds) -> float:
    """Mean delay (s) of the greedy policy over one-hour episodes on `seeds`."""
    delays = []
    for seed in seeds:
        env = SignalEnv(scenario=scenario)
        obs, _ = env.reset(seed=seed)
        while True:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, _, truncated, info = env.step(int(action))
            if truncated:
                delays.append(info["episode_metrics"]["mean_delay_s"])
                break
    return float(np.mean(delays))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="single-4way")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="export/sb3.onnx")
    a = p.parse_args()
    torch.set_num_threads(1)
    env = SignalEnv(scenario=a.scenario)
    model = PPO("MlpPolicy", env, seed=a.seed, device="cpu", verbose=0)
    model.learn(total_timesteps=a.steps)
    held_out = range(1000, 1005)
    print(f"greedy policy, mean delay over seeds 1000-1004: {evaluate(model, a.scenario, held_out):.2f} s")
    for path in export_sb3(model, env, a.out, seed=a.seed):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
