"""RLlib multi-agent PPO over greenwave's PettingZoo environment: every signal an agent,
one shared policy, environment copies spread over Ray's env runners.

    pip install ./python "ray[rllib]" torch
    python python/examples/rllib_ppo.py --scenario grid-4x4 --iterations 10
    # the same code on a running cluster (local or multi-node): ray start --head; then
    RAY_ADDRESS=auto python python/examples/rllib_ppo.py --scenario grid-4x4 --runners 8

`ray.init(address=...)` joins the cluster named by RAY_ADDRESS, or starts a local one;
nothing else changes between one machine and many. Prints, per iteration, the agent steps
sampled per second and the mean episode return. The shared policy needs every signal's
observation and action space to be the same (the built-in grid's and arterial's are).
"""

import argparse
import os
import time

import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.tune.registry import register_env

from greenwave import ParallelSignalEnv


def make_env(cfg):
    return ParallelPettingZooEnv(ParallelSignalEnv(**cfg))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="grid-4x4")
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--runners", type=int, default=2, help="Ray env runners (processes)")
    p.add_argument("--envs-per-runner", type=int, default=1)
    a = p.parse_args()
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False)
    register_env("greenwave", make_env)
    config = (
        PPOConfig()
        .environment("greenwave", env_config={"scenario": a.scenario})
        .framework("torch")
        .env_runners(num_env_runners=a.runners, num_envs_per_env_runner=a.envs_per_runner)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *args, **kw: "shared")
        .training(train_batch_size=4000, minibatch_size=500, num_epochs=5, lr=3e-4)
    )
    algo = config.build_algo()
    sampled_before = 0
    for i in range(a.iterations):
        t = time.time()
        result = algo.train()
        runners = result.get("env_runners", {})
        sampled = runners.get("num_agent_steps_sampled_lifetime", {})
        total = sum(sampled.values()) if isinstance(sampled, dict) else sampled
        rate = (total - sampled_before) / (time.time() - t)
        sampled_before = total
        ret = runners.get("episode_return_mean", float("nan"))
        print(f"iteration {i + 1}: {rate:,.0f} agent steps/s, episode return {ret:.1f}", flush=True)
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
