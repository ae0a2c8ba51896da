"""A PettingZoo ``ParallelEnv``: every signal of a greenwave environment is an agent."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ._handle import NativeHandle
from ._native import NativeEnv
from ._spaces import metrics, observation_space, pack, phase_index


class ParallelSignalEnv(NativeHandle, ParallelEnv):
    """Every signal an agent (named by its scenario node or SUMO traffic-light id); all
    act at once each decision interval. Spaces, rewards and masks as in
    :class:`greenwave.SignalEnv`; each agent's ``info["action_mask"]`` holds its mask. The
    episode ends for every agent together, by truncation at its length."""

    metadata = {"render_modes": [], "name": "greenwave_parallel_v0", "is_parallelizable": True}

    def __init__(self, mask_in_obs: bool = False, **kwargs: Any):
        self._native = NativeEnv(**kwargs)
        self.possible_agents = list(self._native.signal_ids())
        self.agents: list[str] = []
        self._mask_in_obs = mask_in_obs
        dims = self._native.obs_dims()
        phases = self._native.n_phases()
        self._obs_spaces = {
            a: observation_space(d, n, mask_in_obs)
            for a, d, n in zip(self.possible_agents, dims, phases)
        }
        self._act_spaces = {a: spaces.Discrete(n) for a, n in zip(self.possible_agents, phases)}
        self._rng = np.random.default_rng()

    # The same object on every call (PettingZoo's check) without functools.lru_cache, whose
    # cache would keep every instance, and its SUMO, alive.
    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _out(self, obs: list):
        masks = self._native.action_masks()
        observations = {
            a: pack(o, m, self._mask_in_obs) for a, o, m in zip(self.possible_agents, obs, masks)
        }
        infos = {a: {"action_mask": m.astype(np.int8)} for a, m in zip(self.possible_agents, masks)}
        return observations, infos

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        obs = self._native.reset(int(self._rng.integers(0, 2**63 - 1)))
        self.agents = list(self.possible_agents)
        return self._out(obs)

    def step(self, actions: dict):
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"no action for agent(s) {', '.join(missing)}")
        obs, rewards, done = self._native.step(
            [phase_index(actions[a], f"agent {a}") for a in self.possible_agents]
        )
        observations, infos = self._out(obs)
        rew = {a: float(r) for a, r in zip(self.possible_agents, rewards)}
        terminations = {a: False for a in self.possible_agents}
        truncations = {a: bool(done) for a in self.possible_agents}
        if done:
            episode = metrics(self._native)
            for a in self.possible_agents:
                infos[a]["episode_metrics"] = episode
            self.agents = []
        return observations, rew, terminations, truncations, infos

    def metrics(self) -> dict:
        """The episode's metrics so far (``greenwave eval``'s fields)."""
        return metrics(self._native)
